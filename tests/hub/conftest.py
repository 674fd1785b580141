"""One real JupyterHub for the hub tests (``tests/hub/``): two users, each with a running JupyterLab server.

Started once for the package and torn down after its last test: servers, hub, proxy, every process of
the two users, the users themselves and the temp directory. Anything that had to be killed at the end
fails the run (a leak).
"""

from __future__ import annotations

import pytest

from hub_setup import HubRun

NOTEBOOK_CELLS = [
    "%load_ext jupyter_mgpu",
    "%mgpu_init 2",
    "%%mgpu\nbig = torch.ones(32, 1024, 1024)  # 128 MiB of float32 on every rank\nbig.numel() * 4 >> 20",
]


@pytest.fixture(scope="package")
def hub():
    """The hub, with users ``hub.users["a"]`` and ``["b"]`` whose servers are running."""
    run = HubRun()
    leaked: list[str] = []
    try:
        for key in ("a", "b"):
            run.add_user(key, NOTEBOOK_CELLS)
        run.start()
        for user in run.users.values():  # both spawn at once; then wait for each
            run.api("POST", f"users/{user.name}/server")
        for user in run.users.values():
            run.start_server(user)
        yield run
    finally:
        log = run.log_tail()
        leaked = run.close()
    assert leaked == [], f"processes left behind by the hub tests (killed now): {leaked}\nhub log:\n{log}"
