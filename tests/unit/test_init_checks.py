"""A user's init_process_group(...) on a rank of the session is refused exactly as torch refuses it:
each case goes through torch's own init_process_group in a new one-rank process, and through
engine/group/init_checks.py here; the exception types and words must be the same."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

# each case: the keyword arguments, as source the subprocess and this test both evaluate
CASES = [
    'backend="gloo"',
    "",
    'backend="gloo", init_method="env://"',
    'backend="gloo", timeout=timedelta(seconds=30)',
    'backend="cpu:gloo"',
    'backend="xyz"',
    "backend=3",
    'backend="gloo", timeout=5',
    'backend="gloo", init_method="env://", store=dist.HashStore()',
    'backend="gloo", store=dist.HashStore()',
    'backend="gloo", store=dist.HashStore(), world_size=1',
    'backend="gloo", device_id=0',
    'backend="gloo", device_id=torch.device("cuda", 0)',
    'backend="gloo", device_id=torch.device("cpu")',
    'device_id=torch.device("cpu")',
    'backend="gloo", init_method="foo://x"',
    'backend="cpu:gloo,cuda"',
]

PROBE = textwrap.dedent(
    """
    import json, sys
    from datetime import timedelta
    import torch
    import torch.distributed as dist

    out = []
    for case in json.loads(sys.argv[1]):
        try:
            eval(f"dist.init_process_group({case})")
        except BaseException as exc:
            out.append([type(exc).__name__, str(exc)])
        else:
            out.append(["ok", ""])
            dist.destroy_process_group()
    print(json.dumps(out))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def torch_says() -> dict[str, list[str]]:
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(CASES)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(zip(CASES, json.loads(done.stdout.strip().splitlines()[-1])))


def _ours(case: str) -> list[str]:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from jupyter_mgpu.engine.group import init_checks

    kwargs = eval(f"dict({case})", {"timedelta": timedelta, "torch": torch, "dist": dist})
    try:
        init_checks.check(**kwargs)
    except BaseException as exc:
        return [type(exc).__name__, str(exc)]
    return ["ok", ""]


@pytest.mark.parametrize("case", CASES)
def test_each_case_raises_what_torch_raises(case, torch_says):
    assert _ours(case) == torch_says[case]


def test_the_cases_cover_both_outcomes(torch_says):
    outcomes = [v[0] for v in torch_says.values()]
    assert outcomes.count("ok") >= 4
    assert {"ValueError", "AssertionError", "TypeError", "RuntimeError"} <= set(outcomes)


def test_what_a_checked_call_asks_for():
    from datetime import timedelta

    from jupyter_mgpu.engine.group import init_checks

    request = init_checks.check("gloo", "tcp://127.0.0.1:1234?rank=1&world_size=4", timedelta(seconds=90))
    assert (request.backend, request.timeout_s, request.rank, request.world_size) == ("gloo", 90.0, 1, 4)
    assert init_checks.check().backend == "undefined" and init_checks.check().timeout_s is None
