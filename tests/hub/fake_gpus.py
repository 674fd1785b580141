"""GPUs for one hub user's server on this GPU-less machine: ``pynvml`` answered by tests/server/fake_nvml.py.

NVML needs a driver and a GPU, so this is the one fake behind the hub: the user's server imports the
``pynvml`` shim installed here (through ``PYTHONPATH`` in that user's spawner environment), which
answers from a JSON file the test rewrites. Everything else is real, including the processes the fake
GPUs list: real processes of real users, whose owners the server looks up as it would on a GPU node.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

FAKE_NVML = Path(__file__).resolve().parents[1] / "server" / "fake_nvml.py"
SHIM = '''"""pynvml for a hub test user's server: a FakeNVML reading $MGPU_FAKE_NVML at every nvmlInit."""
import os

from fake_nvml import FakeNVML

_nvml = FakeNVML.from_file(os.environ["MGPU_FAKE_NVML"])
NVMLError = FakeNVML.NVMLError


def __getattr__(name):
    return getattr(_nvml, name)
'''


def install(root: Path) -> tuple[Path, Path]:
    """Put the shim and the fake where other users can read them; returns (its folder, the GPUs' JSON)."""
    folder = root / "fake-nvml"
    folder.mkdir(mode=0o755)
    shutil.copyfile(FAKE_NVML, folder / "fake_nvml.py")
    (folder / "pynvml.py").write_text(SHIM)
    gpus = folder / "gpus.json"
    write(gpus, [])
    for path in folder.iterdir():
        os.chmod(path, 0o644)
    return folder, gpus


def write(path: Path, gpus: list[dict]) -> None:
    """Replace the GPUs the fake reports (atomically: a server never reads half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(gpus))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
