"""A one-node Slurm inside a namespace host (``netns_lab.Host``): munge, slurmctld and slurmd on the host's
own private address, its configuration in a private ``/etc/slurm``; all of it ends with the host."""

from __future__ import annotations

import time

from netns_lab import Host

SLURM_CONF = """\
ClusterName=lab
SlurmctldHost={host}({address})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/run/slurm/state
SlurmdSpoolDir=/run/slurm/spool
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/run/slurm/slurmctld.log
SlurmdLogFile=/run/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
NodeName={host} NodeAddr={address} CPUs=4 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


def start_slurm(host: Host, timeout: float = 60) -> None:
    """munge and a one-node Slurm (slurmctld and slurmd on the host's loopback), ready for jobs."""
    host.sh(
        "\n".join(
            [
                "set -e",
                "mkdir -p /run/lab/munge /run/munge /run/slurm/state /run/slurm/spool /run/lab/slurm-etc",
                "chmod 0700 /run/lab/munge",
                "head -c 1024 /dev/urandom > /run/lab/munge/munge.key",
                "chmod 0400 /run/lab/munge/munge.key",
                "mount --bind /run/lab/slurm-etc /etc/slurm",
            ]
        )
    )
    host.path("/etc/slurm/slurm.conf").write_text(SLURM_CONF.format(host=host.name, address=host.address))
    host.popen(
        [
            "munged",
            "--foreground",
            "--force",
            "--key-file=/run/lab/munge/munge.key",
            "--seed-file=/run/lab/munge/seed",
            "--log-file=/run/lab/munge/munged.log",
            "--pid-file=/run/munge/munged.pid",
        ],
        "munged.log",
    )
    deadline = time.monotonic() + timeout
    while not host.path("/run/munge/munge.socket.2").exists():
        assert time.monotonic() < deadline, "munged did not start: " + (host.workdir / "munged.log").read_text()[-1000:]
        time.sleep(0.05)
    host.popen(["slurmctld", "-D", "-i"], "slurmctld.log")
    host.popen(["slurmd", "-D"], "slurmd.log")
    state = ""
    while state not in ("idle", "mixed", "allocated"):
        assert time.monotonic() < deadline, f"the Slurm node is {state!r}, not idle: " + host.sh(
            "cat /run/slurm/slurmctld.log /run/slurm/slurmd.log | tail -20", check=False
        )
        time.sleep(0.2)
        state = host.sh("sinfo -h -o %T", check=False).strip()
