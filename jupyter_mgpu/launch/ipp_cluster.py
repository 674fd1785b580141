"""ipyparallel's own ``Cluster`` and launchers, configured for one jupyter_mgpu cluster.

Nothing here starts a process itself: the controller runs through ipyparallel's local controller
launcher (its command wrapped in our kernel watchdog, ``engine/startup/controller.py``), the engines
through the launcher the user named (``local``, ``ssh``, ``mpi``, ``slurm``, ``pbs``) with
ipyparallel's own options, or ``--connect`` joins a running cluster. The engines are stock
``ipengine``; what makes them ranks happens afterwards, through ipyparallel
(``engine/startup/launched_setup.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jupyter_mgpu.cluster.processes import HEART_SILENCE_MS
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.launch.launcher_options import LaunchOptions

CONTROLLER_PING_MS = 100
REMOTE_ENGINES_DIR = ".local/share/jupyter/runtime/jupyter-mgpu-engines"  # relative to the SSH user's home
SSH_CHECK_TIMEOUT = 20.0
# the program each launcher needs on the kernel's host
PROGRAMS = {"ssh": "ssh", "mpi": "mpiexec", "slurm": "sbatch", "pbs": "qsub"}


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Send this process's stderr (file descriptor 2, which the launchers' ssh, sbatch and mpiexec
    inherit) to ``path`` for the block: their chatter goes to the cluster's log, not the notebook."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


class LoopThread:
    """One event loop in a thread for everything ipyparallel's launchers do for this cluster
    (their exit watchers call back into it for as long as the cluster lives)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mgpu-launchers", daemon=True)
        self.thread.start()

    def run(self, fn: Callable[[], Any], timeout: float) -> Any:
        """Run ``fn()`` (which may return a coroutine) in the loop; its result, within ``timeout`` s."""

        async def call() -> Any:
            out = fn()
            return (await out) if asyncio.iscoroutine(out) or isinstance(out, asyncio.Future) else out

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def kernel_config() -> Any:
    """The ipyparallel configuration the user gave this kernel (``%config``, profile files), copied."""
    from traitlets.config import Config

    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:
        shell = None
    return copy.deepcopy(shell.config) if shell is not None else Config()


def preflight(opts: LaunchOptions, host: str, cpu: bool = False, mem_per_device: int | None = None) -> None:
    """Before anything starts: the launcher's program is installed; every SSH host answers, has
    ``--interface`` and holds the devices asked of it (so bad input fails in seconds, with no engine to stop)."""
    program = PROGRAMS.get(opts.launcher)
    if program and shutil.which(program) is None:
        raise MgpuError(
            f"the {opts.launcher} launcher needs {program}, which is not installed on {host} (the notebook's host)"
        )
    if opts.launcher == "ssh":
        check_ssh_hosts(opts, cpu, mem_per_device)


def check_ssh_hosts(opts: LaunchOptions, cpu: bool = False, mem_per_device: int | None = None) -> None:
    """Every host of ``--hosts`` runs our Python over SSH (asked in parallel), has ``--interface`` when one is
    given, and holds its engines' devices (the checks ``launch/ranks.py`` makes again once they run); else
    name the first host that does not."""
    from jupyter_mgpu.launch import ranks

    names = [h for h, _ in opts.hosts]  # each once (launcher_options refuses a host named twice)
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        results = dict(zip(names, pool.map(lambda h: ssh_facts(opts, h), names)))
    for name in names:
        if isinstance(results[name], str):
            raise MgpuError(results[name])
    facts: dict[str, dict[str, Any]] = {n: r for n, r in results.items() if isinstance(r, dict)}
    if opts.interface:
        for name in names:
            if not facts[name].get("address"):
                raise ranks.no_interface(opts.interface, name.split("@", 1)[-1], str(facts[name].get("interfaces")))
    if any(f.get("gpus") is None for f in facts.values()):
        return  # a host whose GPUs only torch can count: its engines are checked once they run
    asked = [
        ranks.Engine(-1, facts[name], host=name.split("@", 1)[-1], local_rank=i)
        for name, k in opts.hosts
        for i in range(k)
    ]
    ranks.devices(asked, cpu, mem_per_device, placed="asked for")


