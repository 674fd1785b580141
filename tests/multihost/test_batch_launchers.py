"""ipyparallel's Slurm and MPI launchers for real: a one-node Slurm (Debian's slurm-wlm and munge, slurmctld
and slurmd) and Debian's Open MPI, in a namespace host of their own (its loopback and a private address,
its /run, /etc/slurm and /tmp), with the notebook's kernel in the same host.
"""

from __future__ import annotations

import re
import time

import pytest
from lab_kernel import LabKernel
from netns_lab import Lab, ensure_packages
from slurm_lab import start_slurm

pytestmark = pytest.mark.cluster

PACKAGES = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "munged": "munge",
    "mpiexec": "openmpi-bin",
}
OPTIONS = "--mem-per-device 256MiB --timeout 30 --no-dashboard"
MPI_AS_ROOT = "--launcher-args '--allow-run-as-root --oversubscribe'"


@pytest.fixture(scope="module")
def batch_host():
    ensure_packages(PACKAGES)
    lab = Lab(["batchhost"], network=False)
    try:
        start_slurm(lab.first)
        yield lab
    finally:
        lab.close()


@pytest.fixture(scope="module")
def kernel(batch_host):
    k = LabKernel(batch_host.first, batch_host.workdir)
    try:
        k.ok("%load_ext jupyter_mgpu\nimport torch, jupyter_mgpu as mg")
        yield k
    finally:
        k.close()


def _engines_left(host) -> list[str]:
    out = []
    for p in host.processes():
        try:
            cmd = " ".join(p.cmdline())
        except Exception:
            continue
        if any(m in cmd for m in ("ipyparallel", "mpi_ipengine", "mpiexec", "orted", "srun")):
            out.append(cmd[:120])
    return out


def _quiet(host, timeout: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while _engines_left(host) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _engines_left(host)


def _ranks_meet(kernel: LabKernel, local_rank_var: str) -> None:
    out = kernel.ok(
        f"%%mgpu\nimport os\nx = torch.full((2,), float(rank + 1))\ndist.all_reduce(x)\n"
        f"print('AT', x.tolist(), os.environ['LOCAL_RANK'], os.environ.get('{local_rank_var}'))"
    )
    lines = sorted(set(ln for ln in out.splitlines() if " AT " in ln))
    assert lines == ["[rank 0] AT [3.0, 3.0] 0 0", "[rank 1] AT [3.0, 3.0] 1 1"], out
    kernel.ok(
        "x = torch.randn(1001, 9)\nd = mg.scatter(x, mg.Shard(1))\n"
        "ok = [torch.equal(d.gather(), x), sorted(mg.current().cluster.local_ranks) == [0, 1]]"
    )
    assert kernel.value("ok") == [True, True]  # same host and namespaces: copies by address


def test_slurm_launcher(kernel, batch_host):
    h = batch_host.first
    out = kernel.ok(f"%mgpu_init 2 --launcher slurm --per-host 2 --partition debug --time 5 {OPTIONS}", timeout=300)
    assert re.search(r"2 engines ready .* on 1 host \(batchhost\)", out), out
    job = h.sh("squeue -h -o '%i %T %j %D %C %P'").split()
    assert job[1:] and job[1] == "RUNNING" and job[2].startswith("ipengine-") and job[5] == "debug", job
    details = h.sh(f"scontrol show job {job[0]}")
    assert "NumTasks=2" in details and "TimeLimit=00:05:00" in details, details
    _ranks_meet(kernel, "SLURM_LOCALID")
    kernel.ok("%mgpu_shutdown")
    deadline = time.monotonic() + 30
    while h.sh("squeue -h").strip() and time.monotonic() < deadline:  # the job completes (CG), then leaves
        time.sleep(0.2)
    assert h.sh("squeue -h").strip() == ""
    assert _quiet(h) == []


def test_mpi_launcher(kernel, batch_host):
    out = kernel.ok(f"%mgpu_init 2 --launcher mpi {MPI_AS_ROOT} {OPTIONS}", timeout=300)
    assert re.search(r"2 engines ready .* on 1 host \(batchhost\)", out), out
    _ranks_meet(kernel, "OMPI_COMM_WORLD_LOCAL_RANK")
    kernel.ok("%mgpu_shutdown")
    assert _quiet(batch_host.first) == []


def test_a_launcher_that_fails_is_reported_at_once(kernel, batch_host):
    t0 = time.monotonic()
    reply, out = kernel.execute(
        f"%mgpu_init 2 --launcher mpi --launcher-args '--no-such-option' {OPTIONS}", timeout=300
    )
    assert reply["status"] == "error", out
    assert re.search(
        r"the mpi launcher \(started from batchhost\) ended after 0 of 2 engines registered; "
        r"it said: .*mpiexec.*no-such-option",
        out,
    ), out
    assert time.monotonic() - t0 < 30  # not the 60 s registration wait
    assert _quiet(batch_host.first) == []
