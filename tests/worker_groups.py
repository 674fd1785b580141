"""How ``python -m pytest -n auto`` shares the suite among its workers (``--dist loadscope`` is in addopts).

A worker takes a whole group at a time: a test file, except the tiers in :data:`ONE_GROUP_TIERS`, whose
files share one expensive set-up (the hub's package fixture) or names the machine has once (the namespace
hosts' addresses, system users, Slurm and munge), and so run on one worker together. pytest-xdist's own
``loadgroup`` cannot say this under pytest 9.2 (it renames node ids, which pytest no longer reads), so the
grouping is this scheduler's. The groups go out in the order the workers collected them, which
``tests/conftest.py`` sorts longest tier first (:data:`FIRST`): no long group starts last.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

ONE_GROUP_TIERS = ("hub", "multihost")
FIRST = ("multihost", "hub", "notebooks", "browser", "kernel", "faults", "cluster")


def group_of(nodeid: str) -> str:
    """The group of a test: its file (``tests/cluster/test_tensor.py``), or its tier (``tests/hub``)."""
    path = nodeid.split("::")[0]
    parts = path.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in ONE_GROUP_TIERS:
        return "/".join(parts[:2])
    return path


def first(tier: str) -> int:
    """Where a tier's groups go in the queue: the longest tiers first, the rest after, in collection order."""
    return FIRST.index(tier) if tier in FIRST else len(FIRST)


class TierScheduling(LoadScopeScheduling):
    """``loadscope`` with :func:`group_of` as the scope."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid)
