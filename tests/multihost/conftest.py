"""Fixtures of the multi-host tests: namespace "hosts" (``netns_lab``) with real daemons, built once per module."""

from __future__ import annotations

import time

import pytest

from netns_lab import Lab, ensure_packages

SSH_PACKAGES = {"/usr/sbin/sshd": "openssh-server", "ssh": "openssh-client", "ssh-keygen": "openssh-client"}


def python_processes(host) -> list:
    """A host's processes other than its sshd (engines, nannies, launchers' helpers)."""
    out = []
    for p in host.processes():
        try:
            if p.name() != "sshd":
                out.append(p)
        except Exception:
            pass
    return out


def wait_quiet(hosts, timeout: float = 20.0) -> dict:
    """Wait until no process but sshd runs on ``hosts``; returns what still runs (host -> cmdlines)."""
    deadline = time.monotonic() + timeout
    while True:
        left = {}
        for h in hosts:
            procs = python_processes(h)
            if procs:
                left[h.name] = [" ".join(p.cmdline()[:4]) for p in procs if p.is_running()]
        if not left or time.monotonic() > deadline:
            return {k: v for k, v in left.items() if v}
        time.sleep(0.1)


@pytest.fixture(scope="module")
def ssh_lab():
    """hosta (the notebook's kernel and the controller) and hostb, hostc (sshd, a key-only user); hostc's
    interface on the segment is named differently from the others', as on real clusters."""
    ensure_packages(SSH_PACKAGES)
    lab = Lab(["hosta", "hostb", "hostc"], ssh=True, ifaces={"hostc": "eth1"})
    try:
        yield lab
    finally:
        lab.close()
    assert not any(h.proc.poll() is None for h in lab.hosts)
