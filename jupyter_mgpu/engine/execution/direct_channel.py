"""The engine's end of the direct channel: calls from the kernel without the controller hop.

Each engine listens on a Unix socket in the cluster's private (0700) runtime dir. The kernel sends
``calls.call`` requests there for blocking library operations; the engine runs them on its main
thread, from the same event loop that runs ipyparallel's tasks, so the two never overlap and the
ranks' state (shard store, process group) is the same whichever way a call came. A round trip
skips the controller's schedulers and ipykernel's message handling: about a millisecond instead of
five on a 2-core machine (``benchmarks/collectives.py`` prints both).

Frames: ``!I`` count, then ``!Q`` length of each part, then the parts. A request is a JSON header
(``id``; ``stream``: send output as it comes, ``engine/execution/streamed_output.py``; ``parent``: the
ipyparallel request its comm messages answer) and the buffers of ``ipyparallel.serialize.pack_apply_message``; a reply is the header and
:func:`dump_value` of the result (pickle 5, CPU tensors as raw out-of-band buffers); output frames
before it carry ``"out": true`` in their header and a list of output events.

The other half: ``session/direct_channel.py``, its controller side.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import pickle
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import Any

from jupyter_mgpu.engine.execution import calls
from jupyter_mgpu.engine.execution.streamed_output import StreamedOutput
from jupyter_mgpu.engine.wire import unix_socket
from jupyter_mgpu.engine.wire.link import recv_exact

SOCKET_NAME = "direct.{rank}.sock"
PARTIAL_FRAME_TIMEOUT = 30  # s: a peer that stops mid-frame (either way) is dropped, never waited on forever
# kept by the kernel (SO_RCVTIMEO, SO_SNDTIMEO) on a blocking socket: Python's own timeout polls before
# every read and write
_TIMEOUT = struct.pack("ll", PARTIAL_FRAME_TIMEOUT, 0)
_NO_TIMEOUT = struct.pack("ll", 0, 0)
IOV_MAX = 512  # buffers per sendmsg (the kernel's limit is 1024)
_COUNT = struct.Struct("!I")
_LEN = struct.Struct("!Q")


def socket_path(rundir: str | Path, rank: int) -> Path:
    return Path(rundir) / SOCKET_NAME.format(rank=rank)


def send_frames(sock: socket.socket, parts: list[Any]) -> None:
    """Send ``parts`` (bytes-like) as one frame."""
    views = [memoryview(p).cast("B") for p in parts]
    views.insert(0, memoryview(_COUNT.pack(len(views)) + b"".join(_LEN.pack(v.nbytes) for v in views)))
    while views:  # one system call for a small frame; the rest of a partial send is sent after
        sent = sock.sendmsg(views[:IOV_MAX])
        while views and sent >= views[0].nbytes:
            sent -= views.pop(0).nbytes
        if views:
            views[0] = views[0][sent:]


def recv_frames(sock: socket.socket) -> list[bytearray]:
    """Receive one frame sent by :func:`send_frames`."""
    (count,) = _COUNT.unpack(recv_exact(sock, _COUNT.size))
    head = recv_exact(sock, count * _LEN.size)
    return [recv_exact(sock, _LEN.unpack_from(head, i * _LEN.size)[0]) for i in range(count)]


class Server:
    """Listens for the kernel and runs its calls on this engine's main thread."""

    def __init__(self, rundir: str, rank: int, user_ns: dict[str, Any]) -> None:
        import asyncio

        self.user_ns = user_ns
        self.path = socket_path(rundir, rank)
        self.listener = unix_socket.listen_private(self.path, 4)
        self.listener.setblocking(False)
        self.loop = asyncio.get_event_loop()
        self.loop.add_reader(self.listener.fileno(), self._accept)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        if not unix_socket.same_user(conn):  # the dir is private already; this is the second lock
            conn.close()
            return
        conn.setblocking(True)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _TIMEOUT)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _TIMEOUT)
        self.loop.add_reader(conn.fileno(), self._serve, conn)

    def _drop(self, conn: socket.socket) -> None:
        with contextlib.suppress(Exception):
            self.loop.remove_reader(conn.fileno())
        conn.close()

    def _serve(self, conn: socket.socket) -> None:
        from jupyter_mgpu.engine import state as rank_state

        st = rank_state.STATE
        try:
            parts = recv_frames(conn)
        except (EOFError, OSError):
            self._drop(conn)
            return
        if st is not None:
            st.serving = True
        try:
            self._answer(conn, parts)
        finally:
            if st is not None:
                st.serving = False

    def _answer(self, conn: socket.socket, parts: list[bytearray]) -> None:
        if _hung_up(conn):  # the stop came before this rank read the call: nobody waits for it, so it never runs
            self._drop(conn)
            return
        header = json.loads(bytes(parts[0]))
        rid = json.dumps({"id": header["id"]}).encode()
        output = None
        if header.get("stream"):  # output goes back as it comes, in frames marked "out"
            marked = json.dumps({"id": header["id"], "out": True}).encode()
            send = lambda events: send_frames(conn, [marked, *dump_value(events)])  # noqa: E731
            output = StreamedOutput(send, header.get("parent"))
            # a notebook at a pdb prompt reads the output later; a closed one fails the send
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _NO_TIMEOUT)
        try:
            reply = run_request(parts[1:], self.user_ns, output)
        except BaseException as exc:  # never into the event loop: a KeyboardInterrupt there ends the engine's loop
            try:
                reply = dump_value(calls.failure(exc, exc.__traceback__))
            except BaseException:
                reply = dump_value({"ok": False, "transport": f"{type(exc).__name__} while answering the call"})
        if output is not None:
            if output.broken:
                self._drop(conn)
                return
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _TIMEOUT)
        try:
            send_frames(conn, [rid, *reply])
        except OSError:
            self._drop(conn)


