"""The options of %mgpu_init and mg.init come from one declaration (InitOptions): the magic's parser,
mg.init's keywords and signature, and the checked request the launchers get all agree with it."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest
from IPython.core.magic_arguments import parse_argstring

import jupyter_mgpu as mg
from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.init_options import LAUNCH, InitOptions, option_names
from jupyter_mgpu.magics.session_magics import MgpuMagics, _init_request
from jupyter_mgpu.session.options import check, checked, launch_request, local_spec


def _magic_dests() -> set[str]:
    parser = MgpuMagics.mgpu_init.parser
    return {a.dest for a in parser._actions if a.dest != "help"}


def test_the_magic_takes_every_declared_option_and_nothing_else():
    declared = {f.name for f in fields(InitOptions) if f.metadata}
    assert _magic_dests() == declared | {"n", "no_dashboard"}


def test_mg_init_shows_every_option_in_its_signature():
    params = inspect.signature(mg.init).parameters
    assert list(params) == ["n", *option_names()]
    assert all(params[name].default == f.default for name, f in ((f.name, f) for f in fields(InitOptions)))


def test_an_unknown_keyword_is_one_sentence_with_a_suggestion():
    with pytest.raises(MgpuError, match=r"^mg.init has no option 'cpus'; did you mean 'cpu'\? its options are cpu, "):
        mg.init(2, cpus=True)
    with pytest.raises(MgpuError, match=r"^mg.init has no option 'zzz'; its options are "):
        mg.init(2, zzz=1)


def test_the_magic_arguments_become_one_request():
    args = parse_argstring(MgpuMagics.mgpu_init, "3 --cpu --timeout 7.5 --mem-per-device 1GiB --devices 0,2")
    opts = _init_request(args)
    assert opts == InitOptions(n=3, cpu=True, timeout=7.5, mem_per_device="1GiB", devices="0,2")
    assert _init_request(parse_argstring(MgpuMagics.mgpu_init, "--hosts a:2,b:2")).given(LAUNCH) == {"hosts": "a:2,b:2"}


def test_checked_converts_what_the_user_wrote():
    opts = checked(InitOptions(n=2, mem_per_device="1GiB", devices="0, 1", timeout=None))
    assert (opts.mem_per_device, opts.devices, opts.timeout) == (1024**3, [0, 1], 60.0)
    assert (opts.hang_after, opts.status_after) == (2.0, 10.0)  # the watch's defaults
    with pytest.raises(MgpuError, match=r"^--devices takes indices such as 0,2, got '0,x'$"):
        checked(InitOptions(devices="0,x"))
    with pytest.raises(MgpuError, match=r"^telemetry_period must be between 0 and 60 seconds, got 99$"):
        checked(InitOptions(telemetry_period=99))


def test_local_and_launched_requests_are_told_apart():
    spec = local_spec(InitOptions(n=2, cpu=True, mem_per_device="64MiB", timeout=9, status_after=3))
    assert (len(spec.devices), spec.backend, spec.timeout, spec.mem_per_device) == (2, "gloo", 9, 64 * 1024**2)
    assert spec.status_after == 3.0
    with pytest.raises(MgpuError, match=r"^--per-host goes with --launcher, --hosts or --connect$"):
        local_spec(InitOptions(n=2, cpu=True, per_host=2))
    request, opts = launch_request(InitOptions(hosts="a:2,b:1", cpu=True, mem_per_device="64MiB"))
    assert (request.launcher, request.n, request.hosts) == ("ssh", 3, [("a", 2), ("b", 1)])
    assert opts.mem_per_device == 64 * 1024**2
    with pytest.raises(MgpuError, match=r"^--devices picks devices on this host"):
        check(InitOptions(n=2, launcher="local", devices="0"))
