"""The process-wide settings as one snapshot (``engine/program/process_settings.py``): what a program changes
(torch's settings, warnings, logging, signal handlers, rebound names) is put back by ``apply``, and the
random generators are saved, reseeded and restored."""

from __future__ import annotations

import builtins
import logging
import random
import signal
import types
import warnings

import numpy
import pytest
import torch

from jupyter_mgpu.engine.program import process_settings as ps


@pytest.fixture
def put_back():
    """Whatever the test changed is put back after it (pytest's own log handlers of each phase aside)."""
    before, rng = ps.capture(), ps.save_random()
    print_before, disable_before = builtins.print, logging.root.manager.disable
    try:
        yield
    finally:
        builtins.print = print_before
        root = logging.getLogger()
        before["logging"] = (root.level, list(root.handlers), disable_before)
        ps.apply(before)
        ps.restore_random(rng)


@pytest.mark.usefixtures("put_back")
def test_torch_settings_a_program_changed_are_put_back():
    snapshot = ps.capture()
    before = snapshot["torch"]
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(not before["grad_enabled"])
    torch.set_float32_matmul_precision("medium" if before["float32_matmul_precision"] != "medium" else "high")
    torch.set_num_threads(1 if before["num_threads"] != 1 else 2)
    torch.set_anomaly_enabled(True, True)
    torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    torch.set_printoptions(precision=2, sci_mode=True)
    changed = ps.capture()["torch"]
    # not changed here: the default device (a mode over every torch call) and deterministic algorithms
    # (turning them on first costs seconds of imports)
    assert [k for k in before if changed[k] != before[k]] == [
        k for k in before if k not in ("default_device", "deterministic")
    ]

    ps.apply(snapshot)
    assert ps.capture()["torch"] == before
    assert torch.get_default_dtype() == before["default_dtype"]
    assert torch.is_grad_enabled() == before["grad_enabled"]
    assert torch.is_anomaly_enabled() == before["anomaly"][0]
    assert torch._tensor_str.PRINT_OPTS.precision == before["print_options"]["precision"]


@pytest.mark.usefixtures("put_back")
def test_warnings_filters_and_the_root_logger_are_put_back(tmp_path):
    snapshot = ps.capture()
    root = logging.getLogger()
    level = root.level
    warnings.simplefilter("error", category=DeprecationWarning)
    log_file = logging.FileHandler(tmp_path / "script.log")
    root.addHandler(log_file)
    root.setLevel(logging.DEBUG if level != logging.DEBUG else logging.ERROR)
    logging.disable(logging.CRITICAL)

    ps.apply(snapshot)
    assert warnings.filters == snapshot["warnings"]
    assert log_file not in root.handlers
    assert log_file.stream is None  # the script's log file is closed, as at its process's exit
    assert root.handlers == snapshot["logging"][1]
    assert root.level == level
    assert logging.root.manager.disable == snapshot["logging"][2]


@pytest.mark.usefixtures("put_back")
def test_signal_handlers_a_program_installed_are_put_back():
    snapshot = ps.capture()
    before = signal.getsignal(signal.SIGUSR1)
    signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ps.apply(snapshot)
    assert signal.getsignal(signal.SIGUSR1) is before
    assert signal.getsignal(signal.SIGTERM) is snapshot["signals"][signal.SIGTERM]


@pytest.mark.usefixtures("put_back")
def test_rebound_names_are_put_back():
    snapshot = ps.capture()
    original_print, original_relu = builtins.print, torch.nn.functional.relu

    def quiet_print(*args, **kwargs):  # what setup_for_distributed does to print on ranks > 0
        return None

    builtins.print = quiet_print
    torch.nn.functional.relu = lambda x, inplace=False: x
    ps.apply(snapshot)
    assert builtins.print is original_print
    assert torch.nn.functional.relu is original_relu


def test_modules_are_never_rebound_and_new_names_stay():
    try:
        torch._mgpu_probe_value = 1
        torch._mgpu_probe_module = types.ModuleType("probe")
        snap = ps.capture()
        submodule = types.ModuleType("torch._mgpu_probe_value")
        torch._mgpu_probe_value = submodule  # a submodule imported meanwhile under the same name
        torch._mgpu_probe_module = 5
        torch._mgpu_probe_new = "new"
        ps.apply(snap)
        assert torch._mgpu_probe_value is submodule
        assert torch._mgpu_probe_module == 5
        assert torch._mgpu_probe_new == "new"
    finally:
        for name in ("_mgpu_probe_value", "_mgpu_probe_module", "_mgpu_probe_new"):
            vars(torch).pop(name, None)


@pytest.mark.usefixtures("put_back")
def test_applying_an_unchanged_snapshot_changes_nothing():
    snapshot = ps.capture()
    filters, handlers = warnings.filters, list(logging.getLogger().handlers)
    ps.apply(snapshot)
    assert warnings.filters is filters  # only what differs is written
    assert logging.getLogger().handlers == handlers
    assert ps.capture()["torch"] == snapshot["torch"]


def _draws() -> tuple:
    return torch.rand(3).tolist(), random.random(), numpy.random.random()


@pytest.mark.usefixtures("put_back")
def test_random_generators_are_saved_reseeded_and_restored():
    torch.manual_seed(0)
    random.seed(0)
    numpy.random.seed(0)
    state = ps.save_random()
    first = _draws()
    ps.restore_random(state)
    assert _draws() == first  # the same state draws the same numbers in every generator
    ps.restore_random(state)
    ps.fresh_random()
    fresh = _draws()
    assert all(a != b for a, b in zip(fresh, first))  # new seeds from the OS, as a new process gets
    ps.restore_random(state)
    assert _draws() == first