FACTS = "MGPU-HOST-FACTS "


def ssh_facts(opts: LaunchOptions, host: str) -> dict[str, Any] | str:
    """What ``host`` (as ``--hosts`` names it) has (``launched_setup.host_facts``), asked over SSH; or why it
    cannot run our engines, in one sentence."""
    code = (
        "import json, ipyparallel; from jupyter_mgpu.engine.startup.launched_setup import host_facts; "
        f"print({FACTS!r} + json.dumps(host_facts({opts.interface!r}, torch_may_count=False)))"
    )
    cmd = [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={int(SSH_CHECK_TIMEOUT / 2)}",
        *opts.launcher_args,
        host,
        "--",
        remote_python(),
        "-c",
        shlex.quote(code),
    ]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=SSH_CHECK_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"cannot reach {host} over SSH: no answer within {SSH_CHECK_TIMEOUT:g} s"
    if run.returncode == 255:
        last = (run.stderr.strip().splitlines() or ["ssh failed"])[-1]
        return f"cannot reach {host} over SSH: {last}"
    found = [ln[len(FACTS) :] for ln in run.stdout.splitlines() if ln.startswith(FACTS)]
    if run.returncode != 0 or not found:
        last = (run.stderr.strip().splitlines() or [""])[-1]
        return (
            f"{host} answers over SSH but cannot run {remote_python()} with jupyter_mgpu and "
            f"ipyparallel ({last}); install them there or set SSHLauncher.remote_python"
        )
    facts: dict[str, Any] = json.loads(found[-1])
    return facts


def ssh_problem(opts: LaunchOptions, host: str) -> str | None:
    """Why ``host`` cannot run our engines over SSH, in one sentence; None if it can."""
    found = ssh_facts(opts, host)
    return found if isinstance(found, str) else None


def configured_controller_ip() -> str | None:
    """The controller address the user's ipyparallel configuration gives (``Cluster.controller_ip`` or
    ``IPController.ip``), unless it means every interface."""
    cfg = kernel_config()
    for section, key in (("Cluster", "controller_ip"), ("IPController", "ip")):
        value = cfg[section].get(key) if section in cfg else None
        if isinstance(value, str) and value.strip() not in ("", "*", "0.0.0.0"):
            return value.strip()
    return None


def remote_python() -> str:
    """The Python the SSH launcher runs on other hosts: the user's ``SSHLauncher.remote_python``, else this one."""
    cfg = kernel_config()
    configured = cfg.get("SSHLauncher", {}).get("remote_python") if "SSHLauncher" in cfg else None
    return configured or sys.executable


