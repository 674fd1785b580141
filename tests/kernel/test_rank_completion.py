"""Tab and Shift-Tab in ``%%mgpu`` cells of a real ipykernel come from rank 0's namespace, within the
budget, also while rank 0 runs a cell; elsewhere the kernel answers as before
(``magics/rank_completion.py``, ``engine/execution/completion_server.py``)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from kernel_client import Kernel
from processes import busy_machine, wait_gone

from jupyter_mgpu.magics import rank_completion as rc

pytestmark = pytest.mark.kernel

SET_BUDGET = "import jupyter_mgpu.magics.rank_completion as _rc; _rc.LOADED_BUDGET = {}"
RANK_NAMES = "%%mgpu\nonly_on_ranks_xyz = 1\nmodel = torch.nn.Linear(3, 4)"


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    pids: list[int] = []
    try:
        pids = k.start_cluster(2)
        reply, out = k.execute(RANK_NAMES)
        assert reply["status"] == "ok", out
        reply, out = k.execute("print('RANK0PID', __import__('jupyter_mgpu').current().cluster.engine_pids[0])")
        k.rank0_pid = int(out.split("RANK0PID")[1].split()[0])
        yield k
        k.km.shutdown_kernel(now=False)
    finally:
        k.close()
    assert wait_gone(pids, 10) == []


def complete(k: Kernel, code: str, cursor_pos: int | None = None) -> tuple[dict, float]:
    start = time.monotonic()
    reply = k.kc.complete(code, len(code) if cursor_pos is None else cursor_pos, reply=True, timeout=10)
    return reply["content"], time.monotonic() - start


def test_tab_in_an_mgpu_cell_completes_names_only_the_ranks_have(kernel):
    content, took = complete(kernel, "%%mgpu\nonly_on_r")
    assert content["status"] == "ok"
    assert "only_on_ranks_xyz" in content["matches"]
    assert (content["cursor_start"], content["cursor_end"]) == (7, 16)
    kinds = content["metadata"]["_jupyter_types_experimental"]
    assert {"start": 7, "end": 16, "text": "only_on_ranks_xyz"}.items() <= kinds[0].items()
    assert took < rc.LOADED_BUDGET  # the rank answered: no fallback after its budget
    reply, out = kernel.execute("print('only_on_ranks_xyz' in globals())")
    assert out.strip() == "False"  # the notebook itself never had it


def test_tab_after_a_dot_completes_attributes_of_the_ranks_model(kernel):
    code = "%%mgpu --targets 0\ny = model.we"
    content, _ = complete(kernel, code)
    assert "weight" in content["matches"]
    assert code[content["cursor_start"] : content["cursor_end"]] == "we"


def test_shift_tab_shows_the_ranks_object(kernel):
    code = "%%mgpu\nmodel"
    reply = kernel.kc.inspect(code, len(code), detail_level=0, reply=True, timeout=10)["content"]
    assert reply["status"] == "ok" and reply["found"] is True
    assert "Linear" in reply["data"]["text/plain"]
    reply = kernel.kc.inspect("%%mgpu\nnot_defined_anywhere", 12, reply=True, timeout=10)["content"]
    assert reply["found"] is False


def test_other_cells_and_the_magic_line_are_answered_by_the_kernel(kernel):
    plain, _ = complete(kernel, "only_on_r")
    assert plain["matches"] == []
    line, _ = complete(kernel, "%%mgpu\nonly_on_r", 4)  # the cursor on the %%mgpu line: the kernel's magics
    assert "%%mgpu" in line["matches"] and "only_on_ranks_xyz" not in line["matches"]
    first, _ = complete(kernel, "%%mgpu_x\nonly_on_r")  # another magic's cell
    assert "only_on_ranks_xyz" not in first["matches"]
    reply = kernel.kc.inspect("model", 5, reply=True, timeout=10)["content"]
    assert reply["found"] is False  # the notebook has no model


@pytest.mark.parametrize("busy", ["time.sleep(3)", "t = time.time() + 3\nwhile time.time() < t:\n    pass"])
@pytest.mark.slow
def test_a_busy_rank_0_still_answers_within_the_budget(kernel, busy):
    kernel.execute(f"%%mgpu --noblock --targets 0\nimport time\n{busy}")
    time.sleep(0.5)  # rank 0 is in the cell now
    took = []
    for _ in range(5):
        content, t = complete(kernel, "%%mgpu\nonly_on_r")
        took.append(t)
        assert "only_on_ranks_xyz" in content["matches"]  # answered by rank 0's thread, not the fallback
    print(f"busy rank 0 ({busy.splitlines()[-1].strip()}): completions in {[round(t * 1e3) for t in took]} ms")
    assert max(took) < rc.LOADED_BUDGET
    reply, out = kernel.execute("%%mgpu\nprint('after', rank)")  # the cell queued behind the busy one
    assert reply["status"] == "ok" and "[rank 0] after 0" in out, out


def _wait_stopped(pid: int, timeout: float = 10) -> None:
    """Until every thread of ``pid`` is stopped: SIGSTOP stops a process only once one of its threads is
    scheduled to take it, and on a busy machine its completion thread may answer a request before then."""
    deadline = time.monotonic() + timeout
    while True:
        states = {psutil.Process(pid).status()} | {
            Path(f"/proc/{pid}/task/{t}/stat").read_text().rsplit(")", 1)[1].split()[0]
            for t in os.listdir(f"/proc/{pid}/task")
        }
        if states <= {psutil.STATUS_STOPPED, "T"}:
            return
        assert time.monotonic() < deadline, f"rank 0 (pid {pid}) not stopped after {timeout} s: {states}"
        time.sleep(0.005)


def test_a_stopped_rank_0_falls_back_to_the_kernel_within_the_budget(kernel):
    # a loaded machine's budget made long, so the fallback on stale telemetry is told apart from the budget's
    # end by a wide margin, not by 0.5 s
    reply, out = kernel.execute(SET_BUDGET.format(9.0) + "\nx_in_the_notebook = 2")
    assert reply["status"] == "ok", (reply, out)
    os.kill(kernel.rank0_pid, signal.SIGSTOP)
    try:
        _wait_stopped(kernel.rank0_pid)
        content, took = complete(kernel, "%%mgpu\nx_in_the_not")
    finally:
        os.kill(kernel.rank0_pid, signal.SIGCONT)
        kernel.execute(SET_BUDGET.format(rc.LOADED_BUDGET))
    print(f"stopped rank 0: the kernel's own answer after {took * 1e3:.0f} ms")
    # the notebook's own namespace answered (said otherwise: what the kernel alone completes)
    assert "x_in_the_notebook" in content["matches"], (content, took, complete(kernel, "x_in_the_not"))
    assert took < 6  # once its telemetry stood still (STALE_S), not after the loaded machine's budget (9 s here)
    content, _ = complete(kernel, "%%mgpu\nonly_on_r")  # and rank 0 answers again once it runs
    assert "only_on_ranks_xyz" in content["matches"]
    reply, out = kernel.execute("%%mgpu\nprint('still', only_on_ranks_xyz)")
    assert reply["status"] == "ok" and "[rank 0] still 1" in out, out


LOADED_CELL = """%%mgpu
import sys, time
x = torch.full((2,), float(rank + 1))
for i in range(30):
    print(rank, i, device, x * 2)
