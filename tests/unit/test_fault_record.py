"""A process ended by a fatal signal says where it was: real crashes of small Python processes
(no cluster), read back as the supervisor reads an engine's (engine/startup/fault_record.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from jupyter_mgpu.cluster.local import describe_exit
from jupyter_mgpu.engine.startup import fault_record

PROGRAM = """
import ctypes, sys, threading, time
from jupyter_mgpu.engine.startup import fault_record

fault_record.enable(sys.argv[1], 3)


def crash():
    ctypes.string_at(0)


def native_thread_aborts():
    libc = ctypes.CDLL(None)
    tid = ctypes.c_ulong()
    libc.pthread_create(ctypes.byref(tid), None, ctypes.cast(libc.abort, ctypes.c_void_p), None)


def wait():
    time.sleep(5)


how = sys.argv[2]
if how == "main":
    crash()
elif how == "thread":
    threading.Thread(target=crash).start()
    wait()
elif how == "native":
    native_thread_aborts()
    wait()
else:
    import os, signal
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture(autouse=True)
def _in_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the supervisor reads from the notebook's folder: files there read relative


def _crash(tmp_path, how: str) -> tuple[int, str | None]:
    script = tmp_path / "helper.py"
    script.write_text(textwrap.dedent(PROGRAM))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path), how], cwd=tmp_path, timeout=60)
    return proc.returncode, fault_record.read_summary(tmp_path, 3)


def test_a_segfault_names_the_call_and_the_users_line_that_led_there(tmp_path):
    code, where = _crash(tmp_path, "main")
    assert code == -signal.SIGSEGV  # the signal still ends the process: the supervisor's record says so
    assert where is not None
    assert where.startswith("in string_at() (ctypes/__init__.py:")
    assert where.endswith(", called from line 9 of crash() in helper.py")
    record = {"signal": signal.SIGSEGV, "signal_name": "SIGSEGV", "fault": where}
    assert describe_exit(1, record, "while running this").startswith(
        f"rank 1 died (segmentation fault, SIGSEGV) {where}, while running this; run %mgpu_init --restart"
    )


def test_a_crash_in_a_background_thread_says_so(tmp_path):
    code, where = _crash(tmp_path, "thread")
    assert code == -signal.SIGSEGV
    assert where is not None and where.startswith("in a background thread, in string_at() (ctypes/__init__.py:")


def test_an_abort_in_a_thread_without_python_says_where_the_main_thread_was(tmp_path):
    code, where = _crash(tmp_path, "native")
    assert code == -signal.SIGABRT
    assert where is not None
    assert (
        where
        == "in a thread that runs no Python (a library's own); the main thread was at line 19 of wait() in helper.py"
    )


@pytest.mark.parametrize("dump", ["", "main 0x00007f473afbeb80\n", "Fatal Python error: Segmentation fault\n"])
def test_a_dump_without_frames_adds_nothing(dump):
    assert fault_record.summary(dump) is None


def test_sigkill_leaves_no_stacks_and_the_sentence_is_as_before(tmp_path):
    code, where = _crash(tmp_path, "kill")
    assert code == -signal.SIGKILL
    assert where is None
    assert describe_exit(2, {"signal_name": "SIGKILL"}, "while running this").startswith(
        "rank 2 died (killed by SIGKILL) while running this; "
    )
