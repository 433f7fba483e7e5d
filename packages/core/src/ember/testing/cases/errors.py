"""Error messages name the problem: both shapes, both devices, the device and the dtype, the
position of a ragged list."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ember

from ... import _dtype as dt
from ..._device import REGISTRY, DeviceSpec
from .._case import Case, register


def _raises(exc: type[BaseException], *needles: str) -> Any:
    """``pytest.raises`` whose message must contain every needle (literally)."""
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(n)})" for n in needles))


def _shapes_add(device: Any) -> None:
    a, b = ember.ones(2, 3, device=device), ember.ones(4, device=device)
    with _raises(ember.ShapeError, "(2, 3)", "(4,)"):
        a + b


def _shapes_matmul(device: Any) -> None:
    a, b = ember.ones(2, 3, device=device), ember.ones(4, 5, device=device)
    with _raises(ember.ShapeError, "(2, 3)", "(4, 5)"):
        a @ b


def _shapes_cat(device: Any) -> None:
    a, b = ember.ones(2, 3, device=device), ember.ones(2, 4, device=device)
    with _raises(ember.ShapeError, "(2, 3)", "(2, 4)"):
        ember.cat([a, b], 0)


def _shapes_reshape(device: Any) -> None:
    with _raises((ValueError, ember.ShapeError), "(2, 3)", "(4,)"):  # type: ignore[arg-type]
        ember.ones(2, 3, device=device).reshape(4)


def _shapes_where(device: Any) -> None:
    c = ember.ones(3, dtype=dt.bool_, device=device)
    with _raises(ember.ShapeError, "(3,)", "(2,)"):
        ember.where(c, ember.ones(2, device=device), 0.0)


def peer_device(device: Any, *, without: dt.DType | None = None) -> Any:
    """A second device of the same backend family, registered under ``<name>-peer``; with
    ``without``, a peer that does not support that dtype."""
    base = device.base
    spec = REGISTRY.devices[base.name]
    name = f"{base.name}-peer" + (f"-no-{without.name}" if without else "")
    if name not in REGISTRY.devices:
        def factory(index: int, spec: DeviceSpec = spec) -> Any:
            backend = spec.factory(index)
            if without is not None:
                backend.dtypes = frozenset(backend.dtypes) - {without}
            return backend
        REGISTRY.devices[name] = DeviceSpec(name=name, factory=factory, probe=spec.probe,
                                            indexed=False, description="conformance peer")
    return ember.device(name)


def _two_devices(device: Any) -> None:
    other = peer_device(device)
    a, b = ember.ones(3, device=device), ember.ones(3, device=other)
    with _raises(ember.DeviceMismatchError, str(device), str(other)):
        a + b
    with _raises(ember.DeviceMismatchError, str(device), str(other)):
        ember.cat([a, b])
    np.testing.assert_array_equal((a + b.to(device)).numpy(), [2.0, 2.0, 2.0])


def _unsupported_dtype(device: Any) -> None:
    missing = [d for d in dt.ALL_DTYPES if not device.supports(d)]
    target = device
    d = missing[0] if missing else dt.float16
    if not missing:
        target = peer_device(device, without=d)
    with _raises(ember.DTypeError, str(target), d.name):
        ember.zeros(2, dtype=d, device=target)
    with _raises(ember.DTypeError, str(target), d.name):
        ember.ones(2, device=target).to(d)


def _ragged(device: Any) -> None:
    with _raises(ember.ShapeError, "[1]"):
        ember.tensor([[1.0, 2.0], [3.0]], device=device)
    with _raises(ember.ShapeError, "[0][1]"):
        ember.tensor([[[1.0], [2.0, 3.0]]], device=device)


def _bad_dim(device: Any) -> None:
    with _raises(IndexError, "3", "2"):
        ember.ones(2, 2, device=device).sum(dim=3)


def _reads_values_at_once(device: Any) -> bool:
    """Whether value checks raise at the op (host backends) rather than at the next sync
    (backends with ``record_error``: there the message cannot name the value)."""
    from ember.backend import Backend

    return type(device.base.backend).record_error is Backend.record_error


def _raises_value(device: Any, exc: Any, op: str, value: int, *needles: str) -> Any:
    """An error naming ``op`` and ``needles`` (the size), and ``value`` where it is known."""
    known = (f" {value}",) if _reads_values_at_once(device) else ()
    return _raises(exc, f"{op}:", *needles, *known)


def _after_error_device_works(device: Any) -> None:
    """A reported error is cleared: the next op and sync run normally."""
    np.testing.assert_array_equal(ember.arange(3, device=device).numpy(), [0, 1, 2])


def _index_out_of_bounds(device: Any) -> None:
    a = ember.arange(10, device=device)
    for bad in (-20, -11, 10, 12):
        with _raises_value(device, IndexError, "index", bad, "dimension 0", "size 10"):
            a[ember.tensor([3, bad], device=device)].numpy()
        _after_error_device_works(device)
    m = ember.arange(9, device=device).reshape(3, 3)
    # the second index is out of range for its axis though its merged linear index (5) is not
    with _raises_value(device, IndexError, "index", 5, "dimension 1", "size 3"):
        m[ember.tensor([0], device=device), ember.tensor([5], device=device)].numpy()
    with _raises_value(device, IndexError, "index", -4, "dimension 0", "size 3"):
        m[ember.tensor([-4], device=device), 1].numpy()
    x = ember.zeros(10, device=device)
    with _raises_value(device, IndexError, "index_put", 12, "size 10"):
        x[ember.tensor([12], device=device)] = 1.0
        x.numpy()
    _after_error_device_works(device)


def _index_valid_edges(device: Any) -> None:
    ref = np.arange(10)
    a = ember.arange(10, device=device)
    for key in ([-10], [9], [-1, 0, -10], []):
        idx = np.array(key, dtype=np.int64)
        np.testing.assert_array_equal(a[ember.tensor(idx, device=device)].numpy(), ref[idx])
    m = ember.arange(12, device=device).reshape(3, 4)
    i, j = np.array([-3, 2]), np.array([-4, 3])
    np.testing.assert_array_equal(
        m[ember.tensor(i, device=device), ember.tensor(j, device=device)].numpy(),
        np.arange(12).reshape(3, 4)[i, j])
    empty = a[ember.tensor(np.zeros(0, np.int64), device=device)]
    assert empty.shape == (0,)
    x = ember.zeros(10, device=device)
    x[ember.tensor([-10, 9], device=device)] = 1.0
    np.testing.assert_array_equal(x.numpy(), [1.0] + [0.0] * 8 + [1.0])
    np.testing.assert_array_equal(
        a.index_select(0, ember.tensor([-10, 9], device=device)).numpy(), [0, 9])


def _index_ops_out_of_bounds(device: Any) -> None:
    a = ember.arange(10.0, device=device)
    ok = ember.tensor([2, -10], device=device)
    np.testing.assert_array_equal(a.index_select(0, ok).numpy(), [2.0, 0.0])
    np.testing.assert_array_equal(a.gather(0, ok).numpy(), [2.0, 0.0])
    idx = ember.tensor([2, 10], device=device)
    with _raises_value(device, IndexError, "index_select", 10, "size 10"):
        a.index_select(0, idx).numpy()
    with _raises_value(device, IndexError, "gather", 10, "size 10"):
        a.gather(0, idx).numpy()
    with _raises_value(device, IndexError, "scatter", -11, "size 10"):
        a.scatter(0, ember.tensor([-11], device=device), 5.0).numpy()
    with _raises_value(device, IndexError, "scatter_add", 10, "size 10"):
        a.scatter_add(0, idx, ember.ones(2, device=device)).numpy()
    _after_error_device_works(device)


def _mask_shape(device: Any) -> None:
    a = ember.arange(10, device=device)
    mask = ember.tensor([True, False, True], device=device)
    with _raises(IndexError, "index:", "[3]", "[10]"):
        a[mask]
    with _raises(IndexError, "index_put:", "[3]", "[10]"):
        a[mask] = 0
    m = ember.zeros(2, 3, device=device)
    with _raises(IndexError, "index:", "[2, 2]", "[2, 3]"):
        m[ember.ones(2, 2, dtype=dt.bool_, device=device)]
    ok = np.array([True, False] * 5)
    np.testing.assert_array_equal(a[ember.tensor(ok, device=device)].numpy(),
                                  np.arange(10)[ok])


def _embedding_and_one_hot(device: Any) -> None:
    import ember.nn.functional as F

    w = ember.ones(5, 3, device=device)
    for bad in (-1, 5):
        with _raises_value(device, IndexError, "embedding", bad, "out of range", "5"):
            F.embedding(ember.tensor([0, bad], device=device), w).numpy()
    emb = ember.nn.Embedding(5, 3).to(device)
    with _raises_value(device, IndexError, "embedding", -1, "out of range"):
        emb(ember.tensor([-1], device=device)).numpy()
    for bad in (3, -1):
        with _raises_value(device, RuntimeError, "one_hot", bad, "num_classes 3"):
            F.one_hot(ember.tensor([0, bad], device=device), 3).numpy()
    _after_error_device_works(device)
    np.testing.assert_array_equal(F.one_hot(ember.tensor([2, 0], device=device), 3).numpy(),
                                  np.eye(3, dtype=np.int64)[[2, 0]])


def _loss_target_out_of_range(device: Any) -> None:
    import ember.nn.functional as F

    logits = ember.zeros(2, 4, device=device)
    for bad in (-1, 4):
        target = ember.tensor([1, bad], device=device)
        with _raises_value(device, IndexError, "nll_loss", bad, "Target", "[0, 4)"):
            F.nll_loss(logits, target).numpy()
        # cross_entropy reports itself, or the nll_loss it decomposes into (as PyTorch does)
        with _raises(IndexError, "Target", "[0, 4)") as info:
            F.cross_entropy(logits, target).numpy()
        assert "cross_entropy:" in str(info.value) or "nll_loss:" in str(info.value)
    _after_error_device_works(device)
    ignored = F.cross_entropy(logits, ember.tensor([1, -100], device=device))
    np.testing.assert_allclose(ignored.item(), np.log(4.0), rtol=1e-6)


def _integer_division_by_zero(device: Any) -> None:
    a = ember.tensor([7, -7], device=device)
    zero = ember.tensor([2, 0], device=device)
    ops: list[tuple[str, Callable[[], Any]]] = [
        ("floordiv", lambda: a // zero), ("remainder", lambda: a % zero),
        ("floordiv", lambda: a // 0), ("remainder", lambda: a % 0),
        ("floordiv", lambda: ember.floordiv(a, zero)),
        ("remainder", lambda: ember.remainder(7, zero))]
    for name, fn in ops:
        with _raises(ember.DivisionByZeroError, f"{name}:", "ZeroDivisionError"):
            fn().numpy()
    assert issubclass(ember.DivisionByZeroError, RuntimeError)
    _after_error_device_works(device)
    np.testing.assert_array_equal((a // ember.tensor([2, -3], device=device)).numpy(),
                                  np.array([7, -7]) // np.array([2, -3]))
    # float division by zero follows IEEE: inf and nan, no error
    f = ember.tensor([1.0, -1.0, 0.0], device=device)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal((f / 0.0).numpy(), np.array([1.0, -1.0, 0.0]) / 0.0)
        np.testing.assert_array_equal((f // 0.0).numpy(),
                                      np.floor_divide(np.array([1.0, -1.0, 0.0]), 0.0))


def _empty_reductions(device: Any) -> None:
    e = ember.ones(0, 3, device=device)
    for name, fn in (("amax", lambda: e.amax(0)), ("amin", lambda: e.amin(dim=0)),
                     ("max", lambda: e.max(0)), ("min", lambda: e.min(0)),
                     ("argmax", lambda: e.argmax(0)), ("argmin", lambda: e.argmin(0))):
        with _raises(IndexError, f"{name}():", "dim 0", "(0, 3)"):
            fn()
    for name, fn in (("amax", lambda: e.amax()), ("max", lambda: e.max()),
                     ("argmax", lambda: e.argmax()), ("min", lambda: e.min())):
        with _raises(RuntimeError, f"{name}():", "numel() == 0", "(0, 3)"):
            fn()
    assert e.amax(1).shape == (0,)


def _empty_reductions_with_identity(device: Any) -> None:
    import ember.nn.functional as F

    e = ember.ones(0, 3, device=device)
    np.testing.assert_array_equal(e.sum(0).numpy(), np.zeros(3))
    assert e.sum().item() == 0.0
    assert e.prod().item() == 1.0
    assert np.isnan(e.mean().item())
    assert e.softmax(0).shape == (0, 3)
    assert e.log_softmax(0).shape == (0, 3)
    np.testing.assert_array_equal(F.logsumexp(e, 0).numpy(), np.full(3, -np.inf))


def _torch_error_types(device: Any) -> None:
    """Where PyTorch raises RuntimeError, so does ember (its own classes derive from both)."""
    x = ember.ones(2, 3, device=device)
    with _raises(RuntimeError, "(2, 3)", "(3, 2)"):
        x + ember.ones(3, 2, device=device)
    with _raises(RuntimeError, "flip", "dim 0 appears multiple times"):
        x.flip((0, 0))
    with _raises(RuntimeError, "roll", "shifts and dimensions must align"):
        x.roll((1, 1), (0,))
    with _raises(RuntimeError, "Integers to negative integer powers are not allowed"):
        ember.tensor([1, 2], device=device) ** -2
    with _raises(RuntimeError, "negative dimension -1"):
        ember.zeros(-1, 3, device=device)
    with _raises(RuntimeError, "value cannot be converted to type int8 without overflow"):
        ember.tensor([1, 200], dtype=dt.int8, device=device)
    with _raises(IndexError, "sum:", "dim 5 is out of range", "[-2, 1]"):
        x.sum(5)
    with _raises(IndexError, "softmax", "dim 2 is out of range"):
        ember.ones((), device=device).softmax(2)


for _cid, _fn in {
    "error-torch-types-and-words": _torch_error_types,
    "error-broadcast-names-both-shapes": _shapes_add,
    "error-matmul-names-both-shapes": _shapes_matmul,
    "error-cat-names-both-shapes": _shapes_cat,
    "error-reshape-names-shapes": _shapes_reshape,
    "error-where-names-shapes": _shapes_where,
    "error-two-devices-names-both": _two_devices,
    "error-unsupported-dtype-names-device-and-dtype": _unsupported_dtype,
    "error-ragged-list-names-position": _ragged,
    "error-dim-out-of-range": _bad_dim,
    "error-index-out-of-bounds-names-value-and-size": _index_out_of_bounds,
    "error-index-valid-edges-as-numpy": _index_valid_edges,
    "error-index-ops-out-of-bounds": _index_ops_out_of_bounds,
    "error-mask-shape-names-both-shapes": _mask_shape,
    "error-embedding-one-hot-out-of-range": _embedding_and_one_hot,
    "error-loss-target-out-of-range": _loss_target_out_of_range,
    "error-integer-division-by-zero": _integer_division_by_zero,
    "error-empty-reduction-names-op-and-shape": _empty_reductions,
    "error-empty-reductions-with-identity": _empty_reductions_with_identity,
}.items():
    register(Case(id=_cid, group="errors", check=_fn, dtypes=(dt.float32,)))
