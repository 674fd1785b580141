"""The options of ``%mgpu_init`` and ``mg.init``, declared once.

:class:`InitOptions` is the one object that carries a start request from the magic (whose arguments
are generated from its fields: :func:`argparse_arguments`) or from ``mg.init`` (whose keywords are its
fields: :meth:`InitOptions.from_keywords`) through the checks (``session/options.py``) to the local
cluster or ipyparallel's launchers (``launch/``). A new option is one field here, with its help text.
Pure: no torch, no IPython, no I/O.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from dataclasses import dataclass, field, fields
from typing import Any

from jupyter_mgpu.errors import MgpuError

LOCAL = "local"  # options of any start
LAUNCH = "launch"  # options of engines started by ipyparallel's launchers (--launcher, --hosts, --connect)
HANG_AFTER_S = 2.0  # --hang-after's default: seconds a collective's ranks may all sit blocked before they are named
STATUS_AFTER_S = 10.0  # --status-after's default: seconds a collective waits before the cell's live status line


def _opt(help: str, group: str = LOCAL, *, flag: bool = False) -> dict[str, Any]:
    """A field's metadata: its ``%mgpu_init`` help, its group, whether it is an on/off switch."""
    return {"help": help, "group": group, "flag": flag}


@dataclass(frozen=True)
class InitOptions:
    """A request to start a cluster: what ``%mgpu_init`` and ``mg.init`` take, field for field."""

    n: int | None = None
    cpu: bool = field(default=False, metadata=_opt("use CPU virtual devices even where GPUs are visible", flag=True))
    devices: list[int] | str | None = field(default=None, metadata=_opt("device indices to use, e.g. 0,2"))
    backend: str | None = field(default=None, metadata=_opt("torch.distributed backend (gloo on CPU, nccl on GPU)"))
    mem_per_device: str | int | None = field(default=None, metadata=_opt("memory budget per device, e.g. 2GiB"))
    timeout: float | None = field(
        default=None,
        metadata=_opt(
            "collective timeout in seconds (default torch's: 30 min for gloo, 10 for nccl; a stuck rank is named within seconds either way)"
        ),
    )
    hang_after: float | None = field(
        default=None,
        metadata=_opt(
            f"seconds the ranks of a collective may all sit blocked before the stuck ones are named and released (default {HANG_AFTER_S:g}; 0: never)"
        ),
    )
    status_after: float | None = field(
        default=None,
        metadata=_opt(
            f"seconds a collective may wait before the running cell gets a live status line of what each rank does (default {STATUS_AFTER_S:g})"
        ),
    )
    no_collective_checks: bool = field(
        default=False,
        metadata=_opt("do not compare each collective's op, dtype, shape and root across ranks", flag=True),
    )
    restart: bool = field(default=False, metadata=_opt("replace a running cluster", flag=True))
    telemetry_period: float = 0.1  # seconds between memory samples (mg.init only)
    launcher: str | None = field(
        default=None,
        metadata=_opt(
            "start the engines with ipyparallel's launcher: local, ssh, mpi, slurm or pbs (docs/multihost.md)",
            LAUNCH,
        ),
    )
    hosts: str | None = field(
        default=None, metadata=_opt("engines over SSH, per host: node1:4,node2:4 (ranks in this order)", LAUNCH)
    )
    per_host: int | str | None = field(
        default=None, metadata=_opt("engines per host (slurm: --ntasks-per-node; mpi: --npernode)", LAUNCH)
    )
    interface: str | None = field(
        default=None, metadata=_opt("network interface the cluster uses on every host, e.g. eth1 or ib0", LAUNCH)
    )
    connect: str | None = field(
        default=None, metadata=_opt("an ipyparallel cluster already running: its cluster-<id>.json file", LAUNCH)
    )
    partition: str | None = field(default=None, metadata=_opt("batch queue (slurm partition, pbs queue)", LAUNCH))
    time: str | None = field(default=None, metadata=_opt("batch time limit, e.g. 1:00:00", LAUNCH))
    account: str | None = field(default=None, metadata=_opt("slurm account", LAUNCH))
    launcher_args: str | list[str] | None = field(
        default=None,
        metadata=_opt("extra arguments for the launcher's program (ssh, mpiexec, sbatch or qsub), quoted", LAUNCH),
    )

    @classmethod
    def from_keywords(cls, n: int | None = None, **options: Any) -> InitOptions:
        """The request ``mg.init(n, **options)`` makes; one sentence for a name that is not an option."""
        unknown = sorted(set(options) - set(option_names()))
        if unknown:
            close = difflib.get_close_matches(unknown[0], option_names(), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise MgpuError(f"mg.init has no option {unknown[0]!r}; {hint}its options are {', '.join(option_names())}")
        return cls(n=n, **options)

    @property
    def launched(self) -> bool:
        """Whether the engines come from ipyparallel's launchers rather than this host's supervisor."""
        return any(getattr(self, k) not in (None, "", [], ()) for k in ("launcher", "hosts", "connect"))

    def given(self, group: str) -> dict[str, Any]:
        """The options of ``group`` that were set (not left at ``None``)."""
        return {f.name: getattr(self, f.name) for f in _fields(group) if getattr(self, f.name) is not None}

    def replace(self, **changes: Any) -> InitOptions:
        """A copy with ``changes`` (checked values replacing what the user wrote)."""
        return dataclasses.replace(self, **changes)


def _fields(group: str | None = None) -> list[dataclasses.Field[Any]]:
    return [f for f in fields(InitOptions) if f.metadata and (group is None or f.metadata["group"] == group)]


def option_names(group: str | None = None) -> list[str]:
    """The keyword names of ``mg.init`` (of one group, or all of them but ``n``)."""
    if group is None:
        return [f.name for f in fields(InitOptions) if f.name != "n"]
    return [f.name for f in _fields(group)]


def argparse_arguments() -> list[tuple[str, dict[str, Any]]]:
    """``(flag, argparse keywords)`` for each option ``%mgpu_init`` takes, in declaration order."""
    out = []
    for f in _fields():
        flag = "--" + f.name.replace("_", "-")
        if f.metadata["flag"]:
            out.append((flag, {"action": "store_true", "help": f.metadata["help"]}))
        else:
            out.append((flag, {"default": None, "help": f.metadata["help"]}))
    return out


def keyword_signature(return_annotation: Any = inspect.Signature.empty) -> inspect.Signature:
    """``(n=None, *, cpu=False, ...)``: the signature ``mg.init?`` shows, made from the fields."""
    params = [inspect.Parameter("n", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)]
    params += [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
        for f in fields(InitOptions)
        if f.name != "n"
    ]
    return inspect.Signature(params, return_annotation=return_annotation)
