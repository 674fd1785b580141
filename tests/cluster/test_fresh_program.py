"""Each %mgpu_run is a fresh program, as torchrun's new workers are: nothing an earlier run (or a cell)
imported or set changes what the next run sees, the cells keep their namespace and settings, and
`--fresh` runs on brand-new processes. On the shared 2-rank session (timeout 5 s)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
from ipshell import shell
from IPython.core.error import UsageError

from jupyter_mgpu.errors import RankError

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def ip():
    return shell()


def _write(path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return str(path)


MAIN = """
import helper, sys
print("helper", helper.WHO, helper.__file__)
"""


def _cell(s, code: str) -> list[str]:
    return s.run_cell(code, stream=False)


def test_helpers_of_two_folders_and_an_edited_helper_are_each_picked_up(s2, tmp_path, capfd):
    a = _write(tmp_path / "a" / "main.py", MAIN)
    b = _write(tmp_path / "b" / "main.py", MAIN)
    _write(tmp_path / "a" / "helper.py", 'WHO = "a"\n')
    _write(tmp_path / "b" / "helper.py", 'WHO = "b"\n')
    s2.run_script(a)
    assert "[rank 1] helper a" in capfd.readouterr().out
    s2.run_script(b)
    assert "[rank 1] helper b " + str(tmp_path / "b" / "helper.py") in capfd.readouterr().out
    _write(tmp_path / "a" / "helper.py", 'WHO = "a, edited"\n')
    s2.run_script(a)
    assert "[rank 0] helper a, edited" in capfd.readouterr().out


def test_a_cell_that_still_refers_to_a_dropped_module_is_told_once(s2, tmp_path, capfd):
    script = _write(tmp_path / "main.py", MAIN)
    _write(tmp_path / "helper.py", 'WHO = "1"\ndef f():\n    return WHO\n')
    _cell(s2, f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nimport helper\nfrom helper import f")
    try:
        _write(tmp_path / "helper.py", 'WHO = "2, longer"\ndef f():\n    return WHO\n')
        s2.run_script(script)
        out = capfd.readouterr().out
        assert "[rank 0] helper 2, longer" in out
        assert (
            out.count(
                "mgpu: the run imported helper afresh; the cells' f, helper still refer to the copy the cells imported"
            )
            == 1
        )
        assert _cell(s2, "f()") == ["'1'", "'1'"]  # the cells' names are left as they were
    finally:
        _cell(s2, f"sys.path.remove({str(tmp_path)!r}); del helper, f, sys.modules['helper']")


SETTINGS = """
import builtins, logging, os, random, sys, warnings
import torch
print("dtype", torch.get_default_dtype(), "grad", torch.is_grad_enabled(), "precision",
      torch.get_float32_matmul_precision(), "print", builtins.print.__module__,
      "filters", len(warnings.filters), "handlers", len(logging.getLogger().handlers),
      "env", os.environ.get("MGPU_TEST_VAR"), "cwd", os.getcwd() == sys.argv[1], "seed", torch.initial_seed())
torch.set_default_dtype(torch.float64)
torch.set_grad_enabled(False)
torch.set_float32_matmul_precision("medium")
warnings.filterwarnings("ignore", message="mgpu test")
logging.basicConfig(level=logging.DEBUG)
os.environ["MGPU_TEST_VAR"] = "set by the run"
os.chdir("/")
_print = builtins.print
builtins.print = lambda *a, **k: _print("patched", *a, **k)
"""


def test_settings_a_run_changes_reach_neither_the_cells_nor_the_next_run(s2, tmp_path, capfd):
    script = _write(tmp_path / "settings.py", SETTINGS)
    before = _cell(
        s2, "import os, builtins, torch\n(torch.get_default_dtype(), os.getcwd(), builtins.print.__module__)"
    )
    _cell(s2, "torch.set_default_dtype(torch.float16); os.environ['MGPU_TEST_VAR'] = 'from the cells'")
    try:
        for _ in range(2):
            s2.run_script(script, [os.getcwd()])
            out = capfd.readouterr().out
            line = next(x for x in out.splitlines() if x.startswith("[rank 1] dtype"))
            # a new program's settings, whatever the cells or the last run set; the cells' environment inherited
            assert "dtype torch.float32 grad True precision highest print builtins" in line
            assert "env from the cells cwd True" in line and "patched" not in out
        seeds = [x.split("seed ")[1] for x in out.splitlines() if "seed " in x]
        assert len(set(seeds)) == 2  # fresh seeds on each rank
        after = _cell(s2, "(torch.get_default_dtype(), os.getcwd(), builtins.print.__module__)")
        assert after[0] == before[0].replace("float32", "float16")
        assert (
            _cell(s2, "(torch.is_grad_enabled(), torch.get_float32_matmul_precision(), os.environ['MGPU_TEST_VAR'])")[1]
            == "(True, 'highest', 'from the cells')"
        )
    finally:
        _cell(s2, "torch.set_default_dtype(torch.float32); del os.environ['MGPU_TEST_VAR']")
    assert _cell(s2, "(torch.get_default_dtype(), os.getcwd(), builtins.print.__module__)") == before


LIBRARIES = """
import os, sys, torch
from accelerate import PartialState
from lightning.fabric.utilities.rank_zero import rank_zero_only
import lightning as L
state = PartialState(cpu=True)
print("accelerate", state.distributed_type, state.num_processes, "rank_zero", rank_zero_only.rank,
      "seed", os.environ.get("PL_GLOBAL_SEED"))
