"""pdb on the ranks in a real ipykernel, answered through stdin as a notebook's input box answers:
``breakpoint()`` stops every rank in turn, pdb's commands work on the rank's frame, ``q`` ends the cell in
one sentence, ``PYTHONBREAKPOINT=0`` skips, ``%mgpu_debug`` opens a rank's failure, the stop button at a
prompt returns quickly, a script's ``breakpoint()`` works the same
(``engine/execution/rank_debugger.py``, ``session/rank_debugging.py``, ``magics/rank_debug.py``)."""

from __future__ import annotations

import re
import time

import pytest
from kernel_client import Kernel, debug
from processes import wait_gone

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module", params=[2, pytest.param(4, marks=pytest.mark.slow)], ids=["2ranks", "4ranks"])
def kernel(request, tmp_path_factory):
    k = Kernel()
    pids: list[int] = []
    try:
        pids = k.start_cluster(request.param)
        k.n = request.param
        k.folder = tmp_path_factory.mktemp("debugger")
        yield k
        k.km.shutdown_kernel(now=False)
    finally:
        k.close()
    assert wait_gone(pids, 10) == []


@pytest.mark.slow
def test_breakpoint_stops_every_rank_in_turn_p_prints_its_values_c_finishes(kernel):
    n = kernel.n
    reply, prompts, out = debug(
        kernel,
        "%%mgpu\nsecret = rank * 100 + 7\nbreakpoint()\nafter = secret + 1\nafter",
        [a for _ in range(n) for a in ("p secret", "c")],
    )
    assert reply["status"] == "ok", out
    # each rank asked twice in a row (p, then c), its prompt naming it; served one rank after another
    assert sorted(set(prompts)) == [f"(Pdb rank {r}) " for r in range(n)]
    assert all(prompts[i] == prompts[i + 1] for i in range(0, 2 * n, 2)) and len(prompts) == 2 * n
    for r in range(n):
        assert f"\n{r * 100 + 7}\n" in out, out  # p secret printed that rank's own value
    assert "also wait" in out and "at a pdb prompt" in out  # the other ranks were said to be waiting
    reply, prompts, out = debug(kernel, "%%mgpu\nafter", [])
    assert prompts == []
    for r in range(n):
        assert str(r * 100 + 8) in out  # the values the cell made were kept


@pytest.mark.slow
def test_n_steps_on_the_rank_and_the_namespace_stays_clean(kernel):
    answers = ["n", "p a", "c"] * kernel.n
    reply, prompts, out = debug(kernel, "%%mgpu\nbreakpoint()\na = rank + 40\nb = a * 2\nb", answers)
    assert reply["status"] == "ok", out
    assert "-> a = rank + 40" in out and "-> b = a * 2" in out
    for r in range(kernel.n):
        assert f"\n{40 + r}\n" in out  # each rank stepped over `a = rank + 40` and printed its own
    reply, _, out = debug(kernel, "%%mgpu --targets 0\n'__return__' in globals()", [])
    assert "False" in out


@pytest.mark.slow
def test_q_ends_the_cell_in_one_sentence_and_the_session_goes_on(kernel):
    answers = ["q"] + ["c"] * (kernel.n - 1)
    reply, prompts, out = debug(kernel, "%%mgpu\nstate = 'before'\nbreakpoint()\nstate = 'after'\n", answers)
    assert reply["status"] == "error" and reply["ename"] == "RankError"
    first = int(prompts[0].split()[2].rstrip(")"))  # the rank served first got the q
    assert f"debugging ended with q on rank {first} at line 4 of the cell: state = 'after'" in reply["evalue"]
    assert "did not run there" in reply["evalue"]
    reply, _, out = debug(kernel, "%%mgpu\nstate", [])
    assert reply["status"] == "ok"
    assert "'before'" in out and "'after'" in out  # rank 0 stopped there, the others went on


