import re

from labrun import assert_page_is_clean, notebook_module

SHOTS = {
    "01_init": "%mgpu_init 4",
    "02_map": "sims = mg.map(",
    "03_own_function": "THRESHOLD = 0.4",
    "04_errors": "bad = A.copy()",
    "05_benchmark": "%run ../benchmarks/cosine.py",
}

pytestmark, run = notebook_module("05_cosine_similarity.ipynb", SHOTS)


def test_cosine_notebook_solves_the_forum_problem(run):
    text = run.text
    assert "(20000, 2) -> (20000, 300)" in text["import os, tempfile"]
    assert "rank 3: local (5000, 300)" in text["a = mg.load("]
    diff = float(re.search(r"max \|difference\| vs one process: (\S+)", text["sims = mg.map("]).group(1))
    assert diff < 1e-5
    own = text["THRESHOLD = 0.4"]
    per_rank = [int(x) for x in re.search(r"per rank: \[(.*)\]", own).group(1).split(",")]
    total, single = re.search(r"total: (\d+) — one process: (\d+)", own).groups()
    assert sum(per_rank) == int(total) == int(single) > 0
    means = re.search(r"mean similarity: (\S+) — one process: (\S+)", own).groups()
    assert means[0] == means[1]
    assert (
        "check_finite raised ValueError on rank 2 (rows 10000–14999): 1 row(s) hold NaN or inf at line 7 "
        "of check_finite in a notebook cell"
    ) in text["bad = A.copy()"]
    assert "ranks" not in text["bad = A.copy()"].split("(rows")[1]  # only rank 2 failed
    assert (
        "mg.map needs inputs of the same length along dim 0: argument 1 has 20000 rows but argument 2 has 19999"
    ) in text["mg.map(F.cosine_similarity, a, mg.zeros"]
    assert "missing.npy does not exist" in text['mg.load(os.path.join(folder, "missing.npy"))']
    assert "<lambda> cannot be sent to the ranks" in text["import threading"]
    bench = text["%run ../benchmarks/cosine.py"]
    assert "forum recipe [2]" in bench and "mg.load + mg.map + gather [3]" in bench
    assert "results equal within float32 tolerance: True" in bench
    # the headline says how it was made: here everything measured at 10,000 rows, nothing extrapolated
    headline = r"end to end: mg is [\d.]+× (faster|slower) than the forum recipe \(both measured at 10,000 rows\)"
    assert re.search(headline, bench), bench
    assert "extrapolat" not in bench.split("[2]")[-1].split("[3]")[0] and "target" not in bench
    assert "engines stopped" in text["%mgpu_shutdown"]


def test_page_is_clean(run):
    assert_page_is_clean(run)
