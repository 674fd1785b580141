"""Files and controller data to DistTensors: ``mg.load``, ``mg.save``, ``mg.from_numpy``, ``mg.from_pandas``.

``mg.load("embeds.npy", placement=mg.Shard(0))`` checks the file on the controller (header only),
then every rank reads just its own rows — the file is never read whole by anyone. The answer to
"must every process read the whole pickled dataframe?" is no: save the embeddings as ``.npy`` once
(``mg.from_pandas(df).gather()`` or ``numpy.save``) and let each rank map its slice.

The other half: ``ops/io.py``, its rank side.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from jupyter_mgpu.errors import MgpuError
from jupyter_mgpu.ops import io as rank_io
from jupyter_mgpu.session import lifecycle as sessmod
from jupyter_mgpu.tensors.dist_tensor import DistTensor, new_handle, session_of
from jupyter_mgpu.tensors.factories import scatter
from jupyter_mgpu.tensors.handles import dtype_name, placement_of, run_creating

SUFFIXES = (".npy", ".pt", ".pth", ".safetensors")
_NUMPY_OK = ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")


def _kind(path: str) -> str:
    low = path.lower()
    for suffix in SUFFIXES:
        if low.endswith(suffix):
            return {".pth": ".pt"}.get(suffix, suffix)
    raise MgpuError(
        f"cannot tell the format of {path!r}: mg.load/mg.save read and write "
        f".npy, .pt (torch.save) and .safetensors files"
    )


def _npy_header(path: str) -> tuple[tuple[int, ...], str]:
    import numpy as np

    with open(path, "rb") as f:
        magic = f.read(6)
    if magic != b"\x93NUMPY":
        raise MgpuError(
            f"{path} is not a .npy file (it does not start with numpy's format header); "
            "write arrays with numpy.save or mg.save"
        )
    try:
        arr = np.load(path, mmap_mode="r")
    except ValueError as exc:
        if "object" in str(exc).lower():
            raise MgpuError(
                f"{path} holds Python objects, not numbers, so no rank can read a slice of it; "
                "save a numeric array (numpy.stack the rows first)"
            ) from None
        raise MgpuError(
            f"{path} is not an array of numbers that can be memory-mapped ({exc}); save a numeric array with numpy.save"
        ) from None
    except Exception as exc:
        raise MgpuError(f"{path} is not a .npy array file ({type(exc).__name__}: {exc})") from None
    if not isinstance(arr, np.ndarray):
        raise MgpuError(
            f"{path} is not a .npy array file (numpy.load gave a {type(arr).__name__}); "
            "for .npz archives load each array with numpy and use mg.from_numpy"
        )
    name = str(arr.dtype)
    if name not in _NUMPY_OK:
        raise MgpuError(f"{path} holds {name} data; mg.load reads numeric .npy files ({', '.join(_NUMPY_OK)})")
    return tuple(arr.shape), name


def _pt_header(path: str, key: str | None) -> tuple[tuple[int, ...], str, str | None]:
    import torch

    try:
        obj = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
    except Exception as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MgpuError(
            f"{path} cannot be memory-mapped as a torch.save file ({text}); save tensors with "
            "torch.save (zip format, the default) so each rank can read only its slice"
        ) from None
    if isinstance(obj, dict):
        tensors = [k for k, v in obj.items() if isinstance(v, torch.Tensor)]
        if key is None and len(tensors) == 1:
            key = tensors[0]
        if key is None:
            raise MgpuError(
                f"{path} holds {len(tensors)} tensors ({', '.join(map(str, tensors[:5]))}); pass key= to choose one"
            )
        if key not in obj or not isinstance(obj[key], torch.Tensor):
            raise MgpuError(f"{path} has no tensor named {key!r}; it has {', '.join(map(str, tensors)) or 'none'}")
        t = obj[key]
    elif isinstance(obj, torch.Tensor):
        if key is not None:
            raise MgpuError(f"{path} holds a single tensor, not a dict: leave out key=")
        t = obj
    else:
        raise MgpuError(f"{path} holds a {type(obj).__name__}, not a tensor (or a dict of tensors)")
    return tuple(t.shape), dtype_name(t.dtype), key


def _safetensors_header(path: str, key: str | None) -> tuple[tuple[int, ...], str, str]:
    try:
        from safetensors import safe_open
    except ImportError:
        raise MgpuError(
            "reading .safetensors files needs the safetensors package: pip install 'jupyter_mgpu[io]'"
        ) from None
    try:
        with safe_open(path, framework="pt") as f:
            keys = list(f.keys())
            if key is None and len(keys) == 1:
                key = keys[0]
            if key is None:
                raise MgpuError(f"{path} holds {len(keys)} tensors ({', '.join(keys[:5])}); pass key= to choose one")
            if key not in keys:
                raise MgpuError(f"{path} has no tensor named {key!r}; it has {', '.join(keys) or 'none'}")
            sl = f.get_slice(key)
            shape, dt = tuple(sl.get_shape()), str(sl.get_dtype())
    except MgpuError:
        raise
    except Exception as exc:
        raise MgpuError(f"{path} is not a safetensors file ({type(exc).__name__}: {exc})") from None
    names = {
        "F64": "float64",
        "F32": "float32",
        "F16": "float16",
        "BF16": "bfloat16",
        "I64": "int64",
        "I32": "int32",
        "I16": "int16",
        "I8": "int8",
        "U8": "uint8",
        "BOOL": "bool",
    }
    if dt not in names:
        raise MgpuError(f"{path}: tensor {key!r} has dtype {dt}, which jupyter_mgpu does not hold")
    return shape, names[dt], key


def load(
    path: str | os.PathLike[str], placement: Any = None, *, key: str | None = None, session: Any = None
) -> DistTensor:
    """A DistTensor read from ``path`` (.npy, .pt, .safetensors); each rank reads only its shard.

    ``key`` picks one tensor of a file that holds several (a dict saved with ``torch.save``, or a
    safetensors file). The file is checked on the controller first (its header only).
    """
    path = os.fspath(path)
    kind = _kind(path)
    if not os.path.exists(path):
        raise MgpuError(f"{path} does not exist")
    if not os.path.isfile(path):
        raise MgpuError(f"{path} is not a file")
    path = os.path.abspath(path)
    if kind == ".npy":
        if key is not None:
            raise MgpuError("a .npy file holds one array: leave out key=")
        shape, dt = _npy_header(path)
    elif kind == ".pt":
        shape, dt, key = _pt_header(path, key)
    else:
        shape, dt, key = _safetensors_header(path, key)
    s = session or sessmod.current()
    s.check_alive()
    target = placement_of(placement, len(shape), s.world_size)
    h = new_handle(s, shape, dt, target)
    label = f"mg.load {os.path.basename(path)}"
    if kind == ".npy":
        run_creating(h, rank_io.load_npy, h.handle_id, path, shape, target, label=label)
    elif kind == ".pt":
        run_creating(h, rank_io.load_pt, h.handle_id, path, key, shape, target, label=label)
    else:
        run_creating(h, rank_io.load_safetensors, h.handle_id, path, key, shape, target, label=label)
    return h


def save(tensor: DistTensor, path: str | os.PathLike[str], *, key: str = "tensor") -> str:
    """Write ``tensor`` to ``path`` and return the absolute path.

    ``.npy``: the controller writes the header and every rank writes its own shard in place (no
    gather). ``.pt`` / ``.safetensors`` are single-writer formats: the tensor is gathered once
    through shared memory and written by the controller (``key`` names it in a safetensors file).
    """
    session_of(tensor)
    path = os.path.abspath(os.fspath(path))
    kind = _kind(path)
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise MgpuError(f"cannot save to {path}: the folder {folder} does not exist")
    if kind == ".npy":
        import numpy as np

        if tensor.dtype_name not in _NUMPY_OK:
            raise MgpuError(
                f"numpy has no {tensor.dtype_name}: save this tensor as .pt or .safetensors, or convert it first"
            )
        if tensor.nbytes == 0:
            np.save(path, np.empty(tensor.shape, dtype=tensor.dtype_name))
            return path
        # the header (and the file's full size) now; the ranks fill in their rows below
        np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(tensor.dtype_name), shape=tensor.shape).flush()
        tensor.session.run(
            rank_io.save_npy,
            tensor.handle_id,
            path,
            tensor.shape,
            tensor.placement,
            label=f"mg.save {os.path.basename(path)}",
        )
        return path
    data = tensor.gather().clone()
    if kind == ".pt":
        import torch

        torch.save(data, path)
    else:
        try:
            from safetensors.torch import save_file
        except ImportError:
            raise MgpuError(
                "writing .safetensors files needs the safetensors package: pip install 'jupyter_mgpu[io]'"
            ) from None
        save_file({key: data}, path)
    return path


def from_numpy(array: Any, placement: Any = None, session: Any = None) -> DistTensor:
    """Distribute a numpy array of the controller to the ranks (through shared memory)."""
    import numpy as np

    if not isinstance(array, np.ndarray):
        raise MgpuError(f"from_numpy needs a numpy array, got {type(array).__name__}")
    if array.dtype == object:
        raise MgpuError(
            "this numpy array holds Python objects, not numbers; for rows that are arrays "
            "use numpy.stack(list(array)) first (or mg.from_pandas for a dataframe)"
        )
    if str(array.dtype) not in _NUMPY_OK:
        raise MgpuError(f"unsupported numpy dtype {array.dtype}: use one of {', '.join(_NUMPY_OK)}")
    import warnings

    import torch

    with warnings.catch_warnings():  # a read-only array (pandas copy-on-write) is only read here
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(np.ascontiguousarray(array))
    return scatter(tensor, placement=placement, session=session)


def _stack_cells(values: Sequence[Any], name: str) -> Any:
    """One (rows, …) array from cells that are arrays; a clear error naming the first odd row."""
    import numpy as np

    if not len(values):
        raise MgpuError(f"column {name} is empty")
    first = np.asarray(values[0])
    for i, cell in enumerate(values):
        shape = np.shape(cell)
        if shape != first.shape:
            raise MgpuError(
                f"row {i} of column {name} has shape {shape} but row 0 has {first.shape}: "
                "every row must hold an array of the same shape"
            )
    try:
        return np.stack(values)
    except (TypeError, ValueError) as exc:
        raise MgpuError(f"column {name} cannot be turned into numbers ({exc})") from None


def from_pandas(
    frame: Any,
    columns: Sequence[str] | str | None = None,
    placement: Any = None,
    dtype: Any = None,
    session: Any = None,
) -> DistTensor:
    """A DataFrame or Series as one ``(rows, …)`` DistTensor.

    Cells that are arrays (e.g. a 300-d embedding per row) become trailing dims: one such column
    gives ``(rows, 300)``, several give ``(rows, columns, 300)``; numeric scalar columns give
    ``(rows, columns)`` (a Series of numbers gives ``(rows,)``). Rows whose arrays differ in shape are reported by row number.
    """
    try:
        import pandas as pd
    except ImportError:
        raise MgpuError("from_pandas needs pandas: pip install pandas") from None
    import numpy as np

    series = isinstance(frame, pd.Series)
    if series:
        frame = frame.to_frame(name=frame.name if frame.name is not None else 0)
    if not isinstance(frame, pd.DataFrame):
        raise MgpuError(f"from_pandas needs a pandas DataFrame or Series, got {type(frame).__name__}")
    if columns is not None:
        columns = [columns] if isinstance(columns, str) else list(columns)
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise MgpuError(f"the dataframe has no column {missing[0]!r}; it has {', '.join(map(str, frame.columns))}")
        frame = frame[columns]
    if frame.shape[1] == 0:
        raise MgpuError("the dataframe has no columns")
    parts = []
    for name in frame.columns:
        col = frame[name]
        if col.dtype == object:
            parts.append(_stack_cells(col.to_numpy(), repr(name)))
        else:
            parts.append(col.to_numpy())
    shapes = {p.shape[1:] for p in parts}
    if len(shapes) > 1:
        raise MgpuError(
            "the columns hold cells of different shapes "
            f"({', '.join(str(p.shape[1:]) for p in parts)}); choose columns of one shape with columns="
        )
    scalars = parts[0].ndim == 1
    array = parts[0] if len(parts) == 1 and (series or not scalars) else np.stack(parts, axis=1)
    if dtype is not None:
        array = array.astype(dtype_name(dtype))
    elif array.dtype == np.float64 and all(p.dtype == np.float32 for p in parts):
        array = array.astype(np.float32)
    return from_numpy(np.ascontiguousarray(array), placement=placement, session=session)