def test_pythonbreakpoint_0_skips_every_breakpoint(kernel):
    reply, prompts, out = debug(
        kernel,
        "%%mgpu\nimport os\nos.environ['PYTHONBREAKPOINT'] = '0'\nbreakpoint()\n"
        "del os.environ['PYTHONBREAKPOINT']\n'went on'",
        [],
    )
    assert reply["status"] == "ok" and prompts == [] and "went on" in out


@pytest.mark.slow
def test_pdb_set_trace_works_as_breakpoint_does(kernel):
    reply, prompts, out = debug(kernel, "%%mgpu\nimport pdb\npdb.set_trace()\nx = 1\n", ["p rank * 3", "c"] * kernel.n)
    assert reply["status"] == "ok", out
    assert sorted(set(prompts)) == [f"(Pdb rank {r}) " for r in range(kernel.n)]
    for r in range(kernel.n):
        assert f"\n{3 * r}\n" in out


@pytest.mark.slow
def test_post_mortem_on_the_one_rank_that_failed_prints_its_locals(kernel):
    last = kernel.n - 1
    reply, _, out = debug(
        kernel,
        f"%%mgpu\ndef f(v):\n    local_value = v * 11\n    if v == {last}:\n        1 / 0\n    return v\nf(rank)",
        [],
    )
    assert reply["status"] == "error" and f"ZeroDivisionError on rank {last}" in reply["evalue"]
    reply, prompts, out = debug(kernel, "%mgpu_debug", ["p local_value", "w", "q"])
    assert reply["status"] == "ok", out
    assert prompts == [f"(Pdb rank {last}) "] * 3
    assert f"\n{last * 11}\n" in out and "1 / 0" in out and f"post-mortem on rank {last}" in out
    # IPython's own %debug reaches the rank's frames too
    reply, prompts, out = debug(kernel, "%debug", ["p v", "q"])
    assert reply["status"] == "ok" and prompts == [f"(Pdb rank {last}) "] * 2 and f"\n{last}\n" in out
    reply, _, out = debug(kernel, "%mgpu_debug --rank 0", [])
    assert reply["status"] == "error" and "rank 0 has no failure to debug" in reply["evalue"]


@pytest.mark.slow
def test_a_breakpoint_in_a_script_run_with_mgpu_run(kernel):
    script = kernel.folder / "train.py"
    script.write_text(
        "import os\nrank = int(os.environ['RANK'])\nprint('before', rank, flush=True); loss = 2.5 + rank\n"
        "breakpoint()\nprint('done', loss)\n"
    )
    reply, prompts, out = debug(kernel, f"%mgpu_run {script}", ["p loss", "where", "c"] * kernel.n)
    assert reply["status"] == "ok", out
    # what a rank printed before it stopped is shown before its prompt, not once the prompt is answered (the
    # notebook's output stream is ordered; its input box is another channel, so the order is read there)
    first = int(prompts[0].split()[-1].rstrip(")"))
    assert out.index(f"[rank {first}] before {first}") < out.index(f"\n{2.5 + first}\n"), out
    # where: the script's frame only, none of the engine's around it (each rank: its stop, then where)
    assert out.count("train.py(5)<module>()") >= 2 * kernel.n and "jupyter_mgpu" not in out and "runpy" not in out
    # the ranks reach the line in any order; each is served once it waits, the lowest first among those
    assert sorted(set(prompts)) == [f"(Pdb rank {r}) " for r in range(kernel.n)] and len(prompts) == 3 * kernel.n
    for r in range(kernel.n):
        assert f"\n{2.5 + r}\n" in out and f"done {2.5 + r}" in out
    assert "train.py(5)<module>()" in out


def test_the_stop_button_at_a_prompt_returns_quickly_and_the_session_goes_on(kernel):
    msg_id = kernel.kc.execute("%%mgpu\nbreakpoint()\nx = 1\n", allow_stdin=True)
    request = kernel.kc.get_stdin_msg(timeout=60)
    assert request["content"]["prompt"].startswith("(Pdb rank ")
    pressed = time.monotonic()
    kernel.km.interrupt_kernel()
    reply = kernel.reply(msg_id, timeout=30)
    took = time.monotonic() - pressed
    assert took < 20, took  # the prompt would wait for ever
    assert reply["content"]["status"] == "error"
    for _ in range(2):  # ipykernel aborts a request that comes in the moment after an error: sent again
        reply, prompts, out = debug(kernel, "%%mgpu\nrank + 1", [])
        if reply["status"] != "aborted":
            break
    assert reply["status"] == "ok" and prompts == []
    for r in range(kernel.n):
        assert str(r + 1) in out


