"""Start the relay (``launch/relay.py``) of a host cluster (``launch/host_cluster.py``) and learn its port.

The relay is the process the remote engines link to: it needs the cluster's link key, the address it
listens on and the kernel it belongs to (its config file), and says the port it got in a file of the
cluster directory. It is the cluster's "supervisor" in the sidebar.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from jupyter_mgpu import rundir as rd
from jupyter_mgpu.cluster.processes import kernel_identity, spawn
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.launch import relay

if TYPE_CHECKING:
    from jupyter_mgpu.launch.host_cluster import HostCluster

START_TIMEOUT = 15.0  # seconds for the relay to say its port


def start_relay(cluster: HostCluster, key: bytes) -> None:
    """Spawn the relay (``cluster.supervisor``) and wait for its port (``cluster.relay_port``)."""
    kernel_pid, kernel_ctime = kernel_identity()
    rd.write_json(
        cluster.path / relay.CONFIG_FILE,
        {
            "key": key.hex(),
            "address": cluster.address,
            "world_size": cluster.opts.n or len(cluster.client.ids),
            "kernel_pid": kernel_pid,
            "kernel_create_time": kernel_ctime,
            "silence": relay.SILENCE,
        },
    )
    cluster.supervisor = spawn(cluster.path, ["jupyter_mgpu.launch.relay", str(cluster.path)])
    deadline = time.monotonic() + START_TIMEOUT
    while not rd.complete_json(cluster.path / relay.PORT_FILE):
        if cluster.supervisor.poll() is not None or time.monotonic() > deadline:
            raise MgpuError(
                f"the relay for remote engines did not start on {cluster.address} "
                f"(see {cluster.path / 'processes.log'})"
            )
        time.sleep(0.01)
    written = rd.read_json(cluster.path / relay.PORT_FILE)
    assert written is not None  # complete_json() just saw it whole
    cluster.relay_port = int(written["port"])
