"""What ``%mgpu_init`` asks of ipyparallel's launchers, checked before anything starts.

``--launcher`` takes ipyparallel's engine launcher names (``local``, ``ssh``, ``mpi``, ``slurm``,
``pbs``); ``--hosts node1:4,node2:4`` means the SSH launcher with that many engines per host;
``--connect`` takes the cluster file of an ipyparallel cluster that is already running.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from dataclasses import dataclass, field

from jupyter_mgpu.errors import MgpuError

LAUNCHERS = ("local", "ssh", "mpi", "slurm", "pbs")
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9_.-]+@)?[A-Za-z0-9_.-]+$")
_IFACE_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")


@dataclass
class LaunchOptions:
    """A checked request for engines started by ipyparallel (or found in a running cluster)."""

    launcher: str  # one of LAUNCHERS, or "connect"
    n: int | None = None
    hosts: list[tuple[str, int]] = field(default_factory=list)  # ssh: (user@host, engines there), in rank order
    per_host: int | None = None
    interface: str | None = None
    connect: str | None = None
    partition: str | None = None
    time: str | None = None
    account: str | None = None
    launcher_args: list[str] = field(default_factory=list)

    @property
    def host_names(self) -> list[str]:
        """The hosts as the user named them, without ``user@``."""
        return [h.split("@", 1)[-1] for h, _ in self.hosts]


def _count(value: object, what: str) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise MgpuError(f"{what} must be a whole number, got {value!r}") from None
    if n < 1:
        raise MgpuError(f"{what} must be at least 1, got {n}")
    return n


def parse_hosts(text: str, per_host: int | None) -> list[tuple[str, int]]:
    """``node1:4,mgpu@node2:4`` (or ``node1,node2`` with ``--per-host``) -> ``[(host, engines), ...]``."""
    hosts = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        name, _, count = part.partition(":")
        if not _HOST_RE.match(name):
            raise MgpuError(f"--hosts: {name!r} is not a host name (write host or user@host, then :engines)")
        if count:
            n = _count(count, f"--hosts: the engine count of {name}")
            if per_host is not None and n != per_host:
                raise MgpuError(f"--hosts gives {name} {n} engines but --per-host says {per_host}; give one")
        elif per_host is not None:
            n = per_host
        else:
            raise MgpuError(f"--hosts: give the engines on {name} as {name}:N (or use --per-host N)")
        hosts.append((name, n))
    if not hosts:
        raise MgpuError("--hosts names no host; write e.g. --hosts node1:4,node2:4")
    names = [h for h, _ in hosts]
    if len(set(names)) != len(names):
        raise MgpuError(f"--hosts names a host twice: {','.join(names)}")
    return hosts


def check_connection_file(path: str) -> str:
    """An existing ipyparallel cluster file of this user (not readable or writable by others)."""
    full = os.path.abspath(os.path.expanduser(path))
    try:
        st = os.stat(full)
    except FileNotFoundError:
        raise MgpuError(
            f"--connect: {full} does not exist (start the cluster with ipcluster first, "
            "or give the path of its cluster-<id>.json)"
        ) from None
    except OSError as exc:
        raise MgpuError(f"--connect: cannot read {full} ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise MgpuError(f"--connect: {full} is not a file")
    if st.st_uid != os.getuid():
        raise MgpuError(
            f"--connect: {full} belongs to another user (uid {st.st_uid}); connect only to your own clusters"
        )
    if st.st_mode & 0o022:
        raise MgpuError(
            f"--connect: {full} can be changed by other users (mode {stat.S_IMODE(st.st_mode):o}); "
            "make it private (chmod 600) first"
        )
    return full


def parse(
    n: int | None,
    launcher: str | None = None,
    hosts: str | None = None,
    per_host: int | str | None = None,
    interface: str | None = None,
    connect: str | None = None,
    partition: str | None = None,
    time: str | None = None,
    account: str | None = None,
    launcher_args: str | list[str] | None = None,
) -> LaunchOptions:
    """Check the launch options of ``%mgpu_init`` / ``mg.init``; one clear sentence for anything wrong."""
    per = _count(per_host, "--per-host") if per_host is not None else None
    if isinstance(launcher_args, str):
        text = launcher_args.strip()
        if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":  # a magic's argument keeps its quotes
            text = text[1:-1]
        try:
            extra = shlex.split(text)
        except ValueError as exc:
            raise MgpuError(f"--launcher-args cannot be read: {exc}") from None
    else:
        extra = list(launcher_args or [])
    if interface is not None and not _IFACE_RE.match(str(interface)):
        raise MgpuError(f"--interface takes an interface name such as eth0 or ib0, got {interface!r}")
    if connect is not None:
        if launcher or hosts or per is not None:
            raise MgpuError(
                "--connect joins a cluster that is already running: leave out --launcher, --hosts and --per-host"
            )
        return LaunchOptions("connect", n=n, interface=interface, connect=check_connection_file(connect))
    name = str(launcher).strip().lower() if launcher else ("ssh" if hosts else None)
    if name is None:
        raise MgpuError("no launcher given; use --launcher local|ssh|mpi|slurm|pbs, --hosts or --connect")
    if name not in LAUNCHERS:
        raise MgpuError(f"unknown launcher {launcher!r}; ipyparallel's launchers are {', '.join(LAUNCHERS)}")
    if hosts and name != "ssh":
        raise MgpuError(f"--hosts starts engines over SSH; it does not go with --launcher {name}")
    if name == "ssh" and not hosts:
        raise MgpuError("--launcher ssh needs --hosts, e.g. --hosts node1:4,node2:4")
    if (partition or time or account) and name not in ("slurm", "pbs"):
        raise MgpuError(f"--partition, --time and --account are batch-system options; --launcher {name} has no queue")
    if account and name != "slurm":
        raise MgpuError("--account is a Slurm option; give a PBS account in --launcher-args")
    opts = LaunchOptions(
        name, interface=interface, partition=partition, time=time, account=account, launcher_args=extra, per_host=per
    )
    if hosts:
        opts.hosts = parse_hosts(hosts, per)
        total = sum(k for _, k in opts.hosts)
        if n is not None and n != total:
            raise MgpuError(f"asked for {n} engines but --hosts lists {total}; give one or make them agree")
        opts.n = total
        return opts
    if n is None:
        raise MgpuError(f"--launcher {name} needs the number of engines, e.g. %mgpu_init 8 --launcher {name}")
    opts.n = n
    if per is not None and per > n:
        raise MgpuError(f"--per-host {per} is more than the {n} engines asked for")
    if per is not None and name == "pbs":
        raise MgpuError('--per-host with pbs: give the layout in --launcher-args (e.g. "-l nodes=2:ppn=4")')
    return opts
