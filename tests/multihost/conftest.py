"""Fixtures of the multi-host tests: namespace "hosts" (``netns_lab``) with real daemons, built once per module."""

from __future__ import annotations

import pytest
from netns_lab import Lab, ensure_packages

SSH_PACKAGES = {"/usr/sbin/sshd": "openssh-server", "ssh": "openssh-client", "ssh-keygen": "openssh-client"}


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
