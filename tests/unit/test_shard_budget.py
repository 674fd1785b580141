"""A CPU virtual device's memory budget (``engine/shards/budget.py``) in this process: wording of out-of-memory
errors, and the accounting of both modes with the allocator and the OS limit stood in for (nothing installed)."""

from __future__ import annotations

import resource

import pytest

from jupyter_mgpu.engine.shards import allocator_budget, budget

MiB = 1 << 20
GIB = 1 << 30


@pytest.mark.parametrize(
    "exc",
    [
        MemoryError(),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] . DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes."
        ),
        RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 400000000 bytes."),
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity)"),
        RuntimeError("torch.OutOfMemoryError: out of memory"),
    ],
)
def test_allocator_failures_and_memory_error_are_out_of_memory(exc):
    assert budget.is_oom(exc)


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
        ValueError("out of memory"),  # only torch's RuntimeError and Python's MemoryError
        KeyError("DefaultCPUAllocator"),
        RuntimeError("Connection closed by peer"),
    ],
)
def test_other_errors_are_not_out_of_memory(exc):
    assert not budget.is_oom(exc)


@pytest.mark.parametrize(
    "message, size",
    [
        ("DefaultCPUAllocator: can't allocate memory: you tried to allocate 400000000 bytes.", 400_000_000),
        ("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total)", 2 * 1024**3),
        ("CUDA out of memory. Tried to allocate 20.50 MiB", int(20.5 * MiB)),
        ("Tried to allocate 3 KiB", 3 * 1024),
        ("tried to allocate 1.5 GB", int(1.5 * 1024**3)),
        ("Tried to allocate 7 TiB", 7 * 1024**4),
    ],
)
def test_the_size_an_allocator_error_names_is_read_in_bytes(message, size):
    assert budget.requested_bytes(message) == size


@pytest.mark.parametrize("message", ["out of memory", "Tried to allocate lots", ""])
def test_an_error_that_names_no_size_gives_none(message):
    assert budget.requested_bytes(message) is None


def test_this_process_has_a_data_size():
    assert budget.current_data_bytes() > MiB


def test_no_budget_until_one_is_applied(monkeypatch):
    monkeypatch.setattr(budget, "_mode", None)
    assert budget.mode() is None and budget.allocated() is None


class FakeLimit:
    """RLIMIT_DATA for ``budget`` alone (the pytest process's own limit is never touched)."""

    RLIMIT_DATA = resource.RLIMIT_DATA
    RLIM_INFINITY = resource.RLIM_INFINITY

    def __init__(self, soft: int, hard: int) -> None:
        self.limits = (soft, hard)

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == self.RLIMIT_DATA
        return self.limits

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        assert which == self.RLIMIT_DATA
        self.limits = tuple(limits)