def make_cluster(
    opts: LaunchOptions, profile_dir: Path, cluster_id: str, kernel: tuple[int, float], address: str
) -> Any:
    """ipyparallel's ``Cluster`` for this request: our watchdog-wrapped controller on ``address`` only."""
    import ipyparallel as ipp

    cfg = kernel_config()
    cfg.LocalControllerLauncher.controller_cmd = [
        sys.executable,
        "-m",
        "jupyter_mgpu.engine.startup.controller",
        str(kernel[0]),
        repr(kernel[1]),
    ]
    if opts.launcher == "ssh":
        if "remote_python" not in cfg.get("SSHLauncher", {}):
            cfg.SSHLauncher.remote_python = sys.executable
        if "remote_profile_dir" not in cfg.get("SSHLauncher", {}):
            # beside the engines' own directories, not among the other hosts' cluster directories (whose
            # cleanup would take it for a stale cluster); removed over SSH when the cluster stops
            cfg.SSHLauncher.remote_profile_dir = f"{REMOTE_ENGINES_DIR}/{cluster_id}-profile"
        cfg.SSHLauncher.ssh_args = list(cfg.SSHLauncher.get("ssh_args", [])) + list(opts.launcher_args)
    elif opts.launcher == "mpi":
        cfg.MPILauncher.mpi_args = (
            list(cfg.MPILauncher.get("mpi_args", []))
            + list(opts.launcher_args)
            + (_mpi_per_host(opts.per_host) if opts.per_host else [])
        )
        if "engine_cmd" not in cfg.get("MPIEngineSetLauncher", {}) and not _has_mpi4py():
            cfg.MPIEngineSetLauncher.engine_cmd = [sys.executable, "-m", "jupyter_mgpu.engine.startup.mpi_ipengine"]
    elif opts.launcher == "slurm":
        sbatch = ["sbatch", *opts.launcher_args]
        if opts.per_host:
            sbatch.append(f"--ntasks-per-node={opts.per_host}")
        cfg.SlurmEngineSetLauncher.submit_command = sbatch
        for key, value in (("queue", opts.partition), ("timelimit", opts.time), ("account", opts.account)):
            if value:
                setattr(cfg.SlurmEngineSetLauncher, key, value)
    elif opts.launcher == "pbs":
        cfg.PBSEngineSetLauncher.submit_command = ["qsub", *opts.launcher_args]
        if opts.partition:
            cfg.PBSEngineSetLauncher.queue = opts.partition
    return ipp.Cluster(
        engines=opts.launcher,
        profile_dir=str(profile_dir),
        cluster_id=cluster_id,
        controller_ip=address,
        controller_location=address,
        # the profile dir on its command line too: the sidebar and cleanup know a cluster's processes by it
        controller_args=[
            "--usethreads",
            f"--ping={CONTROLLER_PING_MS}",
            # dropped after HEART_SILENCE_MS of silence, not ipyparallel's 10 misses (1 s at this ping)
            f"--HeartMonitor.max_heartmonitor_misses={HEART_SILENCE_MS // CONTROLLER_PING_MS}",
            "--log-level=WARN",
            f"--profile-dir={profile_dir}",
        ],
        config=cfg,
        delay=0,
        shutdown_atexit=False,
        log_level=40,
        load_profile=False,
    )


def _has_mpi4py() -> bool:
    import importlib.util

    return importlib.util.find_spec("mpi4py") is not None


