"""Fusion checks every op it records with core's shape rule (issue 41): a bad reduction,
matmul or view is refused at the call, naming the op, not at the flush, and no fused kernel
ever sees params or shapes that do not fit.  The device computes right afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember
import numpy as np
import pytest
from ember import ops
from ember.backend import ShapeError, apply

import ember_fusion
from ember_fusion._graph import SHAPE_RULES, VIEW_RULES, Handle

INNER = ["cpu", "opencl:0", "triton-interpret", "wgpu:0"]

MV, RD = ops.movement, ops.reduction

#: (op, params) that do not fit a [4, 6] input, applied raw (as a plugin or Remote could)
BAD: list[tuple[Any, dict[str, Any]]] = [
    (MV.reshape, dict(shape=(5, 5))),
    (MV.reshape, dict(shape=(-4, -6))),
    (MV.permute, dict(dims=(0, 0))),
    (MV.permute, dict(dims=(0, 2))),
    (MV.permute, dict(dims=(1,))),
    (MV.expand, dict(shape=(3, 4, 6))),
    (MV.expand, dict(shape=(4, 7))),
    (MV.slice, dict(starts=(0, 0), stops=(9, 6), steps=(1, 1))),
    (MV.slice, dict(starts=(-1, 0), stops=(4, 6), steps=(1, 1))),
    (MV.slice, dict(starts=(0, 0), stops=(4, 6), steps=(0, 1))),
    (MV.slice, dict(starts=(0,), stops=(4,), steps=(1,))),
    (RD.sum, dict(dims=(2,), keepdim=False)),
    (RD.sum, dict(dims=(-3,), keepdim=True)),
    (RD.max, dict(dims=(True,), keepdim=False)),
    (RD.mean, dict(dims=(0, 7), keepdim=False)),
    (RD.argmax, dict(dim=5, keepdim=False)),
]


def _device(inner: str) -> ember.Device:
    # eager=0 (record every op, however small) is an option of the cpu fusion compiler; the
    # others record small ops anyway (checked in `_pending`)
    name = f"fusion<{inner}>" if inner != "cpu" else f"fusion<{inner},eager=0>"
    try:
        d = ember.device(name)
        ember.zeros(1, device=d).numpy()
    except Exception as exc:  # an absent plugin or driver
        pytest.skip(f"{name} is not available here: {exc}")
    return d


def _pending(d: ember.Device, data: np.ndarray) -> ember.Tensor:
    """A fusion tensor whose value is still recorded, not computed."""
    x = ember.tensor(data, device=d)
    # a flush that ran ``x * 2`` alone teaches Fusion to run it eagerly from then on (the
    # Triton compiler runs groups of one op as its own kernels): forget that, to record it
    d.backend.decided.clear()  # type: ignore[attr-defined]  # FusionBackend's
    d.backend.alone.clear()  # type: ignore[attr-defined]  # FusionBackend's
    y = x * 2.0
    handle = y.payload
    assert type(handle) is Handle and handle.node.value is None, "the test needs a pending input"
    return y


def _still_right(d: ember.Device, data: np.ndarray) -> None:
    y = _pending(d, data)
    got = (y.reshape(6, 4).permute(1, 0)[1:3].sum(dim=1) + 1).numpy()
    want = (data * 2).reshape(6, 4).T[1:3].sum(axis=1) + 1
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_fusion_records_with_cores_rules() -> None:
    # one rule per op: what Fusion computes a recorded op's shape with is core's rule
    for op in (RD.sum, RD.argmax, ops.linalg.matmul, ops.creation.cast):
        assert SHAPE_RULES[op] is op.shape_rule
    assert set(VIEW_RULES) == {MV.reshape, MV.permute, MV.expand, MV.slice}
    for op, rule in VIEW_RULES.items():
        assert rule is op.shape_rule


@pytest.mark.parametrize("inner", INNER)
@pytest.mark.parametrize(("op", "params"), BAD, ids=lambda v: getattr(v, "name", None))
def test_a_bad_recorded_op_is_refused_at_the_call(inner: str, op: Any,
                                                  params: dict[str, Any]) -> None:
    d = _device(inner)
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    y = _pending(d, data)
    before = ember_fusion.stats(d).flushes
    with pytest.raises(ShapeError, match=rf"^{op.name}: "):
        apply(op, y, **params)
    # an op Fusion records is refused while recording: nothing was flushed to find out (one
    # it cannot fuse, argmax on Triton, runs eagerly: its input is computed, then refused)
    if op in VIEW_RULES or d.backend.compiler.fusible(op, ember.float32):  # type: ignore[attr-defined]  # FusionBackend's
        assert ember_fusion.stats(d).flushes == before
    _still_right(d, data)


@pytest.mark.parametrize("inner", INNER)
def test_a_bad_matmul_is_refused_at_the_call(inner: str) -> None:
    d = _device(inner)
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    y = _pending(d, data)
    before = ember_fusion.stats(d).flushes
    with pytest.raises(ShapeError, match=r"^matmul: "):
        apply(ops.linalg.matmul, y, y)
    with pytest.raises(ShapeError, match=r"^matmul: "):
        apply(ops.linalg.matmul, y, _pending(d, np.ones((6,), np.float32)))
    assert ember_fusion.stats(d).flushes == before
    np.testing.assert_allclose((y @ y.permute(1, 0)).numpy(), (data * 2) @ (data * 2).T,
                               rtol=1e-5)


PUBLIC: list[tuple[str, Callable[[ember.Tensor], Any]]] = [
    ("reshape", lambda y: y.reshape(5, 5)),
    ("permute", lambda y: y.permute(0, 0)),
    ("expand", lambda y: y.expand(3, 5, 6)),
    ("sum", lambda y: y.sum(dim=2)),
    ("matmul", lambda y: y @ y),
]


@pytest.mark.parametrize("inner", INNER)
@pytest.mark.parametrize(("name", "call"), PUBLIC, ids=[n for n, _ in PUBLIC])
def test_the_public_api_refuses_at_the_call_on_fusion(inner: str, name: str,
                                                      call: Callable[[ember.Tensor], Any]) -> None:
    d = _device(inner)
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    y = _pending(d, data)
    with pytest.raises((ShapeError, IndexError), match=name):
        call(y)
    _still_right(d, data)


@pytest.mark.parametrize(("op", "params"), BAD[:4], ids=lambda v: getattr(v, "name", None))
def test_computed_inputs_are_checked_too(op: Any, params: dict[str, Any]) -> None:
    # inputs a flush computed already take the eager path: the same rule refuses there
    d = _device("cpu")
    y = _pending(d, np.ones((4, 6), np.float32))
    y.numpy()
    with pytest.raises(ShapeError, match=rf"^{op.name}: "):
        apply(op, y, **params)
