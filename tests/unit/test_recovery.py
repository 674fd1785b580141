"""Which ranks the stop button signals again (``session/recovery.py``; the whole interrupt with real engines:
``tests/faults/test_direct_channel.py``, ``tests/faults/test_interrupt_recovery.py``)."""

from __future__ import annotations

from jupyter_mgpu.session.recovery import _begun_after


def test_only_a_call_begun_after_the_stop_is_signalled_again():
    """A rank between two calls when the stop came ignored it (ipykernel's SIGINT between tasks): the call it
    began next is signalled again; a rank still in the call the signal reached (a long C++ op) is not."""
    idle, working = {"in_call": False, "begun": 4}, {"in_call": True, "begun": 4}
    assert _begun_after(idle, {"in_call": True, "begun": 5})  # between calls at the stop: the next one
    assert _begun_after(working, {"in_call": True, "begun": 5})  # its call ended, another began
    assert not _begun_after(working, {"in_call": True, "begun": 4})  # the call the signal reached
    assert not _begun_after(working, {"in_call": False, "begun": 4})  # gone idle: nothing to stop
    assert not _begun_after(None, {"in_call": True, "begun": 9})  # it did not answer before: unknown
