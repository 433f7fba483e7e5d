"""Nested training state to and from safetensors files, and atomic file writes.

A module's ``state_dict()`` is flat (name -> tensor), but an optimizer's or a scheduler's state
is nested: dicts with int keys, lists of parameter groups, scalars, tensors.  `save_state`
stores every tensor of such a structure in one safetensors file (keys are the dotted paths, so a
flat state dict keeps its own names and loads anywhere safetensors does) and the skeleton,
tensor dtypes and devices as JSON in the file's metadata.  Nothing is ever pickled.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["atomic_write_bytes", "atomic_write_text", "fsync_dir", "load_state", "save_state"]

_SKELETON_KEY = "ember_train.state"
# Numpy dtypes safetensors cannot store natively travel as raw bits of the same width.
_RAW_BITS = {"bfloat16": np.uint16}


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a directory entry (a rename or a new file) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    The bytes go to a temporary file in the same directory, are fsynced, and the file is renamed
    over ``path``; the directory is fsynced so the rename itself survives a power cut.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode())


# ---------------------------------------------------------------------------------------------
# encoding


def _is_tensor(x: Any) -> bool:
    from ember import Tensor

    return isinstance(x, Tensor)


class _Encoder:
    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def key(self, path: str) -> str:
        key = path or "tensor"
        while key in self.arrays:  # two paths that join to the same dotted string
            key += "_"
        return key

    def array(self, arr: np.ndarray, path: str) -> tuple[str, str]:
        name = arr.dtype.name
        if name in _RAW_BITS:
            arr = arr.view(_RAW_BITS[name])
        key = self.key(path)
        self.arrays[key] = np.ascontiguousarray(arr)
        return key, name

    def encode(self, x: Any, path: str) -> Any:
        if x is None or isinstance(x, bool | int | float | str):
            return {"v": x}
        if _is_tensor(x):
            key, dtype = self.array(x.detach().numpy(), path)
            return {"tensor": key, "dtype": str(x.dtype).removeprefix("ember."),
                    "device": str(x.device), "np": dtype}
        if isinstance(x, np.ndarray):
            key, dtype = self.array(x, path)
            return {"ndarray": key, "np": dtype}
        if isinstance(x, np.generic):
            return {"v": x.item()}
        join = (lambda k: f"{path}.{k}") if path else str
        if isinstance(x, dict):
            if all(isinstance(k, str) for k in x):
                return {"dict": {k: self.encode(v, join(k)) for k, v in x.items()}}
            return {"items": [[self.encode(k, join(f"k{i}")), self.encode(v, join(str(k)))]
                              for i, (k, v) in enumerate(x.items())]}
        if isinstance(x, list | tuple):
            tag = "list" if isinstance(x, list) else "tuple"
            return {tag: [self.encode(v, join(str(i))) for i, v in enumerate(x)]}
        raise TypeError(f"cannot store a {type(x).__name__} at {path or 'the top level'} in a "
                        "checkpoint (tensors, arrays, dicts, lists, numbers and strings only)")


def _decode(node: Any, arrays: dict[str, np.ndarray], device: Any) -> Any:
    if "v" in node:
        return node["v"]
    if "tensor" in node:
        import ember

        arr = _restore_dtype(arrays[node["tensor"]], node["np"])
        return ember.tensor(arr, dtype=node["dtype"], device=device or node["device"])
    if "ndarray" in node:
        return _restore_dtype(arrays[node["ndarray"]], node["np"]).copy()
    if "dict" in node:
        return {k: _decode(v, arrays, device) for k, v in node["dict"].items()}
    if "items" in node:
        return {_decode(k, arrays, device): _decode(v, arrays, device) for k, v in node["items"]}
    if "list" in node:
        return [_decode(v, arrays, device) for v in node["list"]]
    if "tuple" in node:
        return tuple(_decode(v, arrays, device) for v in node["tuple"])
    raise ValueError(f"unknown node in checkpoint skeleton: {sorted(node)}")


def _restore_dtype(arr: np.ndarray, name: str) -> np.ndarray:
    if name in _RAW_BITS:
        import ml_dtypes

        return arr.view(getattr(ml_dtypes, name))
    return arr


def encode_state(state: Any) -> bytes:
    """The safetensors bytes of a nested state (see the module docstring)."""
    from safetensors.numpy import save

    enc = _Encoder()
    skeleton = enc.encode(state, "")
    return save(enc.arrays, metadata={_SKELETON_KEY: json.dumps(skeleton)})


def save_state(path: str | os.PathLike[str], state: Any, *, atomic: bool = True) -> None:
    """Store a nested state of tensors, arrays, dicts, lists and scalars in a safetensors file.

    Examples
    --------
    >>> import ember, tempfile, os
    >>> from ember_train._state import load_state, save_state
    >>> path = os.path.join(tempfile.mkdtemp(), "opt.safetensors")
    >>> save_state(path, {"step": 3, "state": {0: {"m": ember.ones(2)}}})
    >>> load_state(path)["state"][0]["m"].tolist()
    [1.0, 1.0]
    """
    data = encode_state(state)
    if atomic:
        atomic_write_bytes(path, data)
    else:
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def load_state(path: str | os.PathLike[str], *, device: Any = None) -> Any:
    """Read what `save_state` wrote.  Tensors go back to their saved device unless ``device``.

    A flat safetensors file written by anything else (``ember.record``, PyTorch) loads as a
    ``{name: tensor}`` dict.
    """
    from safetensors import safe_open

    with safe_open(os.fspath(path), framework="numpy") as f:
        meta = f.metadata() or {}
        arrays = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118  # safe_open has no iter
    if _SKELETON_KEY not in meta:
        import ember

        return {k: ember.tensor(v, device=device) for k, v in arrays.items()}
    return _decode(json.loads(meta[_SKELETON_KEY]), arrays, device)