@pytest.mark.slow
def test_ranks_waiting_in_a_collective_for_a_rank_at_a_prompt_are_not_released(kernel):
    """Rank 0 sits at its prompt well past the hang rule's 2 s while the others wait in all_reduce for
    it: they are not called stuck, and the all_reduce gives the right sum once rank 0 goes on."""
    prompts: list[str] = []

    def on_stdin(msg: dict) -> None:
        prompts.append(msg["content"]["prompt"])
        time.sleep(3.5)
        kernel.kc.input("c")

    out: list[str] = []
    reply = kernel.kc.execute_interactive(
        "%%mgpu\nt = torch.ones(1) * (rank + 1)\nif rank == 0:\n    breakpoint()\n    pass\n"
        "dist.all_reduce(t)\nt.item()",
        timeout=60,
        allow_stdin=True,
        stdin_hook=on_stdin,
        output_hook=lambda m: out.append(m["content"].get("text", "") or "".join(m["content"].get("traceback", []))),
    )
    text = "".join(out)
    assert reply["content"]["status"] == "ok", text
    assert prompts == ["(Pdb rank 0) "]
    total = kernel.n * (kernel.n + 1) / 2
    assert text.count(str(total)) >= 1 and "stuck" not in text


def test_interact_is_a_console_in_the_ranks_frame_through_the_input_box(kernel):
    answers = ["interact", "z = secret_value + 1", "print(z * 2)", "exit()", "p secret_value", "c"]
    reply, prompts, out = debug(kernel, "%%mgpu --targets 1\nsecret_value = 20\nbreakpoint()\nfinal = 1", answers)
    assert reply["status"] == "ok", out
    assert prompts == [
        "(Pdb rank 1) ",
        "(rank 1) >>> ",
        "(rank 1) >>> ",
        "(rank 1) >>> ",
        "(Pdb rank 1) ",
        "(Pdb rank 1) ",
    ]
    assert "*interactive*" in out and "\n42\n" in out and "\n20\n" in out


@pytest.mark.slow
def test_a_breakpoint_in_a_function_sent_with_session_run(kernel):
    code = (
        "import jupyter_mgpu as mg\n"
        "def step(scale):\n"
        "    import torch.distributed as dist\n"
        "    inside = dist.get_rank() * scale\n"
        "    breakpoint()\n"
        "    return inside + 1\n"
        "print(mg.current().run(step, 5))"
    )
    reply, prompts, out = debug(kernel, code, ["p inside", "c"] * kernel.n)
    assert reply["status"] == "ok", out
    assert sorted(set(prompts)) == [f"(Pdb rank {r}) " for r in range(kernel.n)]
    for r in range(kernel.n):
        assert f"\n{5 * r}\n" in out
    assert str([5 * r + 1 for r in range(kernel.n)]) in out


def test_pdb_on_opens_the_failed_ranks_frames_after_a_failing_cell(kernel):
    debug(kernel, "%pdb on", [])
    try:
        reply, prompts, out = debug(
            kernel,
            "%%mgpu\nlocal_here = rank + 500\nif rank == 1:\n    raise KeyError('missing')\n",
            ["p local_here", "q"],
        )
    finally:
        debug(kernel, "%pdb off", [])
    assert reply["status"] == "error" and "KeyError on rank 1" in reply["evalue"]
    assert prompts == ["(Pdb rank 1) ", "(Pdb rank 1) "] and "\n501\n" in out