def _hung_up(conn: socket.socket) -> bool:
    """Whether the kernel closed ``conn`` after sending the request just read (it does on an interrupt,
    then signals the ranks: a rank still busy with an ipyparallel task then ignores the signal, and would
    run the call later, for nobody). The kernel sends nothing more before the reply, so any byte is EOF."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def run_request(bufs: list[Any], user_ns: dict[str, Any], output: StreamedOutput | None = None) -> list[Any]:
    """Unpack and run one call like ipyparallel's ``apply_request`` would; the serialized result.
    ``output`` streams what the call prints and displays; without it, that output is dropped."""
    from ipyparallel.serialize import unpack_apply_message

    try:
        f, args, kwargs = unpack_apply_message(bufs, user_ns, copy=False)
    except Exception as exc:
        return dump_value(transport_failure(exc))
    previous = signal.getsignal(signal.SIGINT)
    failed: BaseException | None = None
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the stop button reaches the call
        try:
            if output is not None:
                with output:
                    result = f(*args, **kwargs)
            else:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    result = f(*args, **kwargs)
        finally:  # more presses of the stop button go where they go between calls, not into the report
            signal.signal(signal.SIGINT, previous)
    except BaseException as exc:
        failed = exc
    if failed is not None:
        result = calls.failure(failed, failed.__traceback__)
    try:
        return dump_value(result)
    except Exception as exc:
        return dump_value(transport_failure(exc))


class ByName:
    """A library function sent by its module and name. ipyparallel sends a function as its code, which
    an engine rebuilds on every call (about a third of an empty cell's time on a rank); this package's
    own functions are importable on the engine, so the request names them instead."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __reduce__(self) -> tuple[Any, ...]:
        return ByName, (self.module, self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(self.module), self.name)(*args, **kwargs)


def by_name(fn: Any) -> Any:
    """``fn`` as a :class:`ByName` when it is a module-level function of this package, else ``fn``."""
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", "")
    if module.startswith("jupyter_mgpu.") and getattr(sys.modules.get(module), name, None) is fn:
        return ByName(module, name)
    return fn


class _Pickler(pickle.Pickler):
    """Pickle protocol 5 with CPU tensors as out-of-band byte buffers (no copy, no ``torch.save``)."""

    def reducer_override(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")
        if (
            torch is None
            or type(obj) is not torch.Tensor
            or obj.device.type != "cpu"
            or obj.layout != torch.strided
            or obj.requires_grad
            or obj.is_quantized
        ):
            return NotImplemented
        flat = obj.detach().contiguous().reshape(-1).view(torch.uint8)
        return _tensor_from_bytes, (pickle.PickleBuffer(flat.numpy()), str(obj.dtype).split(".")[1], tuple(obj.shape))


def _tensor_from_bytes(buf: Any, dtype: str, shape: tuple[int, ...]) -> Any:
    import torch

    raw = memoryview(buf).cast("B")
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw.nbytes else torch.empty(0, dtype=torch.uint8)
    return flat.view(getattr(torch, dtype)).reshape(shape)


def prime_canning() -> None:
    """Have ipyparallel import its canning maps' classes now. It does so lazily, on the first ``can`` or
    ``uncan``, by rewriting a module-level dict in place; two threads doing that at once fail (``KeyError:
    'numpy.ndarray'``), so the first calls of a session made from two threads failed. Called once per session."""
    from ipyparallel.serialize import canning

    canning.can(None)
    canning.uncan(None)


def dump_value(obj: Any) -> list[Any]:
    """A reply's parts: a tag, then pickle data and its out-of-band buffers, or ipyparallel's buffers."""
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    try:
        _Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(obj)
    except Exception:
        from ipyparallel.serialize import serialize_object

        return [b"I", *serialize_object(obj)]
    return [b"P", stream.getbuffer(), *(b.raw() for b in buffers)]


def load_value(parts: list[Any]) -> Any:
    """The value :func:`dump_value` sent."""
    if bytes(parts[0]) == b"I":
        from ipyparallel.serialize import deserialize_object

        return deserialize_object(parts[1:])[0]
    return pickle.loads(parts[1], buffers=parts[2:])


def transport_failure(exc: BaseException) -> dict[str, Any]:
    """A call that could not be decoded here or whose result cannot be sent back (not the call's own error)."""
    return {"ok": False, "transport": f"{type(exc).__name__}: {exc}"}


_SERVER: Server | None = None


def start(user_ns: dict[str, Any]) -> None:
    """Open this engine's direct channel (run at engine start, inside its event loop)."""
    global _SERVER
    from jupyter_mgpu.engine import state as rank_state

    st = rank_state.get()
    _SERVER = Server(st.rundir, st.rank, user_ns)
