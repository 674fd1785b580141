"""One real JupyterHub for the hub tests (``tests/hub/``): three users, each with a running JupyterLab server.

``a`` and ``b`` run clusters of CPU virtual devices. ``c`` is a user of a shared GPU node: the hub gives
c's server GPU 1 of two (``CUDA_VISIBLE_DEVICES`` in c's spawner environment, as docs/jupyterhub.md
tells admins), seen through a fake NVML (tests/hub/fake_gpus.py: no GPU here); c never starts a
cluster. Started once for the package and torn down after its last test: servers, hub, proxy, every
process of the users, the users themselves and the temp directory. Anything that had to be killed at
the end fails the run (a leak). Each test module makes sure the servers it needs are running.
"""

from __future__ import annotations

import pytest

from . import fake_gpus
from .hub_setup import HubRun

NOTEBOOK_CELLS = [
    "%load_ext jupyter_mgpu",
    "%mgpu_init 2",
    "%%mgpu\nbig = torch.ones(32, 1024, 1024)  # 128 MiB of float32 on every rank\nbig.numel() * 4 >> 20",
]


@pytest.fixture(scope="package")
def hub():
    """The hub with users ``hub.users["a"]``, ``["b"]`` and ``["c"]`` (GPU); ``hub.fake_gpus``: c's GPUs' JSON."""
    run = HubRun()
    leaked: list[str] = []
    try:
        folder, run.fake_gpus = fake_gpus.install(run.root)
        run.add_user("a", NOTEBOOK_CELLS)
        run.add_user("b", NOTEBOOK_CELLS)
        run.add_user(
            "c",
            ["import os; os.environ.get('CUDA_VISIBLE_DEVICES')"],
            env={
                "PYTHONPATH": str(folder),
                "MGPU_FAKE_NVML": str(run.fake_gpus),
                "CUDA_VISIBLE_DEVICES": "1",
                "JUPYTER_MGPU_FORCE_CPU": None,
            },
        )
        run.start()
        for user in run.users.values():  # all spawn at once; then wait for each
            run.api("POST", f"users/{user.name}/server")
        for user in run.users.values():
            run.start_server(user)
        yield run
    finally:
        log = run.log_tail()
        leaked = run.close()
    assert leaked == [], f"processes left behind by the hub tests (killed now): {leaked}\nhub log:\n{log}"


@pytest.fixture(scope="module")
def servers(hub):
    """Every user's server running (another module may have stopped one), as ``{key: server pid}``."""
    return {key: hub.start_server(user) for key, user in hub.users.items()}