def test_an_out_of_memory_failure_is_not_kept_for_post_mortem(kernel):
    reply, _, out = debug(kernel, "%%mgpu --targets 0\nbig = torch.empty(1 << 40, dtype=torch.uint8)", [])
    assert reply["status"] == "error" and "ran out of device memory" in reply["evalue"], reply["evalue"]
    reply, prompts, out = debug(kernel, "%mgpu_debug --rank 0", [])
    assert reply["status"] == "error" and prompts == []
    assert "rank 0's last failure cannot be debugged: it ran out of memory" in reply["evalue"]


@pytest.mark.slow
def test_the_prompt_the_error_and_where_use_the_gutters_line_numbers(kernel):
    """One numbering, the editor's: ``%%mgpu`` is line 1 of the cell, as JupyterLab's gutter counts it."""
    cell = "%%mgpu --targets 0\nx = 1\nbreakpoint()\ny = x + 1\n1 / 0"  # gutter: breakpoint() 3, y = 4, 1 / 0 5
    reply, prompts, out = debug(kernel, cell, ["w", "c"])
    assert prompts == ["(Pdb rank 0) "] * 2
    assert ">(4)<module>()" in out and "-> y = x + 1" in out, out  # pdb's where: the frame at gutter line 4
    assert reply["status"] == "error" and "at line 5 of the cell: 1 / 0" in reply["evalue"], reply["evalue"]
    _, out = kernel.execute("%%mgpu --noblock --targets 0\nimport time\ntime.sleep(2.5)")
    time.sleep(1)
    _, where = kernel.execute("import jupyter_mgpu as _mg\nprint(_mg.where()[0]['line'])")
    assert where.startswith("line 3 of the cell"), where  # time.sleep(2.5) sits on gutter line 3
    kernel.execute("_.get()")


def test_a_cast_sends_each_line_to_every_rank_at_once_and_groups_equal_answers(kernel):
    """``:all`` at the first prompt: then ``p`` is answered by every rank in one reply, the rank whose value
    differs apart, and one ``c`` finishes the cell on all of them: three lines, not two per rank."""
    n = kernel.n
    last = n - 1
    reply, prompts, out = debug(
        kernel,
        f"%%mgpu\nx = torch.ones(3 if rank == {last} else 2, 8)\nbreakpoint()\ny = x.sum().item()\ny",
        [":all", "p x.shape", "c"],
    )
    assert reply["status"] == "ok", out
    group = f"ranks 0–{last} ({n})" if n > 2 else "ranks 0, 1"
    assert prompts[0].startswith("(Pdb rank ") and prompts[1:] == [f"(Pdb {group}) "] * 2, prompts
    others = f"ranks 0–{last - 1} ({last})" if n > 3 else ("rank 0" if n == 2 else "ranks 0, 1")
    assert f"{others}: torch.Size([2, 8]) · rank {last}: torch.Size([3, 8])" in out, out
    assert "not at a prompt" not in out, out
    assert f"Out[rank {last}]: 24.0" in out and "Out[rank 0]: 16.0" in out, out


def test_a_cast_n_steps_every_rank_of_the_group_and_their_equal_answers_come_once(kernel):
    """``:all`` then ``n``: every rank steps over the same line, their equal answers once (not one per rank),
    then ``p`` answers each rank's own value in one reply."""
    n = kernel.n
    group = f"ranks 0–{n - 1} ({n})" if n > 2 else "ranks 0, 1"
    reply, prompts, out = debug(kernel, "%%mgpu\nbreakpoint()\na = rank + 40\nb = a * 2\nb", [":all", "n", "p a", "c"])
    assert reply["status"] == "ok", out
    assert prompts[1:] == [f"(Pdb {group}) "] * 3, prompts
    # every rank stepped to the next line, equal answers once (the session numbers a cell alike on every rank,
    # though earlier --targets cells ran on some ranks only)
    stepped = re.findall(r"<mgpu-cell-\d+>\(4\)<module>\(\)\n-> b = a \* 2", out)
    assert len(stepped) == 1 and out.count("-> b = a * 2") == 1, out
    assert " · ".join(f"rank {r}: {40 + r}" for r in range(n)) in out, out
    reply, _, out = debug(kernel, "%%mgpu\nb", [])
    assert all(f"Out[rank {r}]: {2 * (40 + r)}" in out for r in range(n)), out


