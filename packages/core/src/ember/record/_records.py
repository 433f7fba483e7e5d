"""Saving and loading modules, optimizers and schedulers as safetensors records."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._device import Device, device as _device
from .._errors import RecordError
from .._tensor import Tensor
from ._format import parse_json, read_file, write_file
from .remap import Rule, remap_keys

__all__ = ["load", "load_tensors", "read_metadata", "save", "save_tensors"]

PathLike = str | os.PathLike[str]


def _ember_version() -> str:
    import ember

    return str(ember.__version__)


def save_tensors(path: PathLike, tensors: Mapping[str, Tensor],
                 metadata: Mapping[str, str] | None = None) -> None:
    """Write tensors by name to a safetensors file, atomically.

    The metadata records the ember version and each key's dtype, besides ``metadata``.
    """
    meta = {"format": "ember", "ember_version": _ember_version(),
            "dtypes": json.dumps({k: t.dtype.name for k, t in tensors.items()})}
    meta.update(metadata or {})
    write_file(path, {k: t.numpy() for k, t in tensors.items()}, meta)


def load_tensors(path: PathLike, *, device: str | Device | None = None
                 ) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Read every tensor of a safetensors file (ember's or another framework's) and its metadata.

    Examples
    --------
    >>> import ember, tempfile, os
    >>> from ember import record
    >>> path = os.path.join(tempfile.mkdtemp(), "t.safetensors")
    >>> record.save_tensors(path, {"w": ember.ones(2)})
    >>> tensors, meta = record.load_tensors(path)
    >>> tensors["w"].tolist(), meta["format"]
    ([1.0, 1.0], 'ember')
    """
    from .._creation import tensor

    arrays, meta = read_file(path)
    dev = _device(device)
    tensors = {k: tensor(np.require(a, requirements="C"), device=dev) for k, a in arrays.items()}
    return tensors, meta


def read_metadata(path: PathLike) -> dict[str, str]:
    """The metadata of a record (ember version, kind, dtypes, parameter paths, ...)."""
    return read_file(path)[1]


def save(obj: Any, path: PathLike, *, metadata: Mapping[str, str] | None = None) -> None:
    """Save a `Module`, an `Optimizer` or a learning-rate scheduler to ``path``.

    A module's record holds its `state_dict` (parameters and persistent buffers) under their
    dotted paths; the metadata lists the kind, the ember version, the dtypes and the paths.
    The write is atomic (temporary file, fsync, rename).  Never pickles.

    Examples
    --------
    >>> import ember, tempfile, os
    >>> from ember import nn, record
    >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
    >>> model = nn.Linear(3, 2)
    >>> record.save(model, path)
    >>> copy = nn.Linear(3, 2)
    >>> _ = record.load(copy, path)
    >>> copy.weight.tolist() == model.weight.tolist()
    True
    """
    from ..nn.module import Module
    from ..optim.lr_scheduler import LRScheduler
    from ..optim.optimizer import Optimizer

    extra = dict(metadata or {})
    if isinstance(obj, Module):
        state = obj.state_dict()
        meta = {"kind": "module", "class": type(obj).__name__,
                "paths": json.dumps(list(state)), **extra}
        save_tensors(path, state, meta)
    elif isinstance(obj, Optimizer):
        tensors, meta = _optimizer_record(obj)
        save_tensors(path, tensors, {**meta, **extra})
    elif isinstance(obj, LRScheduler):
        try:
            text = json.dumps(obj.state_dict())
        except TypeError as exc:
            raise RecordError(f"{path}: scheduler state is not JSON-serialisable: {exc}") from exc
        save_tensors(path, {}, {"kind": "scheduler", "class": type(obj).__name__,
                                "state": text, **extra})
    else:
        raise TypeError(f"record.save saves a Module, an Optimizer or a scheduler, "
                        f"not {type(obj).__name__}")


