"""A stand-in for nvidia-ml-py (``pynvml``) on machines without a GPU: the NVML calls the server makes,
answered from a description of GPUs and the processes on them. The only fake in the server tests: NVML
needs a driver and a GPU. ``FakeNVML.from_file`` backs ``tests/hub``'s ``pynvml.py`` shim, which
re-reads its JSON at every ``nvmlInit`` so a test can name processes that start later.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    pass


class FakeNVML:
    """``gpus``: ``[{"name", "uuid", "total", "used", "util", "processes": [{"pid", "used"}], "graphics": [...]}]``;
    a GPU with ``"processes": None`` answers process queries with NVMLError (no permission)."""

    NVMLError = NVMLError

    def __init__(self, gpus: list[dict[str, Any]] | None = None, path: str | Path | None = None):
        self.gpus = gpus or []
        self.path = path
        self.inits = 0
        self.shutdowns = 0

    @classmethod
    def from_file(cls, path: str | Path) -> FakeNVML:
        return cls(path=path)

    def nvmlInit(self) -> None:
        if self.path is not None:
            self.gpus = json.loads(Path(self.path).read_text())
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self.gpus):
            raise NVMLError(f"invalid index {index}")
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> dict[str, Any]:
        for gpu in self.gpus:
            if gpu.get("uuid") == uuid:
                return gpu
        raise NVMLError(f"no GPU {uuid}")

    def nvmlDeviceGetName(self, handle: dict[str, Any]) -> bytes:
        return handle["name"].encode()  # older nvidia-ml-py returns bytes

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(total=handle["total"], used=handle["used"], free=handle["total"] - handle["used"])

    def nvmlDeviceGetUtilizationRates(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(gpu=handle.get("util", 0), memory=0)

    def _procs(self, handle: dict[str, Any], key: str) -> list[SimpleNamespace]:
        if handle.get(key, []) is None:
            raise NVMLError("insufficient permissions")
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p.get("used")) for p in handle.get(key, [])]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: dict[str, Any]) -> list[SimpleNamespace]:
        return self._procs(handle, "processes")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: dict[str, Any]) -> list[SimpleNamespace]:
        return self._procs(handle, "graphics")