@pytest.fixture
def fake_os(monkeypatch):
    """No budget applied yet, a fixed data size, and an unlimited RLIMIT_DATA for ``budget`` to set."""
    monkeypatch.setattr(budget, "_mode", None)
    monkeypatch.setattr(budget, "_fallback_reason", None)
    monkeypatch.setattr(budget, "current_data_bytes", lambda: 300 * MiB)
    limit = FakeLimit(resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    monkeypatch.setattr(budget, "resource", limit)
    return limit


def test_an_unlimited_process_has_no_room_to_report(fake_os):
    assert budget.room(GIB) is None


def test_the_os_limit_mode_is_the_budget_on_top_of_what_the_engine_uses_now(fake_os, monkeypatch):
    monkeypatch.setenv("JUPYTER_MGPU_BUDGET_SHIM", "0")
    monkeypatch.setattr(allocator_budget, "install", lambda b: pytest.fail("the shim was asked for"))
    limit = budget.apply(GIB)
    assert limit == 300 * MiB + GIB + budget.RUNTIME_HEADROOM
    assert fake_os.limits == (limit, limit)
    assert budget.mode() == "rlimit" and "JUPYTER_MGPU_BUDGET_SHIM=0" in budget.fallback_reason()
    assert budget.allocated() is None  # not counted tensor by tensor
    room = budget.room(GIB)
    assert room == limit - 300 * MiB - budget.RUNTIME_HEADROOM // 2
    assert GIB <= room <= GIB + budget.RUNTIME_HEADROOM


def test_a_shim_that_cannot_be_built_falls_back_to_the_os_limit_and_says_why(fake_os, monkeypatch):
    monkeypatch.delenv("JUPYTER_MGPU_BUDGET_SHIM", raising=False)

    def no_compiler(budget_bytes):
        raise allocator_budget.BuildError("no C++ compiler")

    monkeypatch.setattr(allocator_budget, "install", no_compiler)
    assert budget.apply(GIB) == 300 * MiB + GIB + budget.RUNTIME_HEADROOM
    assert budget.mode() == "rlimit" and budget.fallback_reason() == "no C++ compiler"


def test_shared_blocks_take_room_from_the_os_limit_and_give_it_back(fake_os, monkeypatch):
    monkeypatch.setenv("JUPYTER_MGPU_BUDGET_SHIM", "0")
    budget.apply(GIB)
    before = budget.room(GIB)
    assert budget.charge(100 * MiB, shared=True)
    assert budget.room(GIB) == before - 100 * MiB
    assert budget.charge(5 * MiB, shared=False)  # private memory counts in the data size by itself
    assert budget.room(GIB) == before - 100 * MiB
    budget.uncharge(5 * MiB, shared=False)
    budget.uncharge(100 * MiB, shared=True)
    assert budget.room(GIB) == before
    hard = fake_os.limits[1]
    budget.uncharge(GIB, shared=True)  # never past the hard limit
    assert fake_os.limits == (hard, hard)
    budget.charge(10 * hard, shared=True)  # nor below nothing
    assert fake_os.limits == (0, hard) and budget.room(GIB) == 0


class FakeShim:
    """The allocator shim's count, without installing it."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget, self.count = budget_bytes, 0
        self.installed: list[int] = []

    def install(self, budget_bytes: int) -> None:
        self.installed.append(budget_bytes)

    def allocated(self) -> int:
        return self.count

    def adjust(self, delta: int) -> bool:
        if delta > 0 and self.count + delta > self.budget:
            return False
        self.count += delta
        return True


@pytest.fixture
def shim(fake_os, monkeypatch):
    fake = FakeShim(GIB)
    monkeypatch.delenv("JUPYTER_MGPU_BUDGET_SHIM", raising=False)
    for name in ("install", "allocated", "adjust"):
        monkeypatch.setattr(allocator_budget, name, getattr(fake, name))
    return fake


def test_the_allocator_mode_counts_tensors_exactly_with_a_loose_os_backstop(shim, fake_os):
    limit = budget.apply(GIB)
    assert shim.installed == [GIB] and budget.mode() == "allocator"
    assert limit == 300 * MiB + 2 * GIB + budget.HOST_HEADROOM and fake_os.limits == (limit, limit)
    assert budget.room(GIB) == GIB and budget.allocated() == 0
    shim.count = 700 * MiB  # tensors the shim counted
    assert budget.allocated() == 700 * MiB and budget.room(GIB) == GIB - 700 * MiB
    shim.count = GIB + 1
    assert budget.room(GIB) == 0


@pytest.mark.parametrize("shared", [True, False])
def test_blocks_the_engine_maps_count_against_the_allocators_budget(shim, fake_os, shared):
    budget.apply(GIB)
    limits = fake_os.limits
    assert budget.charge(600 * MiB, shared)
    assert budget.allocated() == 600 * MiB
    assert not budget.charge(600 * MiB, shared)  # past the budget: refused, nothing counted
    assert budget.allocated() == 600 * MiB
    budget.uncharge(600 * MiB, shared)
    assert budget.allocated() == 0 and budget.room(GIB) == GIB
    assert fake_os.limits == limits  # the OS limit is only the backstop here
