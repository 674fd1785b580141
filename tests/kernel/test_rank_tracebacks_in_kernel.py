"""What a real ipykernel sends for a failure on the ranks and for a %mgpu_run: the one-line error, then
each failed rank's whole traceback folded (HTML <details>, IPython's colours) under it; %mgpu_tb prints
them coloured; the group notes of a script are one stdout line, never stderr
(``magics/rank_tracebacks.py``, ``engine/rank_traceback.py``, ``session/group_notes.py``)."""

from __future__ import annotations

import pytest
from kernel_client import Kernel
from processes import wait_gone

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel()
    pids: list[int] = []
    try:
        pids = k.start_cluster(2)
        k.folder = tmp_path_factory.mktemp("tracebacks")
        (k.folder / "checks.py").write_text("def check(x):\n    if x:\n        raise ValueError(f'bad {x}')\n")
        yield k
        k.km.shutdown_kernel(now=False)
    finally:
        k.close()
    assert wait_gone(pids, 10) == []


def messages(k: Kernel, code: str) -> tuple[dict, list[tuple[str, dict]]]:
    """Run ``code``; the reply and every output message (type, content) in the order they came."""
    got: list[tuple[str, dict]] = []
    reply = k.kc.execute_interactive(code, timeout=120, output_hook=lambda m: got.append((m["msg_type"], m["content"])))
    return reply["content"], got


def test_a_cell_failing_on_one_rank_shows_one_line_then_that_ranks_traceback_folded(kernel):
    reply, got = messages(
        kernel, f"%%mgpu\nimport sys\nsys.path.insert(0, {str(kernel.folder)!r})\nimport checks\nchecks.check(rank)"
    )
    assert reply["status"] == "error" and reply["ename"] == "RankError"
    kinds = [kind for kind, _ in got if kind in ("error", "display_data")]
    assert kinds == ["error", "display_data"]  # the folded tracebacks come under the one line
    error = next(c for kind, c in got if kind == "error")
    assert len(error["traceback"]) == 1
    assert "ValueError on rank 1: bad 1 at line 3 of check() in " in error["traceback"][0]
    assert "called from line 5 of the cell: checks.check(rank)" in error["traceback"][0]  # the gutter's line
    html = next(c for kind, c in got if kind == "display_data")["data"]["text/html"]
    assert html.count("<details") == 1 and "Traceback on rank 1</summary>" in html
    assert "%%mgpu, line 5" in html  # the cell's frame, named as IPython names a notebook cell's
    assert "checks.py" in html and "<span style=" in html  # coloured as IPython colours a traceback
    assert "runpy" not in html and "jupyter_mgpu" not in html


def test_mgpu_tb_prints_the_tracebacks_in_colour(kernel):
    reply, got = messages(kernel, "%mgpu_tb --rank 1")
    assert reply["status"] == "ok"
    text = "".join(c.get("text", "") for kind, c in got if kind == "stream")
    assert text.startswith("rank 1:\n") and "\x1b[" in text and "checks.py" in text


def test_a_script_run_writes_nothing_on_stderr_and_its_group_note_once(kernel):
    script = kernel.folder / "train.py"
    script.write_text(
        "import torch, torch.distributed as dist\ndist.init_process_group()\nt = torch.ones(1)\n"
        "dist.all_reduce(t)\nprint('sum', t.item())\ndist.destroy_process_group()\n"
    )
    reply, got = messages(kernel, f"%mgpu_run {script}")
    assert reply["status"] == "ok"
    streams = [(c["name"], c["text"]) for kind, c in got if kind == "stream"]
    assert [name for name, _ in streams if name == "stderr"] == []
    text = "".join(t for _, t in streams)
    assert "[rank 0] sum 2.0" in text and "[rank 1] sum 2.0" in text
    assert text.count("mgpu: init_process_group() joined the session's group") == 1


@pytest.mark.slow
def test_a_library_call_past_two_seconds_says_what_it_waits_for_and_the_line_goes(kernel):
    reply, got = messages(
        kernel,
        "import time, jupyter_mgpu as _mg\n"
        "_mg.current().run(time.sleep, 3.2, label='a slow library call')\n"
        "print('done')",
    )
    assert reply["status"] == "ok"
    lines = [(kind, c["data"]["text/plain"]) for kind, c in got if kind in ("display_data", "update_display_data")]
    assert lines[0] == ("display_data", "mgpu: waiting for a slow library call · 2 s · ranks 0, 1 still at it"), lines
    assert ("update_display_data", "mgpu: waiting for a slow library call · 3 s · ranks 0, 1 still at it") in lines
    assert lines[-1] == ("update_display_data", ""), lines  # gone when the call came back
    reply, got = messages(kernel, "_mg.current().run(time.sleep, 0.5, label='a quick one')")
    assert not [kind for kind, _ in got if "display" in kind]  # a short wait says nothing


@pytest.mark.slow
def test_a_first_import_past_two_seconds_is_said_in_the_cell_and_the_line_goes(kernel):
    (kernel.folder / "mgpu_slow_import.py").write_text("import time\ntime.sleep(2.8)\n")
    reply, got = messages(
        kernel, f"%%mgpu\nimport sys\nsys.path.insert(0, {str(kernel.folder)!r})\nimport mgpu_slow_import\nprint('in')"
    )
    assert reply["status"] == "ok"
    lines = [c["data"]["text/plain"] for kind, c in got if kind in ("display_data", "update_display_data")]
    said = [text for text in lines if "importing" in text]
    assert said and said[0].startswith("mgpu: ranks 0, 1 running line 4 of the cell for "), lines
    assert said[0].endswith(", importing mgpu_slow_import"), lines  # the editor's line of the import
    assert lines[-1] == "", lines  # gone when the cell ended


def test_a_dead_rank_is_offered_a_restart_and_mgpu_restart_brings_it_back_keeping_the_others(kernel):
    messages(kernel, "%%mgpu\nkept = rank + 5")
    reply, got = messages(kernel, "%%mgpu\nimport os, signal\nif rank == 1:\n    os.kill(os.getpid(), signal.SIGKILL)")
    assert reply["status"] == "error" and reply["ename"] == "EngineDiedError"
    error = next(c for kind, c in got if kind == "error")["traceback"][0]
    assert "rank 1 died (killed by SIGKILL)" in error and "or %mgpu_restart --rank 1 (mg.restart([1]))" in error
    reply, got = messages(kernel, "%mgpu_restart --rank 0")
    assert reply["status"] == "error" and "rank 0 is alive: only a dead rank is restarted" in str(reply["evalue"])
    reply, got = messages(kernel, "%mgpu_restart --rank 1")
    assert reply["status"] == "ok", got
    said = "".join(c.get("data", {}).get("text/plain", "") for kind, c in got if kind == "execute_result")
    assert said.startswith("rank 1 started again in ") and "\nrank 1 is new: kept is not defined there" in said, said
    reply, got = messages(
        kernel, "%%mgpu\nx = torch.ones(1) * (rank + 1)\ndist.all_reduce(x)\nprint(x.item(), kept if rank == 0 else '')"
    )
    text = "".join(c.get("text", "") for kind, c in got if kind == "stream")
    assert reply["status"] == "ok" and "[rank 0] 3.0 5" in text and "[rank 1] 3.0" in text, text
