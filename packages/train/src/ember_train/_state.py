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


class _Encoder:
    def __init__(self) -> None:
        self.tensors: dict[str, Any] = {}

    def key(self, path: str) -> str:
        key = path or "tensor"
        while key in self.tensors:  # two paths that join to the same dotted string
            key += "_"
        return key

    def encode(self, x: Any, path: str) -> Any:
        import ember

        if x is None or isinstance(x, bool | int | float | str):
            return {"v": x}
        if isinstance(x, ember.Tensor):
            key = self.key(path)
            self.tensors[key] = x.detach()
            return {"tensor": key, "device": str(x.device)}
        if isinstance(x, np.ndarray):
            key = self.key(path)
            try:
                self.tensors[key] = ember.tensor(np.ascontiguousarray(x), device="cpu")
            except (TypeError, ValueError) as e:
                raise TypeError(f"cannot store the {x.dtype} array at {path}: {e}") from None
            return {"ndarray": key}
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


def _decode(node: Any, tensors: dict[str, Any], device: Any) -> Any:
    if "v" in node:
        return node["v"]
    if "tensor" in node:
        return tensors[node["tensor"]].to(device or node["device"])
    if "ndarray" in node:
        return tensors[node["ndarray"]].numpy().copy()
    if "dict" in node:
        return {k: _decode(v, tensors, device) for k, v in node["dict"].items()}
    if "items" in node:
        return {_decode(k, tensors, device): _decode(v, tensors, device) for k, v in node["items"]}
    if "list" in node:
        return [_decode(v, tensors, device) for v in node["list"]]
    if "tuple" in node:
        return tuple(_decode(v, tensors, device) for v in node["tuple"])
    raise ValueError(f"unknown node in checkpoint skeleton: {sorted(node)}")


def save_state(path: str | os.PathLike[str], state: Any) -> None:
    """Store a nested state of tensors, arrays, dicts, lists and scalars in a safetensors file.

    The file is an ``ember.record`` tensor file (atomic write, a checksum per tensor), so a flat
    ``state_dict`` saved here loads with ``ember.record.load(module, path)`` too.

    Examples
    --------
    >>> import ember, tempfile, os
    >>> from ember_train import load_state, save_state
    >>> path = os.path.join(tempfile.mkdtemp(), "opt.safetensors")
    >>> save_state(path, {"step": 3, "state": {0: {"m": ember.ones(2)}}})
    >>> load_state(path)["state"][0]["m"].tolist()
    [1.0, 1.0]
    """
    from ember import record

    enc = _Encoder()
    skeleton = enc.encode(state, "")
    record.save_tensors(path, enc.tensors, {_SKELETON_KEY: json.dumps(skeleton)})


def load_state(path: str | os.PathLike[str], *, device: Any = None) -> Any:
    """Read what `save_state` wrote.  Tensors go back to their saved device unless ``device``.

    A flat safetensors file written by anything else (``ember.record``, PyTorch) loads as a
    ``{name: tensor}`` dict.  A truncated or corrupted file raises ``ember.RecordError``.
    """
    from ember import record

    tensors, meta = record.load_tensors(path, device="cpu")
    if _SKELETON_KEY not in meta:
        return tensors if device is None else {k: t.to(device) for k, t in tensors.items()}
    return _decode(json.loads(meta[_SKELETON_KEY]), tensors, device)
