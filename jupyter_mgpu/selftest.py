"""``python -m jupyter_mgpu.selftest``: run the device path end to end and print a pass/fail table.

On a machine with GPUs this exercises what no CI machine here can: nccl initialisation, per-GPU
memory stats, a collective and a matmul on the GPUs, a ``%%mgpu`` cell through IPython's magics,
``mg.matmul``, the memory dashboard, and a clean shutdown. Without GPUs (or with
``--cpu``) it runs the same checks on CPU virtual devices with gloo.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

from jupyter_mgpu import selftest_notebook as notebook_checks


def _all_reduce_check() -> list[float]:
    import torch
    import torch.distributed as dist

    from jupyter_mgpu.engine import state as rank_state

    st = rank_state.get()
    x = torch.full((1024,), float(st.rank + 1), device=st.device)
    dist.all_reduce(x)
    return [x[0].item(), float(st.world_size * (st.world_size + 1) / 2)]


def _local_rank_check() -> dict[str, Any]:
    """What this rank was told (torchrun's variables) and what it uses (its device, CUDA's current one)."""
    import os

    import torch

    from jupyter_mgpu.engine import state as rank_state

    st = rank_state.get()
    out: dict[str, Any] = {
        "rank": st.rank,
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
        "state_local_rank": st.local_rank,
        "device": str(st.device),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    if st.device_kind == "cuda":
        out["current_device"] = torch.cuda.current_device()
        out["device_count"] = torch.cuda.device_count()
    return out


def _memory_check() -> dict[str, Any]:
    import torch

    from jupyter_mgpu.engine import state as rank_state

    st = rank_state.get()
    before = rank_state.describe()
    t = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device=st.device).fill_(1)
    after = rank_state.describe()
    del t
    key = "allocated_bytes" if st.device_kind == "cuda" else "resident_bytes"
    return {
        "grew_by": after[key] - before[key],
        "device": before["device"],
        "total": after.get("total_bytes", st.budget_bytes),
    }


def _allocated() -> int:
    """The device's allocated bytes (torch's count on a GPU, the budget's on a CPU virtual device)."""
    import torch

    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.shards import allocator_budget

    st = rank_state.get()
    return int(torch.cuda.memory_allocated(st.device) if st.device_kind == "cuda" else allocator_budget.allocated())


def _too_big() -> int:
    """More bytes than the device holds."""
    import torch

    from jupyter_mgpu.engine import state as rank_state

    st = rank_state.get()
    if st.device_kind == "cuda":
        return int(2 * torch.cuda.get_device_properties(st.device).total_memory)
    return int(2 * st.budget_bytes)


# user code, as a notebook's would be: compiled under a name of its own (the package's own frames are the
# call's machinery, whose reach a failure's kept memory leaves out)
_USER_CODE = """
def fail_holding(nbytes, out_of_memory, device, too_big):
    import torch
    held = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if out_of_memory:
        torch.empty(too_big, dtype=torch.uint8, device=device)
    raise ValueError("a failure that holds memory")
"""


def _fail_holding(nbytes: int, out_of_memory: bool) -> None:
    from jupyter_mgpu.engine import state as rank_state

    code: dict[str, Any] = {}
    exec(compile(_USER_CODE, "<selftest user code>", "exec"), code)
    code["fail_holding"](nbytes, out_of_memory, rank_state.get().device, _too_big())


def _matmul_check(n: int) -> float:
    import torch
    import torch.distributed as dist

    from jupyter_mgpu.engine import state as rank_state

    st = rank_state.get()
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g, dtype=torch.float64)
    b = torch.randn(n, n, generator=g, dtype=torch.float64)
    rows = torch.tensor_split(torch.arange(n), st.world_size)[st.rank]
    local = (a[rows].to(st.device) @ b.to(st.device)).cpu()
    parts = [torch.empty(len(r), n, dtype=torch.float64) for r in torch.tensor_split(torch.arange(n), st.world_size)]
    if st.backend == "nccl":
        gathered = [p.to(st.device) for p in parts]
        dist.all_gather(gathered, local.to(st.device))
        parts = [p.cpu() for p in gathered]
    else:
        dist.all_gather(parts, local)
    return float((torch.cat(parts) - a @ b).abs().max())