def _mpi_per_host(k: int) -> list[str]:
    """``--npernode K`` for Open MPI, ``-ppn K`` for MPICH-style mpiexec."""
    try:
        version = subprocess.run(["mpiexec", "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    return ["--npernode", str(k)] if "Open MPI" in version or "OpenRTE" in version else ["-ppn", str(k)]


def _start_on_host(cluster: Any, host: str, k: int, i: int, set_id: str) -> Callable[[], Any]:
    """What the loop thread runs to start ``k`` engines on ``host`` over SSH (engine set ``set_id``); their
    environment names the host as the user wrote it (``MGPU_HOST_LABEL``) and its place in ``--hosts``."""
    env = {"MGPU_HOST_LABEL": host.split("@", 1)[-1], "MGPU_HOST_ORDER": str(i)}
    return lambda: cluster.start_engines(k, engine_set_id=set_id, engines={host: k}, environment=env)


def start_over_ssh(cluster: Any, loop: LoopThread, host: str, k: int, i: int, set_id: str, timeout: float) -> str:
    """Start ``k`` engines on ``host`` (entry ``i`` of ``--hosts``) over SSH; the engine set id, or one sentence."""
    try:
        engine_set: str = loop.run(_start_on_host(cluster, host, k, i, set_id), timeout)
    except (subprocess.CalledProcessError, RuntimeError, OSError) as exc:
        out = getattr(exc, "output", None) or b""
        out = out.decode(errors="replace") if isinstance(out, bytes) else str(out)
        last = (out.strip().splitlines() or [str(exc)])[-1]
        raise MgpuError(f"starting engines on {host.split('@', 1)[-1]} over SSH failed: {last}") from None
    return engine_set


def start_engines(cluster: Any, opts: LaunchOptions, loop: LoopThread, timeout: float) -> list[str]:
    """Start the engines with the user's launcher; returns the engine set ids.

    SSH: one engine set per host, whose environment names the host as the user wrote it
    (``MGPU_HOST_LABEL``), so ranks follow the order of ``--hosts``; devices are pinned per engine
    from its local rank, on the engine itself.
    """
    if opts.launcher == "ssh":
        return [
            start_over_ssh(cluster, loop, host, k, i, f"host{i}", timeout) for i, (host, k) in enumerate(opts.hosts)
        ]
    return [loop.run(lambda: cluster.start_engines(opts.n), timeout)]


def start_one(cluster: Any, opts: LaunchOptions, loop: LoopThread, host: str, set_id: str, timeout: float) -> str:
    """One more engine through the launcher that started the others (a rank started again): on ``host``, the
    label of an ``--hosts`` entry, over SSH, or one more local engine; the engine set id."""
    if opts.launcher == "ssh":
        i = next(i for i, (h, _) in enumerate(opts.hosts) if h.split("@", 1)[-1] == host)
        return start_over_ssh(cluster, loop, opts.hosts[i][0], 1, i, set_id, timeout)
    started: str = loop.run(lambda: cluster.start_engines(1, engine_set_id=set_id), timeout)
    return started


def set_stopped(cluster: Any, set_id: str) -> bool:
    """Whether engine set ``set_id``'s launcher has already ended (its engine gone, or never started)."""
    engine_set = getattr(cluster, "engines", {}).get(set_id)
    return engine_set is None or getattr(engine_set, "state", None) == "after"


def launcher_stopped(cluster: Any) -> bool:
    """Whether an engine launcher (mpiexec, one engine's ssh, ...) has already ended while engines were awaited."""
    for engine_set in list(getattr(cluster, "engines", {}).values()):
        if getattr(engine_set, "state", None) == "after":
            return True
        if any(getattr(el, "state", None) == "after" for el in list(getattr(engine_set, "launchers", {}).values())):
            return True
    return False


def launcher_output(cluster: Any, limit: int = 6) -> str:
    """The last lines the engine launchers printed (their log files), for error messages."""
    lines: list[str] = []
    for engine_set in list(getattr(cluster, "engines", {}).values()):
        try:
            out = engine_set.get_output(remove=False) or ""
        except Exception:
            out = ""
        lines += [ln.strip() for ln in out.splitlines() if ln.strip()]
    return " | ".join(lines[-limit:])


def stop(cluster: Any, loop: LoopThread, log: Path, timeout: float = 20.0) -> None:
    """Stop engines (the launcher's own way: ssh kill, scancel, ...) and the controller; never raises."""
    with stderr_to(log):
        for name in ("stop_engines", "stop_controller"):
            try:
                loop.run(getattr(cluster, name), timeout)
            except Exception:
                pass
    try:
        cluster.remove_cluster_file()
    except Exception:
        pass


def remove_remote_files(opts: LaunchOptions, cluster_id: str, timeout: float = 20.0) -> None:
    """SSH: remove what the cluster left in each host's engines folder (ipyparallel's copy of the connection
    files, the directory of an engine that was killed); best effort, all hosts at once."""
    if opts.launcher != "ssh":
        return
    target = f"{REMOTE_ENGINES_DIR}/{cluster_id}-"  # cluster ids are [0-9a-f-]: safe in a remote shell

    def clean(host: str) -> None:
        try:
            subprocess.run(
                ["ssh", "-o", "BatchMode=yes", *opts.launcher_args, host, "--", "rm", "-rf", "--", f"{target}*"],
                capture_output=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            pass

    with concurrent.futures.ThreadPoolExecutor(len(opts.hosts)) as pool:
        list(pool.map(clean, [h for h, _ in opts.hosts]))


def connect_cluster(path: str) -> Any:
    """An ipyparallel ``Cluster`` loaded from a running cluster's file (``ipcluster start`` writes it)."""
    import ipyparallel as ipp

    try:
        return ipp.Cluster.from_file(path)
    except (OSError, ValueError, KeyError) as exc:
        raise MgpuError(f"--connect: {path} is not an ipyparallel cluster file ({exc})") from None
