"""``with mg.profile() as p:`` — torch.profiler on every rank around anything that runs there (``%%mgpu``
cells, ``mg.*`` calls, ``%mgpu_run`` scripts), collected into the notebook without touching files, every
rank's clock mapped onto the notebook's (the rank side is ``engine/records/rank_profiler.py``).

After the block: ``p.summary()`` (a DataFrame by rank: compute, collective and waiting time, how often the
rank came last), ``p.collectives()`` (a row per collective instance), ``p.timeline()`` (every rank on one
time axis), ``p.export_chrome_trace(path)`` (one Perfetto trace) and ``p.export_dir(path)`` (the
per-rank Kineto files that Holistic Trace Analysis and TensorBoard read). ``p.clock`` says each rank's
offset and its uncertainty: ranks on the notebook's host share its clock (offset 0); others are measured
by the round trip of a clock read, the shortest of several.
"""

from __future__ import annotations

import json
import os
import socket
import time
import zlib
from pathlib import Path
from typing import Any

from jupyter_mgpu import rundir as rd
from jupyter_mgpu.engine.records import rank_profiler
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.profiling import profile_data
from jupyter_mgpu.profiling.profile_data import PROFILE_CALL, RankRecord
from jupyter_mgpu.session import lifecycle

CLOCK_READS = 5


def clock_offsets(s: Any, hosts: dict[int, str]) -> dict[int, dict[str, float]]:
    """Each rank's clock minus the notebook's (ns) and the uncertainty (ns): 0 and 0 on the notebook's
    host, else the midpoint of the shortest of ``CLOCK_READS`` round trips."""
    here = socket.gethostname()
    out = {r: {"offset_ns": 0.0, "uncertainty_ns": 0.0} for r in range(s.world_size)}
    remote = [r for r in range(s.world_size) if hosts.get(r) not in (None, here)]
    for r in remote:
        best = None
        for _ in range(CLOCK_READS):
            t0 = time.time_ns()
            (theirs,) = s.run(rank_profiler.clock, targets=[r], label=PROFILE_CALL)
            t1 = time.time_ns()
            if best is None or t1 - t0 < best[1] - best[0]:
                best = (t0, t1, theirs)
        assert best is not None
        out[r] = {"offset_ns": best[2] - (best[0] + best[1]) / 2, "uncertainty_ns": (best[1] - best[0]) / 2}
    return out


class Profile:
    """One ``mg.profile()`` block: started on entering, its answers once it ends."""

    def __init__(
        self, session: Any = None, record_shapes: bool = False, with_stack: bool = False, profile_memory: bool = False
    ):
        self.session = session or lifecycle.current()
        self.options = {"record_shapes": record_shapes, "with_stack": with_stack, "profile_memory": profile_memory}
        self.ranks: list[RankRecord] = []
        self.clock: dict[int, dict[str, float]] = {}
        self.running = False
        self.seconds = {"collect": 0.0}

    def __enter__(self) -> Profile:
        s = self.session
        s.check_alive()
        hosts = dict(getattr(s.cluster, "hosts", {}) or {})
        self.clock = clock_offsets(s, hosts)
        s.run(rank_profiler.start, label=PROFILE_CALL, **self.options)
        self.running = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """End the profile on every rank and collect it (what leaving the ``with`` block does)."""
        if not self.running:
            return
        self.running = False
        start = time.perf_counter()
        reports = self.session.run(rank_profiler.stop, label=PROFILE_CALL)
        self.ranks = [
            RankRecord(
                rank=rep["rank"],
                host=rep["host"],
                offset_ns=int(self.clock.get(rep["rank"], {}).get("offset_ns", 0)),
                trace=json.loads(zlib.decompress(rep["trace"])),
                calls=rep["calls"],
                collectives=rep["collectives"],
                issued=rep.get("issued") or [],
            )
            for rep in reports
        ]
        self.seconds["collect"] = time.perf_counter() - start
        try:  # the sidebar draws the session's last profile (server/manager.py reads it)
            data = profile_data.sidebar_data(self.ranks, time.time())
            rd.write_json(Path(self.session.runtime_dir) / rd.PROFILE_FILE, data)
        except OSError:
            pass

    def _need(self) -> None:
        if self.running:
            raise MgpuError("the profile is still recording; its answers come once the with block ends")
        if not self.ranks:
            raise MgpuError("this profile has no data: it never ran (use it as `with mg.profile() as p:`)")

    # -- the answers ------------------------------------------------------------------------
    def summary(self) -> Any:
        """A pandas DataFrame indexed by rank: compute_s, collective_s, wait_s, last_to_arrive, calls_s."""
        import pandas as pd

        self._need()
        return pd.DataFrame(profile_data.summary_rows(self.ranks)).set_index("rank")

    def collectives(self) -> Any:
        """A pandas DataFrame, one row per collective instance (op, number, bytes, each rank's arrival
        skew in ms, who came last, bus bandwidth once all had arrived)."""
        import pandas as pd

        self._need()
        rows = profile_data.collective_rows(self.ranks)
        t0 = min((r["start_ns"] for r in rows), default=0)
        for r in rows:
            r["start_ms"] = (r.pop("start_ns") - t0) / 1e6
            r["wait_ms"] = (r.pop("last_arrival_ns") - t0) / 1e6 - r["start_ms"]
            r["end_ms"] = (r.pop("end_ns") - t0) / 1e6
        return pd.DataFrame(rows)

    def timeline(self) -> Any:
        """The ranks as rows on one time axis (a plotly figure): calls, ops, collectives, waiting."""
        from jupyter_mgpu.widgets.profile_timeline import timeline_figure

        self._need()
        return timeline_figure(self.ranks)

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> str:
        """Write one Chrome/Perfetto trace of every rank (a process per rank) to ``path``."""
        self._need()
        Path(path).write_text(profile_data.dumps(profile_data.merged_chrome_trace(self.ranks)))
        return os.fspath(path)

    def export_dir(self, path: str | os.PathLike[str]) -> list[str]:
        """Write each rank's Kineto trace, as torch wrote it, to ``path/rank-<r>.json`` (HTA, TensorBoard)."""
        self._need()
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        out = []
        for rec in self.ranks:
            target = folder / f"rank-{rec.rank}.json"
            target.write_text(json.dumps(rec.trace))
            out.append(str(target))
        return out

    def __repr__(self) -> str:
        state = "recording" if self.running else f"{len(self.ranks)} ranks"
        return f"<jupyter_mgpu Profile: {state}>"


def profile(
    session: Any = None, record_shapes: bool = False, with_stack: bool = False, profile_memory: bool = False
) -> Profile:
    """``with mg.profile() as p:`` profile every rank while the block runs (see this module's docstring)."""
    return Profile(session, record_shapes=record_shapes, with_stack=with_stack, profile_memory=profile_memory)