if sys.argv[1] == "spoil":
    state._shared_state["distributed_type"] = "SPOILT"
    rank_zero_only.rank = 7
    L.seed_everything(42, verbose=False)
"""


def test_accelerates_and_lightnings_state_do_not_survive_a_run(s2, tmp_path, capfd):
    script = _write(tmp_path / "libraries.py", LIBRARIES)
    cells_state = (
        "from accelerate.state import PartialState\nsorted((k, str(v)) for k, v in PartialState._shared_state.items())"
    )
    before = _cell(s2, cells_state)  # empty, or what an Accelerator() in an earlier cell made
    s2.run_script(script, ["spoil"])
    first = capfd.readouterr().out
    s2.run_script(script, ["look"])
    second = capfd.readouterr().out
    for out in (first, second):
        assert "[rank 1] accelerate DistributedType.MULTI_CPU 2 rank_zero 1 seed None" in out
    assert _cell(s2, cells_state) == before  # the cells' accelerate state is theirs again, whatever the runs did


@pytest.mark.slow
def test_fresh_runs_on_new_processes_and_leaves_the_sessions_ranks_alone(s2, tmp_path, capfd, ip):
    script = _write(
        tmp_path / "who.py",
        """
        import os, sys
        import torch.distributed as dist
        dist.init_process_group()
        print("pid", os.getpid(), "seen", "mgpu_marker" in dir(sys.modules["__main__"]), dist.get_world_size())
        """,
    )
    _cell(s2, "import os\nmgpu_marker = os.getpid()")
    try:
        session_pids = sorted(int(p) for p in _cell(s2, "os.getpid()"))
        ip.run_line_magic("mgpu_run", f"--fresh {script}")
        out = capfd.readouterr().out
        pids = sorted(int(x.split("pid ")[1].split()[0]) for x in out.splitlines() if " pid " in x)
        assert len(pids) == 2 and not set(pids) & set(session_pids)
        assert "seen False 2" in out
        assert _cell(s2, "mgpu_marker == os.getpid()") == ["True", "True"]  # the session's namespace is intact
    finally:
        _cell(s2, "del mgpu_marker")


def test_init_process_group_arguments_are_checked_as_torch_checks_them(s2, tmp_path):
    script = _write(
        tmp_path / "device.py",
        """
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo", device_id=torch.device("cpu"))
        """,
    )
    with pytest.raises(RankError) as err:
        s2.run_script(script)
    assert str(err.value).startswith(
        "ValueError on ranks 0, 1: init_process_group device_id parameter must be an accelerator with an index "
        "at line 4 of "
    )
    assert "device.py" in str(err.value)


@pytest.mark.slow
def test_a_scripts_own_timeout_is_honoured_for_its_run_only(s2, tmp_path):
    script = _write(
        tmp_path / "slow.py",
        """
        import time
        from datetime import timedelta
        import torch.distributed as dist
        dist.init_process_group("gloo", timeout=timedelta(seconds=40))
        if dist.get_rank() == 0:
            time.sleep(7)          # past the session's 5 s, within the script's 40 s
        dist.barrier()
        """,
    )
    start = time.perf_counter()
    s2.run_script(script)
    assert time.perf_counter() - start >= 7
    assert _cell(
        s2,
        "from torch.distributed import distributed_c10d as c\nc._get_default_group()._get_backend(torch.device('cpu')).options._timeout.total_seconds()",
    ) == ["5.0", "5.0"]


def test_a_site_packages_module_fails_naming_its_own_file_and_line(s2, tmp_path):
    _cell(s2, f"import os\n_cwd = os.getcwd()\nos.chdir({str(tmp_path)!r})")  # it writes its checkpoint here
    # its imports first on every rank (no main runs): a rank still importing accelerate's modules cold while
    # the other waits in FSDP's first collective would hit the pool session's 5 s timeout (seen once, a fresh clone)
    _cell(s2, "import accelerate.test_utils.scripts.test_merge_weights")
    try:
        with pytest.raises(RankError) as err:
            s2.run_script("accelerate.test_utils.scripts.test_merge_weights", module=True)
    finally:
        _cell(s2, "os.chdir(_cwd)")
    msg = str(err.value)
    assert msg.startswith("KeyError on ranks 0, 1: None at line ")
    assert " of accelerate/test_utils/scripts/test_merge_weights.py: save_fsdp_model(" in msg
    assert "runpy" not in msg and "jupyter_mgpu" not in msg
    assert "test_merge_weights.py" in err.value.tracebacks[0] and "runpy" not in err.value.tracebacks[0]


def test_an_error_in_a_helper_names_the_line_that_called_it(s2, tmp_path, ip, capfd):
    _write(tmp_path / "checks.py", "def check(x):\n    if x:\n        raise ValueError(f'bad {x}')\n")
    script = _write(tmp_path / "main.py", "import checks, os\n\nchecks.check(int(os.environ['RANK']))\n")
    with pytest.raises(RankError) as err:
        s2.run_script(script)
    assert str(err.value) == (
        "ValueError on rank 1: bad 1 at line 3 of check() in "
        f"{tmp_path / 'checks.py'}: raise ValueError(f'bad {{x}}'), called from line 3 of "
        f"{script}: checks.check(int(os.environ['RANK'])) (rank 0 succeeded)"
    )
    assert list(err.value.tracebacks) == [1]
    tb = err.value.tracebacks[1]
    assert tb.index("main.py:3") < tb.index("checks.py:3") and "\x1b[" not in tb
    # the same in a %%mgpu cell
    _cell(s2, f"import sys\nsys.path.insert(0, {str(tmp_path)!r})")
    try:
        with pytest.raises(
            RankError,
            match=r"ValueError on rank 1: bad 1 at line 3 of check\(\) in .*checks.py: .*"
            r", called from line 2 of the cell: checks.check\(rank\) \(rank 0 succeeded\)$",
        ):
            s2.run_cell("import checks\nchecks.check(rank)", stream=False)
        capfd.readouterr()
        ip.run_line_magic("mgpu_tb", "")
        out = capfd.readouterr().out
        assert out.startswith("rank 1:\n") and "Cell %%mgpu, line 2" in out and "checks.py:3" in out
        with pytest.raises(UsageError, match=r"^rank 0 did not fail in the last failure \(rank 1 did\)$"):
            ip.run_line_magic("mgpu_tb", "--rank 0")
    finally:
        _cell(s2, f"sys.path.remove({str(tmp_path)!r}); del checks, sys.modules['checks']")


def test_the_group_notes_are_one_line_on_stdout(s2, tmp_path, capfd):
    script = _write(
        tmp_path / "both.py",
        "import torch.distributed as dist\ndist.init_process_group()\ndist.barrier()\ndist.destroy_process_group()\n",
    )
    s2.run_script(script)
    captured = capfd.readouterr()
    assert captured.err == ""
    assert captured.out.count("mgpu:") == 1
    note = "mgpu: init_process_group() joined the session's group (gloo, 2 ranks); destroy_process_group() kept it\n"
    assert note in captured.out


def test_groups_a_run_made_end_with_it(s2, tmp_path):
    script = _write(
        tmp_path / "groups.py",
        "import torch.distributed as dist\ng = dist.new_group([0, 1])\ndist.barrier(group=g)\n",
    )
    count = "from torch.distributed import distributed_c10d as c\nlen(c._world.pg_map)"
    before = _cell(s2, count)
    s2.run_script(script)
    s2.run_script(script)
    assert _cell(s2, count) == before


ACCELERATE_SCRIPTS = ("test_ops", "test_sync", "test_script")  # shipped inside accelerate


def _outcome(text: str, ok: bool) -> tuple:
    """What a run of one of accelerate's test scripts showed: passed or not, the distributed state it
    found and the tests it chose to run for that state."""
    return (
        ok,
        sorted(set(re.findall(r"Distributed environment: (\S+)", text))),
        sorted(set(re.findall(r"Num processes: (\d+)", text))),
        sorted(set(re.findall(r"\*\*(Test[^*]*)\*\*", text))),
    )


@pytest.fixture(scope="module")
def torchrun_outcomes(tmp_path_factory):
    """Each script under a fresh `torchrun --nproc-per-node 2`, with the environment the CPU ranks have
    (ACCELERATE_USE_CPU, as `accelerate launch --cpu` gives its workers)."""
    cwd = tmp_path_factory.mktemp("torchrun")
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    outcomes = {}
    for name in ACCELERATE_SCRIPTS:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                "2",
                "-m",
                f"accelerate.test_utils.scripts.{name}",
            ],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        outcomes[name] = _outcome(done.stdout, done.returncode == 0)
    return outcomes


@pytest.mark.slow
def test_accelerates_own_test_scripts_give_what_a_fresh_torchrun_gives_in_either_order(
    s2, torchrun_outcomes, tmp_path, capfd
):
    assert torchrun_outcomes["test_script"][1] == ["DistributedType.MULTI_CPU"]  # the reference really is distributed
    _cell(s2, f"import os\n_cwd = os.getcwd()\nos.chdir({str(tmp_path)!r})")
    try:
        for order in (ACCELERATE_SCRIPTS, ACCELERATE_SCRIPTS[::-1]):
            for name in order:
                try:
                    s2.run_script(f"accelerate.test_utils.scripts.{name}", module=True)
                    ok = True
                except RankError:
                    ok = False
                assert _outcome(capfd.readouterr().out, ok) == torchrun_outcomes[name], (name, order)
    finally:
        _cell(s2, "os.chdir(_cwd)")