def load(obj: Any, path: PathLike, *, strict: bool = True, cast: bool = False,
         remap: Sequence[Rule] | None = None) -> Any:
    """Load a record into ``obj`` (a `Module`, `Optimizer` or scheduler), in place.

    Parameters
    ----------
    strict
        Missing and unexpected keys are errors; else they are returned and skipped.
    cast
        Convert values whose dtype differs from the module's instead of failing.
    remap
        ``(regex, replacement)`` rules renaming the file's keys first (`remap_keys`), to load
        PyTorch or Hugging Face checkpoints whose names differ.

    Returns
    -------
    For a module, `IncompatibleKeys`; else ``None``.

    Raises
    ------
    RecordError
        Naming the file, each offending key and both values.  On any error the object is left
        exactly as it was.
    """
    from ..nn.module import Module, assign_state, prepare_state
    from ..optim.lr_scheduler import LRScheduler
    from ..optim.optimizer import Optimizer

    if isinstance(obj, Module):
        tensors, _ = load_tensors(path)
        if remap:
            tensors = remap_keys(tensors, remap)
        try:
            values = prepare_state(obj, tensors, strict=strict, cast=cast, source="file")
        except RecordError as exc:
            raise RecordError(f"{path}: {exc}") from None
        return assign_state(obj, values, tensors)
    if isinstance(obj, Optimizer):
        tensors, meta = load_tensors(path)
        _expect_kind(path, meta, "optimizer")
        state = _optimizer_state(path, tensors, meta)
        try:
            obj.load_state_dict(state)
        except (ValueError, KeyError) as exc:
            raise RecordError(f"{path}: cannot load the optimizer state: {exc}") from None
        return None
    if isinstance(obj, LRScheduler):
        meta = read_metadata(path)
        _expect_kind(path, meta, "scheduler")
        obj.load_state_dict(parse_json(path, meta["state"], "the scheduler state"))
        return None
    raise TypeError(f"record.load loads into a Module, an Optimizer or a scheduler, "
                    f"not {type(obj).__name__}")


def _expect_kind(path: PathLike, meta: Mapping[str, str], kind: str) -> None:
    if meta.get("kind") != kind:
        raise RecordError(f"{path}: the record holds {meta.get('kind', 'unknown data')!r}, "
                          f"not {kind!r}")


#: how a tensor inside a list of optimizer state (`LBFGS`'s curvature history) is written in
#: the JSON of the scalars: ``{"tensor": key}``, ``key`` the tensor's name in the file
_TENSOR_REF = "tensor"


def _optimizer_record(opt: Any) -> tuple[dict[str, Tensor], dict[str, str]]:
    sd = opt.state_dict()
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, entry in sd["state"].items():
        for name, value in entry.items():
            key = f"state.{idx}.{name}"
            if isinstance(value, Tensor):
                tensors[key] = value
            elif isinstance(value, list | tuple):
                # a list may hold tensors (LBFGS's old_dirs/old_stps): each is stored under
                # its own key, and the list in the JSON refers to it by that key
                items: list[Any] = []
                for i, v in enumerate(value):
                    if isinstance(v, Tensor):
                        tensors[f"{key}.{i}"] = v
                        items.append({_TENSOR_REF: f"{key}.{i}"})
                    else:
                        items.append(v)
                scalars.setdefault(str(idx), {})[name] = items
            else:
                scalars.setdefault(str(idx), {})[name] = value
    try:
        meta = {"kind": "optimizer", "class": type(opt).__name__,
                "param_groups": json.dumps(sd["param_groups"]), "scalars": json.dumps(scalars)}
    except TypeError as exc:
        raise RecordError(f"optimizer options are not JSON-serialisable: {exc}") from exc
    return tensors, meta


def _optimizer_state(path: PathLike, tensors: Mapping[str, Tensor],
                     meta: Mapping[str, str]) -> dict[str, Any]:
    if "param_groups" not in meta:
        raise RecordError(f"{path}: optimizer metadata is missing or corrupted: no param_groups")
    groups = parse_json(path, meta["param_groups"], "the optimizer's param_groups metadata")
    scalars = parse_json(path, meta.get("scalars", "{}"), "the optimizer's scalars metadata")
    referenced: set[str] = set()

    def resolve(v: Any) -> Any:
        if isinstance(v, dict) and set(v) == {_TENSOR_REF}:
            key = v[_TENSOR_REF]
            if key not in tensors:
                raise RecordError(f"{path}: the optimizer state refers to tensor {key!r}, "
                                  "which the file does not hold")
            referenced.add(key)
            return tensors[key]
        if isinstance(v, list):
            return [resolve(x) for x in v]
        return v

    state: dict[int, dict[str, Any]] = {}
    for idx, entry in scalars.items():
        state.setdefault(int(idx), {}).update({k: resolve(v) for k, v in entry.items()})
    for key, value in tensors.items():
        if key in referenced:
            continue
        parts = key.split(".", 2)
        if (len(parts) != 3 or parts[0] != "state" or not parts[1].isdigit()
                or "." in parts[2]):
            raise RecordError(f"{path}: unexpected key {key!r} in an optimizer record")
        state.setdefault(int(parts[1]), {})[parts[2]] = value
    return {"state": state, "param_groups": groups}