if rank == 0:  # a line written in parts, as print's text and newline are when a loaded machine flushes between
    sys.stdout.write("0 written"); sys.stdout.flush(); time.sleep(0.6); print(" in parts")
else:
    time.sleep(0.3); print("1 at once")
"""


@pytest.mark.slow
def test_on_a_loaded_machine_lines_stay_whole_and_tab_and_shift_tab_still_answer_from_the_ranks(kernel):
    """Notebook 01's kind of cell, Tab and Shift-Tab with every core kept busy by other processes (a shared
    GPU node): each rank's lines whole and in order on both cell channels, a line written in parts never
    joined to another rank's, the ranks' names found (slower, never "not found")."""
    took = []
    with busy_machine():
        try:
            for channel in ("direct", "ipyparallel"):
                kernel.execute(f"import jupyter_mgpu as _mg\n_mg.current().cell_channel = {channel!r}")
                reply, out = kernel.execute(LOADED_CELL)
                assert reply["status"] == "ok", out
                for r, last in ((0, "0 written in parts"), (1, "1 at once")):
                    whole = f"{r} {{}} cpu tensor([{2 * (r + 1)}., {2 * (r + 1)}.])"
                    mine = [ln for ln in out.splitlines() if ln.startswith(f"[rank {r}]")]
                    assert mine == [f"[rank {r}] " + whole.format(i) for i in range(30)] + [f"[rank {r}] {last}"], out
        finally:
            kernel.execute("_mg.current().cell_channel = 'direct'")
        for _ in range(3):
            content, t = complete(kernel, "%%mgpu\nonly_on_r")
            took.append(t)
            assert "only_on_ranks_xyz" in content["matches"]
            code = "%%mgpu\nmodel"
            reply = kernel.kc.inspect(code, len(code), detail_level=0, reply=True, timeout=10)["content"]
            assert reply["found"] is True and "Linear" in reply["data"]["text/plain"]
    print(f"loaded machine: completions in {[round(t * 1e3) for t in took]} ms")