def _dtensor_check(n: int) -> None:
    """A DTensor made on the ranks' own devices (nccl on GPUs), bound to ``_selftest_dt`` for the notebook."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.execution import namespace_transfer

    st = rank_state.get()
    g = torch.arange(n * n, dtype=torch.float32).reshape(n, n)
    mesh = init_device_mesh(st.device.type, (st.world_size,))
    namespace_transfer.put({"_selftest_dt": distribute_tensor(g.to(st.device), mesh, [Shard(0)])})


def _nccl_recorder_check() -> dict[str, Any]:
    """One all_reduce on nccl, then NCCL's flight recorder read as the watch reads it: the completed collective
    parsed, no wait named with nothing in flight, and whether torch times the GPU work (what "started" needs)."""
    import torch
    import torch.distributed as dist

    from jupyter_mgpu.engine import state as rank_state
    from jupyter_mgpu.engine.watch import issued_collectives, nccl_records

    st = rank_state.get()
    x = torch.ones(1024, device=st.device)
    dist.all_reduce(x)
    torch.cuda.synchronize(st.device)
    dump = nccl_records.recorder(entries=True, only_active=False)
    done = [
        e
        for e in dump.get("entries") or ()
        if e.get("state") == "completed" and int(e.get("collective_seq_id") or 0) >= 1 and e.get("input_sizes")
    ]
    status = (dump.get("pg_status") or {}).values()
    return {
        "completed": [f"{e['profiling_name']} #{e['collective_seq_id']}" for e in done[-1:]],
        "waiting": issued_collectives.waiting(),
        "timed": any(int(s.get("last_started_collective", -1)) >= 0 for s in status),
    }


Result = tuple[str, bool, str]  # check, passed, detail


def run(cpu: bool = False, n: int | None = None) -> bool:
    """Run every check; prints a table and returns True when all pass."""
    from jupyter_mgpu.devices import cuda_device_count

    results: list[Result] = []
    gpus = 0 if cpu else cuda_device_count()
    kind = "GPU" if gpus else "CPU virtual device"
    print(
        f"jupyter_mgpu selftest: {gpus} CUDA GPU(s) visible; testing {kind}s"
        + ("" if gpus or cpu else " (no GPU visible: running the CPU path)")
    )
    session: list[Any] = []
    _check(results, "start engines + process group", lambda: _start(session, n if n else (gpus or 2), cpu or not gpus))
    if session:
        for name, fn in SESSION_CHECKS:
            _check(results, name, partial(fn, session[0]))
    return _print_table(results)


def _check(results: list[Result], name: str, fn: Callable[[], str]) -> None:
    """Run one check: its detail and time if it passes, the first line of its error if not."""
    start = time.perf_counter()
    try:
        detail = fn()
        results.append((name, True, f"{detail} ({time.perf_counter() - start:.2f} s)"))
    except Exception as exc:
        results.append((name, False, f"{type(exc).__name__}: {exc}".splitlines()[0]))
        traceback.print_exc(file=sys.stderr)


def _print_table(results: list[Result]) -> bool:
    """The pass/fail table and the verdict; True when every check passed."""
    width = max(len(r[0]) for r in results)
    print(f"{'check':<{width}}  result  detail")
    for name, ok, detail in results:
        print(f"{name:<{width}}  {'PASS' if ok else 'FAIL':<6}  {detail}")
    passed = all(ok for _, ok, _ in results)
    print("all checks passed" if passed else "SOME CHECKS FAILED")
    return passed


# -- the checks: each returns its detail line when it passes and raises when it fails ---------------------
def _start(session: list[Any], n: int, cpu: bool) -> str:
    """Start ``n`` engines (the session is appended to ``session``)."""
    import jupyter_mgpu as mg

    s = mg.init(n, cpu=cpu, timeout=60)
    session.append(s)
    return f"{s.world_size} rank{'s' if s.world_size != 1 else ''}, backend {s.backend}"


def _cuda_untouched(s: Any) -> str:
    import torch

    assert not torch.cuda.is_initialized(), "the controller initialised CUDA"
    return "controller never initialised CUDA"


def _all_reduce(s: Any) -> str:
    got = s.run(_all_reduce_check)
    assert all(g == want for g, want in got), f"all_reduce gave {got}"
    return f"sum = {got[0][0]:g} on every rank"


def _local_rank(s: Any) -> str:
    got = s.run(_local_rank_check)
    hosts = [d.host for d in s.devices]
    where = [hosts[: r + 1].count(hosts[r]) - 1 for r in range(len(hosts))]  # position on its host
    for r, g in enumerate(got):
        assert g["local_rank"] == g["state_local_rank"] == where[r], f"rank {r}: LOCAL_RANK {g}, position {where[r]}"
        assert g["local_world_size"] == hosts.count(hosts[r]), f"rank {r}: LOCAL_WORLD_SIZE {g}"
    told = f"LOCAL_RANK = local position on every rank ({', '.join(str(g['local_rank']) for g in got)})"
    if s.devices[0].kind != "cuda":
        return f"{told}; cuda:LOCAL_RANK skipped (CPU virtual devices)"
    for r, g in enumerate(got):
        assert g["device"] == f"cuda:{g['local_rank']}", f"rank {r} uses {g['device']}, not cuda:LOCAL_RANK {g}"
        assert g["current_device"] == g["local_rank"], f"rank {r}: current device {g['current_device']} {g}"
        assert g["device_count"] == g["local_world_size"], f"rank {r} sees {g['device_count']} GPUs {g}"
        same = {x["visible"] for x, h in zip(got, hosts) if h == hosts[r]}
        assert len(same) == 1, f"ranks on one host see different GPUs: {sorted(map(str, same))}"
    return f"{told}; device = cuda:LOCAL_RANK = current device; CUDA_VISIBLE_DEVICES={got[0]['visible']}"


def _memory(s: Any) -> str:
    from jupyter_mgpu.units import format_bytes

    got = s.run(_memory_check)
    assert all(g["grew_by"] >= 60 * 2**20 for g in got), f"64 MiB allocation not seen: {got}"
    return ", ".join(f"{g['device']} +{format_bytes(g['grew_by'])} of {format_bytes(g['total'])}" for g in got)


def _failure_memory(s: Any) -> str:
    """An out-of-memory failure gives its memory back at once; another failure's held memory is said and
    given back to an allocation that needs it (GPU: torch's out-of-memory observer, for the next one)."""
    import jupyter_mgpu as mg

    mib = 64 * 2**20
    before = s.run(_allocated)
    try:
        s.run(_fail_holding, mib, True)
        raise AssertionError("the allocation past the device did not fail")
    except mg.DeviceOutOfMemoryError:
        pass
    after = s.run(_allocated)
    assert after == before, f"allocated {before} before an out-of-memory failure, {after} after"
    try:
        s.run(_fail_holding, mib, False)
    except mg.RankError as exc:
        assert "64.0 MiB" in str(exc) and "in the failed call's frames" in str(exc), str(exc)
    try:
        s.run(_fail_holding, 0, True)  # an allocation that cannot fit even without them: the frames go
    except mg.DeviceOutOfMemoryError:
        pass
    after = s.run(_allocated)
    assert after == before, f"allocated {before} before, {after} after the kept frames should have gone"
    return "an OOM's frames let go at once; 64 MiB kept, said, and let go for an allocation"


def _matmul(s: Any) -> str:
    err = max(s.run(_matmul_check, 512))
    assert err < 1e-9, f"max abs error {err}"
    return f"512x512 float64, max abs error {err:.1e}"


def _dtensor(s: Any) -> str:
    import torch

    import jupyter_mgpu as mg

    s.run(_dtensor_check, 257)
    h = mg.from_dtensor("_selftest_dt", session=s)
    got = h.gather()
    assert torch.equal(got, torch.arange(257 * 257, dtype=torch.float32).reshape(257, 257)), "gather differs"
    return f"{h.layout.label}, local shapes {h.local_shapes[0]}…, gathered equal"


def _nccl_recorder(s: Any) -> str:
    if s.backend != "nccl":
        return f"skipped: backend {s.backend}, NCCL's recorder needs a GPU with nccl"
    got = s.run(_nccl_recorder_check)
    for r, g in enumerate(got):
        assert g["completed"], f"rank {r}: no completed nccl collective parsed from NCCL's recorder"
        assert g["waiting"] is None, f"rank {r} named a wait with nothing in flight: {g['waiting']}"
    timed = "timed" if all(g["timed"] for g in got) else "untimed (TORCH_NCCL_ENABLE_TIMING unset: no 'started')"
    return f"{got[0]['completed'][0]} completed parsed on every rank, no wait named; GPU work {timed}"


def _stuck_named(s: Any) -> str:
    import jupyter_mgpu as mg

    if s.world_size < 2:
        return "skipped: one rank has no peer to leave a collective waiting"

    start = time.perf_counter()
    try:  # rank 0 alone in an all_reduce, then waiting for it (on a GPU: at .item())
        s.run_cell("x = torch.ones(4, device=device)\nif rank == 0:\n    dist.all_reduce(x)\n    x.sum().item()")
    except mg.CollectiveHangError as exc:
        took = time.perf_counter() - start
        assert took < 10, f"named after {took:.1f} s"
        got = s.run(_all_reduce_check)
        assert all(g == want for g, want in got), f"the next all_reduce gave {got}"
        return f"named in {took:.1f} s, next all_reduce right: {str(exc).split(';')[0]}"
    raise AssertionError("rank 0's lone all_reduce was not named")


def _shutdown(s: Any) -> str:
    pids = [s.cluster.controller.pid, s.cluster.supervisor.pid, *s.cluster.engine_pids.values()]
    s.shutdown()
    import psutil

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
        time.sleep(0.05)
    left = [p for p in pids if psutil.pid_exists(p)]
    assert not left, f"processes left: {left}"
    return "engines and controller gone"


# run in this order once the engines started; the names are the table's
SESSION_CHECKS: list[tuple[str, Callable[[Any], str]]] = [
    ("controller leaves CUDA alone", _cuda_untouched),
    ("all_reduce", _all_reduce),
    ("device = cuda:LOCAL_RANK", _local_rank),
    ("per-device memory stats", _memory),
    ("a failure gives its memory back", _failure_memory),
    ("sharded matmul vs torch.mm", _matmul),
    ("%%mgpu cell: all_reduce", notebook_checks.mgpu_cell),
    ("mg.matmul vs torch.mm", notebook_checks.mg_matmul),
    ("memory dashboard follows", notebook_checks.dashboard),
    ("DTensor seen and gathered", _dtensor),
    ("NCCL's flight recorder read", _nccl_recorder),
    ("a skipped collective named", _stuck_named),
    ("shutdown, no orphans", _shutdown),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jupyter_mgpu.selftest", description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="test CPU virtual devices even where GPUs are visible")
    ap.add_argument("-n", type=int, default=None, help="number of devices (default: all GPUs, or 2)")
    args = ap.parse_args(argv)
    return 0 if run(cpu=args.cpu, n=args.n) else 1


if __name__ == "__main__":
    sys.exit(main())
