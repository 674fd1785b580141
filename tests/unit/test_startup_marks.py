"""A starting cluster's timeline (``engine/records/startup_marks.py``): marks appended by any process, read
back as name -> first time, and marking never failing the start."""

from __future__ import annotations

import multiprocessing
import stat
import time

from jupyter_mgpu.engine.records import startup_marks


def test_a_mark_reads_back_with_its_time(tmp_path):
    before = time.time()
    startup_marks.mark(tmp_path, "controller.main")
    after = time.time()
    startup_marks.mark(tmp_path, "torch.imported", when=1234.5678901)
    marks = startup_marks.read(tmp_path)
    assert set(marks) == {"controller.main", "torch.imported"}
    assert before - 1e-6 <= marks["controller.main"] <= after + 1e-6
    assert marks["torch.imported"] == 1234.567890  # kept to the microsecond
    path = tmp_path / startup_marks.FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().splitlines()[1] == "torch.imported 1234.567890"


def test_the_first_time_a_name_was_marked_wins(tmp_path):
    startup_marks.mark(tmp_path, "pg.joined.2", when=10.0)
    startup_marks.mark(tmp_path, "pg.joined.2", when=20.0)
    assert startup_marks.read(tmp_path) == {"pg.joined.2": 10.0}


def test_names_with_spaces_and_malformed_lines(tmp_path):
    startup_marks.mark(tmp_path, "engine 3 ready", when=5.0)
    with open(tmp_path / startup_marks.FILE, "a") as f:
        f.write("half-written\nno.number abc\n\n")
    startup_marks.mark(tmp_path, "after.junk", when=6.0)
    assert startup_marks.read(tmp_path) == {"engine 3 ready": 5.0, "after.junk": 6.0}


def test_no_file_reads_as_no_marks_and_marking_where_it_cannot_write_does_not_raise(tmp_path):
    assert startup_marks.read(tmp_path) == {}
    assert startup_marks.read(tmp_path / "gone") == {}
    startup_marks.mark(tmp_path / "gone", "x")  # the directory is not there: the start goes on
    assert not (tmp_path / "gone").exists()


def _mark_many(rundir: str, who: int, n: int) -> None:
    for i in range(n):
        startup_marks.mark(rundir, f"p{who}.{i}", when=who * 1000 + i)


def test_marks_of_several_processes_never_interleave(tmp_path):
    n, procs = 1000, 3
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_mark_many, args=(str(tmp_path), w, n)) for w in range(procs)]
    for p in workers:
        p.start()
    _mark_many(str(tmp_path), procs, n)  # this process too, at the same time
    for p in workers:
        p.join(30)
        assert p.exitcode == 0
    lines = (tmp_path / startup_marks.FILE).read_text().splitlines()
    assert len(lines) == n * (procs + 1)
    marks = startup_marks.read(tmp_path)
    assert marks == {f"p{w}.{i}": float(w * 1000 + i) for w in range(procs + 1) for i in range(n)}
