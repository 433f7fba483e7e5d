"""Every op validates its params and shapes before any kernel runs (issue 41), checked against
PyTorch: ember raises where torch raises, and gives torch's shape where torch accepts."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import ember
import ember.functional as F
from ember import ops
from ember.backend import ShapeError, apply

torch = pytest.importorskip("torch")
TF = torch.nn.functional

DEVICES = ["cpu", "autodiff<cpu>", "fusion<cpu>", "opencl:0", "triton-interpret", "wgpu:0"]
# more stacks where a machine has them (a GPU run: EMBER_EXTRA_DEVICES="cuda:0,fusion<cuda:0>")
DEVICES += [d for d in os.environ.get("EMBER_EXTRA_DEVICES", "").split(",") if d]


def _device(name: str) -> ember.Device:
    try:
        d = ember.device(name)
        ember.zeros(1, device=d).numpy()
    except Exception as exc:  # an absent plugin or driver
        pytest.skip(f"{name} is not available here: {exc}")
    return d


X, W, WT = (1, 2, 8, 8), (3, 2, 3, 3), (2, 3, 3, 3)

# (op name for the message, ember call, torch call) on x [1, 2, 8, 8]
CASES = [
    ("conv2d", lambda e, x: e.conv2d(x, _t(e, W), stride=(1, -1)), None),
    ("conv2d", lambda e, x: e.conv2d(x, _t(e, W), padding=(0, -1)), None),
    ("conv2d", lambda e, x: e.conv2d(x, _t(e, W), dilation=0), None),
    ("conv2d", lambda e, x: e.conv2d(x, _t(e, (3, 2, 9, 9))), None),
    ("conv2d", lambda e, x: e.conv2d(x, _t(e, (3, 2, 8, 8))), None),
    ("conv2d", lambda e, x: e.conv2d(x, _t(e, W), stride=100, padding=1), None),
    ("conv2d", lambda e, x: e.conv2d(x, _t(e, (3, 1, 3, 3)), groups=2), None),
    ("conv1d", lambda e, x: e.conv1d(x[0], _t(e, (3, 2, 3)), stride=0), None),
    ("conv1d", lambda e, x: e.conv1d(x[0], _t(e, (3, 2, 9))), None),
    ("conv1d", lambda e, x: e.conv1d(x[0], _t(e, (3, 2, 3)), dilation=-2), None),
    ("conv_transpose2d", lambda e, x: e.conv_transpose2d(x, _t(e, WT), stride=0), None),
    ("conv_transpose2d", lambda e, x: e.conv_transpose2d(x, _t(e, WT), stride=2,
                                                         output_padding=2), None),
    ("conv_transpose2d", lambda e, x: e.conv_transpose2d(x, _t(e, WT), stride=2,
                                                         output_padding=1), None),
    ("conv_transpose2d", lambda e, x: e.conv_transpose2d(x, _t(e, WT), padding=-1), None),
    ("conv_transpose2d", lambda e, x: e.conv_transpose2d(x[:, :, :1, :1], _t(e, (2, 3, 1, 1)),
                                                         padding=1), None),
    ("conv_transpose1d", lambda e, x: e.conv_transpose1d(x[0], _t(e, (2, 3, 3)), stride=-1),
     None),
    ("conv_transpose1d", lambda e, x: e.conv_transpose1d(x[0], _t(e, (2, 3, 3)), stride=3,
                                                         output_padding=2), None),
    ("max_pool2d", lambda e, x: e.max_pool2d(x, 2, dilation=(1, -1000)), None),
    ("max_pool2d", lambda e, x: e.max_pool2d(x, 2, dilation=(1, -10**7)), None),
    ("max_pool2d", lambda e, x: e.max_pool2d(x, 2, padding=5), None),
    ("max_pool2d", lambda e, x: e.max_pool2d(x, 2, padding=1), None),
    ("max_pool2d", lambda e, x: e.max_pool2d(x, 3, padding=2), None),
    ("max_pool2d", lambda e, x: e.max_pool2d(x, 9), None),
    ("max_pool2d", lambda e, x: e.max_pool2d(x, 2, stride=0), None),
    ("max_pool2d", lambda e, x: e.max_pool2d(x, 3, stride=2, ceil_mode=True), None),
    ("avg_pool2d", lambda e, x: e.avg_pool2d(x, 2, stride=0), None),
    ("avg_pool2d", lambda e, x: e.avg_pool2d(x, 3, padding=2), None),
    ("avg_pool2d", lambda e, x: e.avg_pool2d(x, 9), None),
    ("avg_pool2d", lambda e, x: e.avg_pool2d(x, (2, 0)), None),
    ("avg_pool2d", lambda e, x: e.avg_pool2d(x, 3, padding=1, ceil_mode=True), None),
    ("adaptive_avg_pool2d", lambda e, x: e.adaptive_avg_pool2d(x, (-1, 3)), None),
    ("adaptive_avg_pool2d", lambda e, x: e.adaptive_avg_pool2d(x, (20, 3)), None),
    ("interpolate", lambda e, x: e.interpolate(x, size=(-3, 4)), None),
    ("interpolate", lambda e, x: e.interpolate(x, size=(0, 4)), None),
    ("interpolate", lambda e, x: e.interpolate(x, scale_factor=-1.0), None),
    ("interpolate", lambda e, x: e.interpolate(x, size=(3, 5)), None),
    ("pad", lambda e, x: e.pad(x, (-9, 0)), None),
    ("pad", lambda e, x: e.pad(x, (-9, 2)), None),
    ("pad", lambda e, x: e.pad(x, (-8, 0)), None),
    ("pad", lambda e, x: e.pad(x, (-3, 2, 1, -1)), None),
    ("unfold", lambda e, x: x.unfold(3, 2, 0), None),
    ("unfold", lambda e, x: x.unfold(3, 9, 1), None),
    ("unfold", lambda e, x: x.unfold(3, 3, 2), None),
    ("unfold", lambda e, x: e.unfold(x, 2, padding=-1), None),
    ("unfold", lambda e, x: e.unfold(x, 9), None),
    ("unfold", lambda e, x: e.unfold(x, 2, stride=0), None),
]


class _Ember:
    """ember's functional API spelled like torch's for the table above."""

    def __getattr__(self, name: str):
        if name == "pad":
            return ember.pad
        if name == "unfold":
            return ember.nn.functional.unfold
        return getattr(F, name)


def _t(e, shape):
    if isinstance(e, _Ember):
        return _DEVICE_TENSORS(shape)
    return torch.randn(shape)


_DEVICE = {"d": None}


def _DEVICE_TENSORS(shape):  # a per-test tensor factory
    return ember.randn(shape, device=_DEVICE["d"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_out_of_bounds_params_are_refused_where_torch_refuses(device, case):
    name, call, _ = CASES[case]
    d = _device(device)
    _DEVICE["d"] = d
    tx = torch.randn(X)
    try:
        want = tuple(call(TF, tx).shape)
    except RuntimeError:
        want = None
    x = ember.randn(X, device=d)
    if want is None:
        with pytest.raises((ShapeError, ValueError, RuntimeError)) as info:
            call(_Ember(), x).numpy()
        assert name in str(info.value), info.value
        assert not isinstance(info.value, (ZeroDivisionError, IndexError, AttributeError))
    else:
        assert tuple(call(_Ember(), x).shape) == want


G = (1, 3, 6, 6)


@pytest.mark.parametrize("device", ["cpu", "autodiff<cpu>", "opencl:0", "triton-interpret",
                                    "wgpu:0"])
@pytest.mark.parametrize("op, shapes, params", [
    # the reproductions of issue 41: stride (1, -1) and a negative padding read the heap
    (ops.composite.conv2d_weight_grad, [G, X, W],
     dict(stride=(1, -1), padding=(0, -3), dilation=(1, 1), groups=1)),
    (ops.composite.conv2d_weight_grad, [(1, 3, 6, 400), X, W],
     dict(stride=(1, -1), padding=(0, -300), dilation=(1, 1), groups=1)),
    (ops.composite.conv2d_weight_grad, [(1, 3, 9, 9), X, W],
     dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)),
    (ops.composite.max_pool2d_values, [X], dict(kernel_size=(2, 2), stride=(1, 1),
                                                padding=(0, 0), dilation=(1, -1000),
                                                ceil_mode=False)),
    (ops.composite.max_pool2d_values, [X], dict(kernel_size=(2, 2), stride=(1, 1),
                                                padding=(0, 0), dilation=(1, -10**7),
                                                ceil_mode=False)),
    (ops.composite.max_pool2d_backward, [(1, 2, 4, 4), (1, 2, 4, 4), X],
     dict(kernel_size=(2, 2), stride=(2, 2), padding=(3, 0), dilation=(1, 1),
          ceil_mode=False)),
    (ops.composite.max_pool2d_backward, [(1, 2, 9, 9), (1, 2, 9, 9), X],
     dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1),
          ceil_mode=False)),
    (ops.composite.fused_conv2d, [X, W], dict(stride=(1, 1), padding=(0, -2), dilation=(1, 1),
                                              groups=1, bias=False, norm=False,
                                              residual=False, relu=True, eps=1e-5)),
    (ops.composite.fused_conv2d, [X, W, (1, 3, 9, 9)],
     dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, bias=False, norm=False,
          residual=True, relu=True, eps=1e-5)),
    (ops.nn.max_pool2d, [X], dict(kernel_size=(2, 2), stride=(1, 1), padding=(0, 0),
                                  dilation=(1, -10**7), ceil_mode=False)),
    (ops.nn.avg_pool2d, [X], dict(kernel_size=(2, 2), stride=(0, 1), padding=(0, 0),
                                  ceil_mode=False, count_include_pad=True)),
    (ops.nn.adaptive_avg_pool2d, [X], dict(output_size=(-5, 2))),
    (ops.nn.interpolate, [X], dict(size=(-3, 4), mode="nearest", align_corners=False)),
    (ops.movement.pad, [X], dict(pad=((0, 0), (0, 0), (0, 0), (-9, 0)), value=0.0)),
])
def test_raw_ops_with_bad_params_never_reach_a_kernel(device, op, shapes, params):
    d = _device(device)
    args = [ember.randn(s, device=d) if i != 1 or op is not ops.composite.max_pool2d_backward
            else ember.zeros(s, dtype=ember.int64, device=d) for i, s in enumerate(shapes)]
    with pytest.raises(ShapeError, match=op.name):
        out = apply(op, *args, **params)
        (out[0] if isinstance(out, tuple) else out).numpy()


@pytest.mark.parametrize("op, shapes, params", [
    (ops.composite.conv2d_weight_grad, [G, X, W],
     dict(stride=(1, -1), padding=(0, -3), dilation=(1, 1), groups=1)),
    (ops.composite.max_pool2d_values, [X], dict(kernel_size=(2, 2), stride=(1, 1),
                                                padding=(0, 0), dilation=(1, -10**7),
                                                ceil_mode=False)),
    (ops.nn.conv2d, [X, W], dict(stride=(1, 0), padding=(0, 0), dilation=(1, 1), groups=1)),
    (ops.nn.max_pool2d, [X], dict(kernel_size=(2, 2), stride=(1, 1), padding=(0, 0),
                                  dilation=(1, -1000), ceil_mode=False)),
])
def test_cpu_kernel_table_guards_direct_calls(op, shapes, params):
    kernel = ember.device("cpu").backend.kernels[op]
    arrays = [np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in shapes]
    with pytest.raises(ShapeError, match=op.name):
        kernel(*arrays, **params)


def test_every_op_with_params_or_a_shape_of_its_own_has_a_rule():
    missing = [op.name for op in ops.registry.values()
               if (op.params or op.group != "elementwise") and op.shape_rule is None
               and op not in ops.DATA_DEPENDENT]
    assert missing == []
    assert all(ops.RULES[op] is op.shape_rule for op in ops.RULES)
    # dispatch calls the rule of every op but the elementwise ones
    assert ops.add.check is None and ops.conv2d.check is ops.conv2d.shape_rule


def test_numel_refuses_huge_shapes_in_linear_time():
    start = time.perf_counter()
    for shape in ([2] * 70_000, [1] * 65, [2**62, 4], [2**63]):
        with pytest.raises(ShapeError):
            ops.numel(shape)
    with pytest.raises(ShapeError, match="reshape"):
        ops.check_shapes(ops.reshape, [(4,)], {"shape": [1] * 70_000})
    with pytest.raises(ShapeError, match="full"):
        ops.check_shapes(ops.full, [], {"shape": [2**40] * 3, "value": 0.0,
                                        "dtype": ember.float32})
    assert time.perf_counter() - start < 0.5
    assert ops.numel([2**31, 2**31]) == 2**62


def test_messages_name_op_parameter_value_and_shapes():
    x = ember.randn(X)
    with pytest.raises(ShapeError) as info:
        F.conv2d(x, ember.randn(W), stride=(1, -1))
    message = str(info.value)
    assert "conv2d" in message and "stride" in message and "(1, -1)" in message
    assert "(1, 2, 8, 8)" in message and "(3, 2, 3, 3)" in message
