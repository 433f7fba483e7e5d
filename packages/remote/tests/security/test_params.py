"""Out-of-bounds op parameters sent to the Remote server (raw records and the ``remote<...>``
device) are refused by the op's rule, naming the op, before any kernel runs: the server stays
up and a well-behaved client still gets exact results (issue 41)."""

from __future__ import annotations

import ember
import ember.functional as F
import numpy as np
import pytest
from rawclient import ask, open_raw

X, W, G = (1, 2, 8, 8), (3, 2, 3, 3), (1, 3, 6, 6)
_POOL = dict(kernel_size=(2, 2), stride=(1, 1), padding=(0, 0), dilation=(1, 1),
             ceil_mode=False)
_CONV = dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)
_CONVT = dict(_CONV, output_padding=(0, 0))

# (op, input shapes (int64 where the name says so), params)
RECORDS = [
    ("conv2d", [X, W], dict(_CONV, stride=(1, -1))),
    ("conv2d", [X, W], dict(_CONV, dilation=(0, 1))),
    ("conv2d", [X, (3, 2, 9, 9)], _CONV),
    ("conv1d", [X[1:], W[:3]], dict(stride=(-1,), padding=(0,), dilation=(1,), groups=1)),
    ("conv_transpose2d", [X, (2, 3, 3, 3)], dict(_CONVT, stride=(0, 1))),
    ("conv_transpose2d", [X, (2, 3, 3, 3)], dict(_CONVT, stride=(2, 2),
                                                  output_padding=(2, 0))),
    ("conv_transpose1d", [X[1:], (2, 3, 3)], dict(stride=(1,), padding=(-4,),
                                                  output_padding=(0,), dilation=(1,),
                                                  groups=1)),
    ("max_pool2d", [X], dict(_POOL, dilation=(1, -1000))),
    ("max_pool2d", [X], dict(_POOL, padding=(5, 5))),
    ("avg_pool2d", [X], dict(kernel_size=(2, 2), stride=(0, 0), padding=(0, 0),
                             ceil_mode=False, count_include_pad=True)),
    ("adaptive_avg_pool2d", [X], dict(output_size=(-1, 3))),
    ("max_pool2d_values", [X], dict(_POOL, dilation=(1, -1000))),
    ("max_pool2d_values", [X], dict(_POOL, dilation=(1, -10**7))),
    ("max_pool2d_backward", [(1, 2, 4, 4), (1, 2, 4, 4), X], dict(_POOL, stride=(2, 2),
                                                                  padding=(3, 0))),
    ("conv2d_weight_grad", [G, X, W], dict(_CONV, stride=(1, -1), padding=(0, -3))),
    ("conv2d_weight_grad", [(1, 3, 6, 400), X, W], dict(_CONV, stride=(1, -1),
                                                        padding=(0, -300))),
    ("fused_conv2d", [X, W], dict(_CONV, padding=(0, -2), bias=False, norm=False,
                                  residual=False, relu=True, eps=1e-5)),
    ("interpolate", [X], dict(size=(-3, 4), mode="nearest", align_corners=False)),
    ("pad", [X], dict(pad=((0, 0), (0, 0), (0, 0), (-9, 0)), value=0.0)),
    ("reshape", [X], dict(shape=[1] * 70_000)),
    ("full", [], dict(shape=[2**40] * 3, value=0.0, dtype=ember.float32)),
]


@pytest.fixture
def good(server):
    """The well-behaved client: exact results after the hostile one."""
    d = ember.device(server.device(timeout=20))
    a = np.arange(12, dtype=np.float32).reshape(3, 4)

    def check() -> None:
        assert server.proc.poll() is None  # the server is alive
        got = (ember.tensor(a, device=d) * 2 + 1).sum(dim=0).numpy()
        np.testing.assert_array_equal(got, (a * 2 + 1).sum(axis=0))

    check()
    return check


@pytest.mark.parametrize("name, shapes, params", RECORDS,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(RECORDS)])
def test_raw_records_with_bad_params_are_refused_by_the_rule(server, remote_token, good, name,
                                                             shapes, params):
    ws, hello = open_raw(server.port, remote_token)
    assert hello[0] == "hello"
    puts = []
    for i, s in enumerate(shapes, 1):
        index = name == "max_pool2d_backward" and i == 2
        arr = np.zeros(s, np.int64) if index else np.ones(s, np.float32)
        puts.append(["put", i, "int64" if index else "float32", s, arr.tobytes()])
    out = 100
    outs = (out, out + 1) if name == "max_pool2d" else (out,)
    reply = ask(ws, *puts, ["op", name, tuple(range(1, len(shapes) + 1)), params, outs],
                ["sync"])
    # the sizes of a shape param may be refused by the protocol's own limits first
    allowed = ("ShapeError", "ProtocolError") if name in ("reshape", "full") else ("ShapeError",)
    assert reply[0] == "error" and reply[1] in allowed, reply
    assert name in reply[2], reply
    ws.close()
    good()


@pytest.mark.parametrize("call", [
    lambda x, d: F.conv2d(x, ember.randn(W, device=d), stride=(1, -1)),
    lambda x, d: F.conv_transpose2d(x, ember.randn((2, 3, 3, 3), device=d), stride=0),
    lambda x, d: F.max_pool2d(x, 2, dilation=(1, -1000)),
    lambda x, d: F.max_pool2d(x, 2, padding=5),
    lambda x, d: F.avg_pool2d(x, 2, stride=0),
    lambda x, d: F.adaptive_avg_pool2d(x, (-1, 2)),
    lambda x, d: F.interpolate(x, size=(-3, 4)),
    lambda x, d: ember.pad(x, (-9, 0)),
    lambda x, d: x.unfold(3, 2, 0),
    lambda x, d: ember.nn.functional.unfold(x, 9),
])
def test_remote_device_refuses_bad_params_at_the_call(server, good, call):
    d = ember.device(server.device(timeout=20))
    x = ember.randn(X, device=d)
    with pytest.raises((ValueError, RuntimeError)) as info:
        call(x, d).numpy()
    assert "ShapeError" in type(info.value).__name__ or "must" in str(info.value) \
        or "size" in str(info.value)
    good()
