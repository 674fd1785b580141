"""Kernels the tests start themselves, with their channels on Unix sockets rather than TCP ports.

jupyter_client picks a kernel's five TCP ports by binding port 0 and closing the sockets, and the kernel binds
them a second or more later: in between, any process on the machine may take one, an outgoing connection as
its ephemeral port among them (the suite's ranks open many). ipykernel 7.4 then does not exit but hangs, and its
client waits out its whole timeout: a kernel-tier module failed so in session 45, after 60 s, "Address already
in use". A Unix socket in a folder of the test process's own cannot be taken; the kernel is the same kernel.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import uuid

from jupyter_client.manager import KernelManager

_folder: list[str] = []


def _kernels_folder() -> str:
    """This process's folder for its kernels' sockets and connection files, removed when it exits."""
    if not _folder:
        _folder.append(tempfile.mkdtemp(prefix="mgpu-kernels-"))
        atexit.register(shutil.rmtree, _folder[0], True)
    return _folder[0]


def ipc_kernel_manager() -> KernelManager:
    """A manager of this venv's ``python3`` kernel whose channels are Unix sockets named for it alone."""
    name = os.path.join(_kernels_folder(), uuid.uuid4().hex[:12])
    km = KernelManager(kernel_name="python3", transport="ipc", ip=name, connection_file=name + ".json")
    km.kernel_spec.argv[0] = sys.executable
    return km
