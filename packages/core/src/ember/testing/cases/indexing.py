# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""Indexing with numpy semantics: basic slices (negative steps), None/..., integer tensors,
boolean masks, and ``x[idx] = v`` as a functional update."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember

from ... import _dtype as dt
from .._case import Arg, Case, register, rng_for, sample
from ._build import ALL, case

_MASK = np.array([True, False, True])
_ROWS = np.array([2, 0, 2, -1])

#: variant: key (the same object indexes numpy and ember; tensors are made per device)
_BASIC: dict[str, Any] = {
    "int": 1,
    "neg-int": -1,
    "int-int": (1, -2),
    "slice": slice(1, 3),
    "neg-step": slice(None, None, -1),
    "neg-step-2": (slice(None, None, -2), slice(1, None)),
    "neg-start-stop": (slice(-1, 0, -1), slice(-3, -1)),
    "step-2": (slice(None), slice(None, None, 2)),
    "empty-slice": slice(2, 1),
    "none": (None, slice(None), None),
    "ellipsis": (Ellipsis, 0),
    "ellipsis-none": (0, Ellipsis, None),
    "out-of-range-slice": slice(1, 100),
    "list": [0, 2],
    "list-dim1": (slice(None), [3, 0, 0]),
}


def _get(key: Any) -> Any:
    return lambda t: t[key]


def _get_np(key: Any) -> Any:
    return lambda v: v[key]


for _d in ALL:
    for _variant, _key in _BASIC.items():
        for view in ("", "permuted"):
            cid = f"getitem-{_variant}{'-' + view if view else ''}-{_d.name}"
            x = Arg(np.asarray(sample((3, 4, 2), _d, rng_for(cid))), view, (), _d)
            case(cid, "indexing", _get(_key), _get_np(_key), [x], _d)
    rng = rng_for(f"getitem-tensor-{_d.name}")
    x = Arg(np.asarray(sample((3, 4), _d, rng)), "", (), _d)
    idx = Arg(_ROWS.astype(np.int64), "", (), dt.int64)
    case(f"getitem-int-tensor-{_d.name}", "indexing", lambda t, i: t[i], lambda v, i: v[i],
         [x, idx], _d, grad=(0,) if _d.kind == "f" else ())
    idx2 = Arg(np.array([[0, 1], [2, 3]], dtype=np.int64), "", (), dt.int64)
    case(f"getitem-int-tensor-2d-dim1-{_d.name}", "indexing", lambda t, i: t[:, i],
         lambda v, i: v[:, i], [x, idx2], _d, grad=(0,) if _d.kind == "f" else ())
    rows = Arg(np.array([0, 2], dtype=np.int64), "", (), dt.int64)
    cols = Arg(np.array([3, 1], dtype=np.int64), "", (), dt.int64)
    case(f"getitem-int-tensor-pair-{_d.name}", "indexing", lambda t, i, j: t[i, j],
         lambda v, i, j: v[i, j], [x, rows, cols], _d, grad=(0,) if _d.kind == "f" else ())
    mask = Arg(_MASK, "", (), dt.bool_)
    case(f"getitem-bool-mask-rows-{_d.name}", "indexing", lambda t, m: t[m], lambda v, m: v[m],
         [x, mask], _d, grad=(0,) if _d.kind == "f" else ())
    full_mask = Arg(np.asarray(sample((3, 4), dt.bool_, rng)), "", (), dt.bool_)
    case(f"getitem-bool-mask-full-{_d.name}", "indexing", lambda t, m: t[m], lambda v, m: v[m],
         [x, full_mask], _d, grad=(0,) if _d.kind == "f" else ())
    case(f"getitem-bool-mask-dim1-{_d.name}", "indexing",
         lambda t, m: t[:, m], lambda v, m: v[:, m],
         [x, Arg(np.array([False, True, True, False]), "", (), dt.bool_)], _d,
         grad=(0,) if _d.kind == "f" else ())


# -- setitem: a functional update ------------------------------------------------------------------

def _set(key: Any, value: Any) -> Any:
    def fn(t: Any, *vals: Any) -> Any:
        y = t.clone()
        y[key] = vals[0] if vals else value
        return y
    return fn


def _set_np(key: Any, value: Any) -> Any:
    def fn(v: np.ndarray, *vals: Any) -> Any:
        y = v.copy()
        y[key] = vals[0] if vals else value
        return y
    return fn


_SET: dict[str, tuple[Any, Any]] = {
    "int": (1, 1),
    "slice": ((slice(None), slice(1, 3)), 0),
    "neg-step": ((slice(None, None, -2),), 1),
    "ellipsis": ((Ellipsis, -1), 0),
}

for _d in ALL:
    for _variant, (_key, _value) in _SET.items():
        cid = f"setitem-{_variant}-scalar-{_d.name}"
        x = Arg(np.asarray(sample((3, 4), _d, rng_for(cid))), "", (), _d)
        case(cid, "indexing", _set(_key, _value), _set_np(_key, _value), [x], _d,
             grad=(0,) if _d.kind == "f" else ())
    rng = rng_for(f"setitem-tensor-{_d.name}")
    x = Arg(np.asarray(sample((3, 4), _d, rng)), "", (), _d)
    v = Arg(np.asarray(sample((2,), _d, rng)), "", (), _d)
    g = (0, 1) if _d.kind == "f" else ()
    case(f"setitem-slice-tensor-broadcast-{_d.name}", "indexing",
         _set((slice(None), slice(1, 3)), None),
         _set_np((slice(None), slice(1, 3)), None), [x, v], _d, grad=g)
    mask = Arg(np.asarray(sample((3, 4), dt.bool_, rng)), "", (), dt.bool_)
    case(f"setitem-bool-mask-scalar-{_d.name}", "indexing",
         lambda t, m: _mask_set(t, m),
         lambda a, m: np.where(m, np.zeros((), a.dtype), a), [x, mask], _d,
         grad=(0,) if _d.kind == "f" else ())
    rows = Arg(np.array([2, 0], dtype=np.int64), "", (), dt.int64)
    vals = Arg(np.asarray(sample((2, 4), _d, rng)), "", (), _d)
    case(f"setitem-int-tensor-{_d.name}", "indexing", lambda t, i, w: _index_set(t, i, w),
         lambda a, i, w: _index_set_np(a, i, w), [x, rows, vals], _d,
         grad=(0, 2) if _d.kind == "f" else ())


def _mask_set(t: Any, m: Any) -> Any:
    y = t.clone()
    y[m] = 0
    return y


def _index_set(t: Any, i: Any, w: Any) -> Any:
    y = t.clone()
    y[i] = w
    return y


def _index_set_np(a: np.ndarray, i: np.ndarray, w: np.ndarray) -> np.ndarray:
    y = a.copy()
    y[i] = w
    return y


def _check_setitem_keeps_other_views(device: Any) -> None:
    x = ember.tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    alias = x
    before = x.numpy()
    x[0, 1] = 9.0
    np.testing.assert_array_equal(x.numpy(), [[1.0, 9.0], [3.0, 4.0]])
    np.testing.assert_array_equal(before, [[1.0, 2.0], [3.0, 4.0]])
    assert alias is x


register(Case(id="setitem-rebinds-and-keeps-host-copies", group="indexing",
              check=_check_setitem_keeps_other_views, dtypes=(dt.float32,)))
