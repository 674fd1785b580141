"""``Session.run_script`` / ``%mgpu_run``: a script or module run on the ranks as torchrun runs it on
its workers, its output streamed rank-prefixed; the rank side is ``engine/script_run.py``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jupyter_mgpu.engine import script_run
from jupyter_mgpu.errors import MgpuError

if TYPE_CHECKING:
    from jupyter_mgpu.session.core import Session


def run_script(
    s: Session,
    target: str,
    args: Sequence[Any] = (),
    targets: Any = None,
    *,
    module: bool = False,
    timeout: float | None = None,
) -> None:
    """Check the request here, then run it on ``targets`` (every rank by default)."""
    if not isinstance(target, (str, os.PathLike)) or not str(target).strip():
        raise MgpuError(f"run_script needs a script path or module name, got {target!r}")
    if isinstance(args, (str, bytes)):
        raise MgpuError(f"run_script takes its arguments as a list, got the string {args!r}")
    target = os.fspath(target)
    local = set(getattr(s.cluster, "local_ranks", range(s.world_size)))
    if not module and not os.path.isfile(target) and local:  # ranks on this host read the same file
        raise MgpuError(f"{target} is not a file (working directory {os.getcwd()})")
    what = f"-m {target}" if module else os.path.basename(target)
    s.run(
        script_run.run_script,
        target,
        [str(a) for a in args],
        module,
        targets=targets,
        stream=True,
        timeout=timeout,
        label=f"%mgpu_run {what}",
    )
