"""A pipeline step's time split into computing, bubble and other, on schedules made up here with known answers."""

from __future__ import annotations

import pytest

from jupyter_mgpu.comparison.pipeline_idle import critical_path, split_step


def _run(p: int, m: int, tf: float, tb: float, schedule: str = "gpipe", hop: float = 0.0, slow: float = 1.0):
    """Boxes of one step as the ranks would record them: each box starts once its stage is free and its input
    has arrived ``hop`` seconds after the producer ended; ``slow`` stretches every box (the rest of it a wait
    for a core)."""
    order = {}
    for s in range(p):
        if schedule == "gpipe":
            order[s] = [(0, mb) for mb in range(m)] + [(1, mb) for mb in range(m)]
        else:  # 1F1B: p - s forwards, then one backward and one forward, then the remaining backwards
            warm = min(m, p - s)
            seq = [(0, mb) for mb in range(warm)]
            for i in range(m - warm):
                seq += [(1, i), (0, warm + i)]
            order[s] = seq + [(1, mb) for mb in range(m - warm, m)]
    end: dict[tuple[int, int, int], float] = {}
    free, pos, boxes = [0.0] * p, [0] * p, []
    while any(pos[s] < len(order[s]) for s in range(p)):
        for s in range(p):
            if pos[s] == len(order[s]):
                continue
            kind, mb = order[s][pos[s]]
            dep = (s - 1, 0, mb) if kind == 0 else ((s + 1, 1, mb) if s < p - 1 else (s, 0, mb))
            if (kind == 0 and s == 0) or dep in end:
                ready = 0.0 if kind == 0 and s == 0 else end[dep] + (hop if dep[0] != s else 0.0)
                start = max(free[s], ready)
                cpu = tf if kind == 0 else tb
                boxes.append([s, kind, mb, start, start + cpu * slow, cpu * (slow - 1)])
                end[(s, kind, mb)] = free[s] = start + cpu * slow
                pos[s] += 1
    return boxes


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_without_overheads_the_bubble_is_the_formulas(schedule):
    p, m, tf, tb = 4, 8, 1.0, 2.0
    out = split_step(_run(p, m, tf, tb, schedule), p)
    assert out["span"] == pytest.approx((m + p - 1) * (tf + tb))
    assert out["busy"] == pytest.approx([m * (tf + tb)] * p)
    assert out["bubble"] == pytest.approx([(p - 1) * (tf + tb)] * p)
    assert out["other"] == pytest.approx([0.0] * p)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_message_time_and_waiting_for_a_core_are_other_not_bubble(schedule):
    p, m, tf, tb = 4, 8, 1.0, 2.0
    boxes = _run(p, m, tf, tb, schedule, hop=0.25, slow=1.5)
    out = split_step(boxes, p)
    assert out["busy"] == pytest.approx([m * (tf + tb)] * p)  # the boxes' waits for a core are not computing
    assert out["bubble"] == pytest.approx([(p - 1) * (tf + tb)] * p)
    assert out["critical"] == pytest.approx((m + p - 1) * (tf + tb))
    for s in range(p):
        assert out["busy"][s] + out["bubble"][s] + out["other"][s] == pytest.approx(out["span"])
    assert out["other"][0] > 0.5 * out["span"] * (1 - 1 / 1.5)


def test_an_unequal_stage_and_missing_events():
    boxes = _run(2, 2, 1.0, 1.0)
    boxes[0][4] += 1.0  # stage 0's first forward took 2 s: it lies on the critical path
    assert critical_path(boxes, 2) == pytest.approx(3 * 2 + 1)
    out = split_step(boxes[:-1], 2)  # the last box missing: what is there still adds up
    assert all(b + u + o == pytest.approx(out["span"]) for b, u, o in zip(out["busy"], out["bubble"], out["other"]))
    empty = split_step([], 3)
    assert empty["span"] == empty["critical"] == 0 and empty["bubble"] == empty["other"] == [0.0] * 3
