import pytest

from jupyter_mgpu.devices import DeviceInfo, discover
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.units import format_bytes, parse_size


@pytest.mark.parametrize(
    "text,expected",
    [
        ("2GiB", 2 * 1024**3),
        ("2G", 2 * 1024**3),
        ("2GB", 2 * 10**9),
        ("512MiB", 512 * 1024**2),
        ("1.5g", int(1.5 * 1024**3)),
        ("1000", 1000),
        (4096, 4096),
        ("64 KiB", 64 * 1024),
        ("1kb", 1000),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["abc", "2XB", "", "-1G", "0", "1e9", "GiB", True])
def test_parse_size_rejects_malformed(text):
    with pytest.raises(MgpuError, match="memory size"):
        parse_size(text)


def test_format_bytes():
    assert format_bytes(2 * 1024**3) == "2.0 GiB"
    assert format_bytes(512) == "512 B"


def test_discover_cpu_virtual_devices():
    devs = discover(3, cpu=True, mem_per_device=1 << 30)
    assert [d.label for d in devs] == ["cpu:0", "cpu:1", "cpu:2"]
    assert all(isinstance(d, DeviceInfo) and d.kind == "cpu" and d.total_memory == 1 << 30 for d in devs)


def test_discover_default_budget_is_a_fair_share():
    import psutil

    devs = discover(4, cpu=True)
    assert 0 < devs[0].total_memory <= psutil.virtual_memory().total / 4


def test_discover_selected_devices():
    assert [d.index for d in discover(devices=[0, 2], cpu=True)] == [0, 2]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"n": 0}, "at least 1"),
        ({"n": -2}, "at least 1"),
        ({"n": 9, "devices": [0, 1]}, "asked for 9 devices but --devices lists 2"),
        ({"devices": [1, 1]}, "lists a device twice"),
        ({"devices": []}, "lists no device"),
        ({"n": "4"}, "whole number"),
    ],
)
def test_discover_bad_input(kwargs, message):
    with pytest.raises(MgpuError, match=message):
        discover(cpu=True, **kwargs)


def test_no_gpu_visible_here_and_cuda_untouched():
    import torch

    from jupyter_mgpu.devices import cuda_device_count

    assert cuda_device_count() == 0
    assert not torch.cuda.is_initialized()
