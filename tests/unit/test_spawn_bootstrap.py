"""The controller and the supervisor start through a bootstrap that defers the package's notebook API:
submodules come alone, any API name loads the whole package and means what it means in the notebook."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys

import jupyter_mgpu
from jupyter_mgpu.cluster.processes import BOOTSTRAP as _BOOTSTRAP


def test_no_api_name_shares_its_name_with_a_submodule():
    shadowing = {
        n
        for n in dir(jupyter_mgpu)
        if not n.startswith("_")
        and importlib.util.find_spec(f"jupyter_mgpu.{n}") is not None
        and not inspect.ismodule(getattr(jupyter_mgpu, n))
    }
    assert shadowing == set()


CHECKS = """
import inspect
p = sys.modules['jupyter_mgpu']
from jupyter_mgpu import devices                     # a submodule by name: alone
import jupyter_mgpu.engine.records.startup_marks
assert inspect.ismodule(devices) and 'jupyter_mgpu.session.core' not in sys.modules, 'package loaded too early'
import jupyter_mgpu as mg
assert inspect.isfunction(mg.memory)                 # an API name over a submodule: the API's
assert 'jupyter_mgpu.session.core' in sys.modules and mg.init.__module__ == 'jupyter_mgpu.session.lifecycle'
assert mg.__getattr__.__module__ == 'jupyter_mgpu'   # the package's own (MemoryDashboard on first use)
from jupyter_mgpu import trace, shutdown
assert not inspect.ismodule(trace) and callable(shutdown)
print('OK', sys.argv)
"""


def test_the_bootstrap_defers_the_package_and_keeps_its_meaning():
    boot = _BOOTSTRAP.replace("runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n", "")
    assert boot != _BOOTSTRAP
    out = subprocess.run([sys.executable, "-c", boot + CHECKS, "a", "b"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "OK ['-c', 'a', 'b']"


def test_the_bootstrap_runs_the_module_as_main_with_its_arguments(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _BOOTSTRAP, "jupyter_mgpu.engine.shards.allocator_budget", "--x"],
        capture_output=True,
        text=True,
        env={"JUPYTER_MGPU_BUDGET_SHIM": "0", "XDG_CACHE_HOME": str(tmp_path), "PATH": ""},
    )
    # __main__ of allocator_budget ran: it builds (here: no compiler on an empty PATH, exit 1 with the reason)
    assert out.returncode in (0, 1), out.stderr
    assert "Traceback" not in out.stderr
