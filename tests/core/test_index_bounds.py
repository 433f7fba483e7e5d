"""Index values outside ``[-size, size)`` never reach memory (issue 41): gather, index_select,
embedding, scatter and scatter_add raise ``IndexError`` on every backend, called through
dispatch or straight from the kernel table, and the device computes right afterwards; direct
calls of the kernel table's spatial ops run the op's shape rule (`ember.backend.guard`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ember
from ember import ops
from ember.backend import GUARDED_OPS, ShapeError, apply

DEVICES = ["cpu", "opencl:0", "triton-interpret", "wgpu:0"]
# more stacks where a machine has them (a GPU run: EMBER_EXTRA_DEVICES="cuda:0,fusion<cuda:0>")
DEVICES += [d for d in os.environ.get("EMBER_EXTRA_DEVICES", "").split(",") if d]
MV, NN = ops.movement, ops.nn

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _device(name: str) -> ember.Device:
    try:
        d = ember.device(name)
        ember.zeros(1, device=d).numpy()
    except Exception as exc:  # an absent plugin or driver
        pytest.skip(f"{name} is not available here: {exc}")
    return d


def _ix(d: ember.Device, values: Any) -> ember.Tensor:
    return ember.tensor(np.asarray(values, dtype=np.int64), device=d)


# name, ember call on (x, index tensor), numpy oracle on (x, index array); index shape [1, 4]
CASES: list[tuple[str, Callable[..., Any], Callable[..., Any]]] = [
    ("gather", lambda x, i: apply(MV.gather, x, i, dim=0),
     lambda x, i: np.take_along_axis(x, i, 0)),
    ("index_select", lambda x, i: apply(MV.index_select, x, i.reshape(-1), dim=0),
     lambda x, i: x[i.reshape(-1)]),
    ("embedding", lambda x, i: apply(NN.embedding, x, i),
     lambda x, i: x[i]),
    ("scatter_add", lambda x, i: apply(MV.scatter_add, x, i, ember.ones((1, 4), device=x.device),
                                       dim=0),
     lambda x, i: _scatter_add(x, i)),
]


def _scatter_add(x: np.ndarray, i: np.ndarray) -> np.ndarray:
    out = x.copy()
    np.add.at(out, (i, np.arange(4)[None, :]), 1.0)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("name", "call", "oracle"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("bad", [3, 1000, -4, -(2**62)])
def test_an_index_out_of_range_raises_and_the_device_goes_on(
        device: str, name: str, call: Callable[..., Any], oracle: Callable[..., Any],
        bad: int) -> None:
    d = _device(device)
    x = ember.tensor(X, device=d)
    index = np.array([[0, 2, bad, 1]])
    with pytest.raises(IndexError, match="out of bounds"):
        call(x, _ix(d, index)).numpy()
    good = np.array([[0, 2, -1, 1]])  # -1: the last row, as numpy (and ember's cpu) take it
    np.testing.assert_allclose(call(x, _ix(d, good)).numpy(), oracle(X, good))


@pytest.mark.parametrize("device", ["opencl:0", "triton-interpret", "wgpu:0"])
def test_the_kernel_table_checks_index_values_too(device: str) -> None:
    d = _device(device)
    kernels = d.backend.kernels
    x = ember.tensor(X, device=d)._data
    with pytest.raises(IndexError, match=r"^gather: index 7 is out of bounds"):
        kernels[MV.gather](x, _ix(d, [[7, 0, 0, 0]])._data, dim=0)
    with pytest.raises(IndexError, match=r"^embedding: index -9 is out of bounds"):
        kernels[NN.embedding](x, _ix(d, [1, -9])._data)
    with pytest.raises(IndexError, match=r"^index_select: index 5 is out of bounds for "
                                         r"dimension 1"):
        kernels[MV.index_select](x, _ix(d, [5])._data, 1)  # dim by position


# (op, payload shapes, params) that the op's rule refuses: what a direct table call passes
BAD_PARAMS: list[tuple[Any, list[tuple[int, ...]], dict[str, Any]]] = [
    (NN.conv2d, [(1, 2, 8, 8), (3, 2, 3, 3)],
     dict(stride=(1, -1), padding=(0, 0), dilation=(1, 1), groups=1)),
    (NN.conv2d, [(1, 2, 8, 8), (3, 2, 9, 9)],
     dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)),
    (NN.max_pool2d, [(1, 2, 8, 8)],
     dict(kernel_size=(2, 2), stride=(2, 2), padding=(5, 5), dilation=(1, 1),
          ceil_mode=False)),
    (NN.avg_pool2d, [(1, 2, 8, 8)],
     dict(kernel_size=(20, 2), stride=(1, 1), padding=(0, 0), ceil_mode=False,
          count_include_pad=True)),
    (MV.pad, [(4, 6)], dict(pad=((-5, 0), (0, 0)))),
    (MV.slice, [(4, 6)], dict(starts=(0, 0), stops=(9, 6), steps=(1, 1))),
    (MV.gather, [(4, 6), (4, 9)], dict(dim=0)),
]


@pytest.mark.parametrize("device", ["opencl:0", "triton-interpret", "wgpu:0"])
@pytest.mark.parametrize(("op", "shapes", "params"), BAD_PARAMS,
                         ids=[f"{c[0].name}{i}" for i, c in enumerate(BAD_PARAMS)])
def test_a_direct_kernel_call_runs_the_ops_rule(device: str, op: Any,
                                                shapes: list[tuple[int, ...]],
                                                params: dict[str, Any]) -> None:
    d = _device(device)
    kernel = d.backend.kernels.get(op)
    if kernel is None:
        pytest.skip(f"{device} has no kernel of its own for {op.name}")
    assert op in GUARDED_OPS
    payloads = [ember.zeros(s, device=d, dtype=ember.int64 if i else ember.float32)._data
                if op is MV.gather else ember.zeros(s, device=d)._data
                for i, s in enumerate(shapes)]
    # only the keys this kernel takes: the rule must refuse before anything else
    with pytest.raises(ShapeError, match=rf"^{op.name}: "):
        kernel(*payloads, **params)
    np.testing.assert_allclose((ember.tensor(X, device=d)[1:3] * 2).numpy(), X[1:3] * 2)


@pytest.mark.parametrize("device", ["opencl:0", "triton-interpret", "wgpu:0"])
def test_every_guarded_op_of_a_backend_is_wrapped(device: str) -> None:
    d = _device(device)
    for op in GUARDED_OPS:
        kernel = d.backend.kernels.get(op)
        if kernel is not None:
            assert getattr(kernel, "__ember_guarded__", None) is op, op.name


@pytest.mark.parametrize("device", ["opencl:0", "triton-interpret", "wgpu:0"])
def test_large_index_tensors_are_checked_by_device_reductions(
        device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.backend import guard

    d = _device(device)
    monkeypatch.setattr(guard, "READ_WHOLE", 0)  # every index tensor counts as large
    x = ember.tensor(X, device=d)
    with pytest.raises(IndexError, match=r"^gather: index 4 is out of bounds"):
        apply(MV.gather, x, _ix(d, [[0, 4, 1, 2]]), dim=0)
    with pytest.raises(IndexError, match=r"^gather: index -5 is out of bounds"):
        apply(MV.gather, x, _ix(d, [[0, -5, 1, 2]]), dim=0)
    good = np.array([[2, 0, -3, 1]])
    np.testing.assert_allclose(apply(MV.gather, x, _ix(d, good), dim=0).numpy(),
                               np.take_along_axis(X, good, 0))