def test_a_cast_that_names_no_rank_of_the_session_is_said_and_the_prompt_asks_again(kernel):
    reply, prompts, out = debug(kernel, "%%mgpu\nbreakpoint()\nz = 1", [":ranks 7-9", ":rank x", ":all", "c"])
    assert reply["status"] == "ok", out
    assert f"mgpu: ranks 7–9 (3) are not in this session (0 to {kernel.n - 1})" in out or kernel.n > 7, out
    assert "mgpu: 'x' in ':rank x' is not a rank or a range of ranks such as 0-3" in out, out
    assert prompts[-1].startswith("(Pdb ranks 0") and len(prompts) == 4, prompts


def test_mgpu_debug_all_opens_every_failed_rank_at_once_and_a_cast_answers_for_all(kernel):
    reply, _, _ = debug(kernel, "%%mgpu\ndef g(v):\n    local_value = v * 11\n    1 / 0\ng(rank)", [])
    assert reply["status"] == "error"
    reply, prompts, out = debug(kernel, "%mgpu_debug --all", [":all", "p local_value", "c"])
    assert reply["status"] == "ok", out
    group = "ranks 0, 1" if kernel.n == 2 else f"ranks 0–{kernel.n - 1} ({kernel.n})"
    assert f"mgpu: post-mortem on ranks {', '.join(map(str, range(kernel.n)))}; :all casts" in out, out
    assert prompts[1:] == [f"(Pdb {group}) "] * 2, prompts
    answers = " · ".join(f"rank {r}: {r * 11}" for r in range(kernel.n))
    assert answers in out, out


def _shown_under(kernel, msg_id: str, text: str, timeout: float = 30) -> dict:
    """The display message of the cell ``msg_id`` whose text starts with ``text``, as it arrives on iopub."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        msg = kernel.kc.get_iopub_msg(timeout=max(0.1, end - time.monotonic()))
        data = msg["content"].get("data") or {}
        if msg["parent_header"].get("msg_id") == msg_id and data.get("text/plain", "").startswith(text):
            return msg
    raise AssertionError(f"{text!r} was not shown under the cell within {timeout} s")


def test_a_noblock_cells_prompt_is_said_under_it_and_served_before_the_next_cell_runs(kernel):
    """Nothing waits for a ``--noblock`` cell: a line under it says which rank waits at a prompt; a cell that
    only looks (``%mgpu_where``) runs without the prompt; the next other cell serves it first, then runs."""
    while kernel.kc.iopub_channel.msg_ready():  # what earlier cells left on iopub
        kernel.kc.get_iopub_msg(timeout=1)
    msg_id = kernel.kc.execute("%%mgpu --noblock\nif rank == 1:\n    breakpoint()\nv = rank + 70\nv", allow_stdin=True)
    assert kernel.reply(msg_id)["content"]["status"] == "ok"
    line = _shown_under(kernel, msg_id, "mgpu: rank 1 waits")
    assert line["content"]["data"]["text/plain"] == (
        "mgpu: rank 1 waits at a pdb prompt at line 4 of the cell: run any cell to answer it"
    )
    reply, prompts, out = debug(kernel, "pending = _\nimport jupyter_mgpu as _mg\nprint(_mg.where()[1]['state'])", [])
    assert reply["status"] == "ok" and prompts == [] and "debugging" in out, out
    reply, prompts, out = debug(kernel, "print('this cell ran')", ["n", "p v", "c"])
    assert reply["status"] == "ok", out
    assert prompts == ["(Pdb rank 1) "] * 3, prompts
    assert "mgpu: rank 1 of the --noblock cell waits at a pdb prompt: answered here, before this cell runs" in out
    assert out.index("\n71\n") < out.index("this cell ran"), out  # served first, then the cell's own code
    reply, prompts, out = debug(kernel, "print(pending.get())", [])
    assert reply["status"] == "ok" and prompts == [], out
    assert str([70 + r for r in range(kernel.n)]) in out or "71" in out, out
