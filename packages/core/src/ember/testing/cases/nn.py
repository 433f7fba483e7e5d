# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""nn primitives through ember.functional: convolutions and their transposes, pooling,
embedding and interpolation, against the naive references of ``ember.testing._reference``."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember.functional as F
import ember.nn.functional as NF

from ... import _dtype as dt
from .. import _reference as ref
from .._case import Arg, rng_for, sample
from ._build import FLOATS, case


def pair(v: Any) -> tuple[int, int]:
    return v if isinstance(v, tuple) else (v, v)


def _tol(d: dt.DType) -> dict[str, Any]:
    return {"atol": 5e-2, "rtol": 2e-2} if d in (dt.float16, dt.bfloat16) else {}


def _args(cid: str, d: dt.DType, *shapes: tuple[int, ...], view: str = "") -> list[Arg]:
    rng = rng_for(cid)
    return [Arg(np.asarray(sample(s, d, rng)), view if i == 0 else "", (), d)
            for i, s in enumerate(shapes)]


#: name: (x shape, w shape, stride, padding, dilation, groups, bias, view)
_CONV2D: dict[str, tuple[Any, ...]] = {
    "basic": ((2, 3, 5, 5), (4, 3, 3, 3), 1, 0, 1, 1, False, ""),
    "bias-stride-padding": ((1, 2, 6, 5), (3, 2, 3, 2), (2, 1), (1, 2), 1, 1, True, ""),
    "dilation": ((1, 2, 7, 7), (2, 2, 3, 3), 1, 1, 2, 1, False, "permuted"),
    "groups": ((2, 4, 4, 4), (6, 2, 2, 2), 1, 0, 1, 2, True, ""),
    "depthwise": ((1, 3, 5, 4), (3, 1, 3, 3), 2, 1, 1, 3, False, "sliced"),
    "1x1": ((2, 3, 3, 3), (2, 3, 1, 1), 1, 0, 1, 1, True, ""),
}

for _d in FLOATS:
    for _v, (xs, ws, st, pa, di, gr, bias, view) in _CONV2D.items():
        cid = f"conv2d-{_v}-{_d.name}"
        shapes = [xs, ws] + ([(ws[0],)] if bias else [])

        def run(x: Any, w: Any, b: Any = None, st: Any = st, pa: Any = pa, di: Any = di,
                gr: int = gr) -> Any:
            return F.conv2d(x, w, b, stride=st, padding=pa, dilation=di, groups=gr)

        def orc(x: Any, w: Any, b: Any = None, st: Any = st, pa: Any = pa, di: Any = di,
                gr: int = gr) -> Any:
            out = ref.conv2d(x, w, pair(st), pair(pa), pair(di), gr)
            return out + b.reshape(-1, 1, 1) if b is not None else out

        case(cid, "nn", run, orc, _args(cid, _d, *shapes, view=view), _d, **_tol(_d))

    for _v, (xs, ws, st, pa, di, gr, bias) in {
        "basic": ((2, 3, 7), (4, 3, 3), 1, 0, 1, 1, False),
        "bias-stride-padding-dilation": ((1, 2, 9), (3, 2, 3), 2, 2, 2, 1, True),
        "groups": ((1, 4, 6), (4, 2, 2), 1, 1, 1, 2, False),
    }.items():
        cid = f"conv1d-{_v}-{_d.name}"
        shapes = [xs, ws] + ([(ws[0],)] if bias else [])

        def run1(x: Any, w: Any, b: Any = None, st: int = st, pa: int = pa, di: int = di,
                 gr: int = gr) -> Any:
            return F.conv1d(x, w, b, stride=st, padding=pa, dilation=di, groups=gr)

        def orc1(x: Any, w: Any, b: Any = None, st: int = st, pa: int = pa, di: int = di,
                 gr: int = gr) -> Any:
            out = ref.conv2d(x[:, :, None], w[:, :, None], (1, st), (0, pa), (1, di), gr)[:, :, 0]
            return out + b.reshape(-1, 1) if b is not None else out

        case(cid, "nn", run1, orc1, _args(cid, _d, *shapes), _d, **_tol(_d))

    for _v, (xs, ws, st, pa, op, di, gr, bias) in {
        "basic": ((2, 3, 3, 3), (3, 2, 3, 3), 1, 0, 0, 1, 1, False),
        "stride-padding-output_padding": ((1, 2, 3, 4), (2, 3, 3, 2), 2, 1, 1, 1, 1, True),
        "dilation-groups": ((1, 4, 3, 3), (4, 1, 2, 2), 1, 0, 0, 2, 2, False),
    }.items():
        cid = f"conv_transpose2d-{_v}-{_d.name}"
        shapes = [xs, ws] + ([(ws[1] * gr,)] if bias else [])

        def run2(x: Any, w: Any, b: Any = None, st: int = st, pa: int = pa, op: int = op,
                 di: int = di, gr: int = gr) -> Any:
            return F.conv_transpose2d(x, w, b, stride=st, padding=pa, output_padding=op,
                                      groups=gr, dilation=di)

        def orc2(x: Any, w: Any, b: Any = None, st: int = st, pa: int = pa, op: int = op,
                 di: int = di, gr: int = gr) -> Any:
            out = ref.conv_transpose2d(x, w, (st, st), (pa, pa), (op, op), (di, di), gr)
            return out + b.reshape(-1, 1, 1) if b is not None else out

        case(cid, "nn", run2, orc2, _args(cid, _d, *shapes), _d, **_tol(_d))

    for _v, (xs, ws, st, pa, op, gr, bias) in {
        "basic": ((2, 3, 4), (3, 2, 3), 1, 0, 0, 1, True),
        "stride-padding-output_padding": ((1, 2, 5), (2, 2, 3), 3, 1, 2, 1, False),
        "groups": ((1, 4, 3), (4, 1, 2), 2, 0, 0, 2, False),
    }.items():
        cid = f"conv_transpose1d-{_v}-{_d.name}"
        shapes = [xs, ws] + ([(ws[1] * gr,)] if bias else [])

        def run3(x: Any, w: Any, b: Any = None, st: int = st, pa: int = pa, op: int = op,
                 gr: int = gr) -> Any:
            return F.conv_transpose1d(x, w, b, stride=st, padding=pa, output_padding=op,
                                      groups=gr)

        def orc3(x: Any, w: Any, b: Any = None, st: int = st, pa: int = pa, op: int = op,
                 gr: int = gr) -> Any:
            out = ref.conv_transpose2d(x[:, :, None], w[:, :, None], (1, st), (0, pa), (0, op),
                                       (1, 1), gr)[:, :, 0]
            return out + b.reshape(-1, 1) if b is not None else out

        case(cid, "nn", run3, orc3, _args(cid, _d, *shapes), _d, **_tol(_d))

# -- pooling ----------------------------------------------------------------------

_POOL_DTYPES = FLOATS
for _d in _POOL_DTYPES:
    for _v, (xs, k, st, pa, di, ceil, view) in {
        "basic": ((2, 2, 4, 4), 2, None, 0, 1, False, ""),
        "stride-padding": ((1, 3, 5, 6), 3, 2, 1, 1, False, "permuted"),
        "dilation": ((1, 1, 7, 7), 2, 1, 0, 2, False, ""),
        "ceil_mode": ((1, 2, 5, 5), 2, 2, 0, 1, True, "sliced"),
        "rect": ((1, 1, 4, 6), (2, 3), (1, 2), (1, 0), 1, False, ""),
    }.items():
        cid = f"max_pool2d-{_v}-{_d.name}"
        x = Arg(np.asarray(sample(xs, _d, rng_for(cid), "distinct")), view, (), _d)

        def runp(t: Any, k: Any = k, st: Any = st, pa: Any = pa, di: Any = di,
                 ceil: bool = ceil) -> Any:
            return F.max_pool2d(t, k, st, pa, di, ceil_mode=ceil, return_indices=True)

        def orcp(v: Any, k: Any = k, st: Any = st, pa: Any = pa, di: Any = di,
                 ceil: bool = ceil) -> Any:
            return ref.max_pool2d(v, pair(k), pair(st if st is not None else k), pair(pa),
                                  pair(di), ceil)

        case(cid, "nn", runp, orcp, [x], (_d, dt.int64))
    for _v, (xs, k, st, pa, ceil, cip) in {
        "basic": ((2, 2, 4, 4), 2, None, 0, False, True),
        "padding-include": ((1, 2, 5, 5), 3, 2, 1, False, True),
        "padding-exclude": ((1, 2, 5, 5), 3, 2, 1, False, False),
        "ceil_mode": ((1, 1, 5, 6), 2, 2, 0, True, True),
        "ceil_mode-padding-exclude": ((1, 1, 6, 5), 3, 2, 1, True, False),
    }.items():
        cid = f"avg_pool2d-{_v}-{_d.name}"
        x = Arg(np.asarray(sample(xs, _d, rng_for(cid))), "", (), _d)

        def runa(t: Any, k: int = k, st: Any = st, pa: int = pa, ceil: bool = ceil,
                 cip: bool = cip) -> Any:
            return F.avg_pool2d(t, k, st, pa, ceil_mode=ceil, count_include_pad=cip)

        def orca(v: Any, k: int = k, st: Any = st, pa: int = pa, ceil: bool = ceil,
                 cip: bool = cip) -> Any:
            s = st if st is not None else k
            return ref.avg_pool2d(v, (k, k), (s, s), (pa, pa), ceil, cip)

        case(cid, "nn", runa, orca, [x], _d, **_tol(_d))
    for _v, (xs, os) in {"divisible": ((1, 2, 4, 6), (2, 3)), "uneven": ((2, 1, 5, 7), (3, 4)),
                         "global": ((1, 3, 3, 3), 1), "upsample": ((1, 1, 2, 3), (3, 4))}.items():
        cid = f"adaptive_avg_pool2d-{_v}-{_d.name}"
        x = Arg(np.asarray(sample(xs, _d, rng_for(cid))), "", (), _d)
        size = os if isinstance(os, tuple) else (os, os)
        case(cid, "nn", lambda t, os=os: F.adaptive_avg_pool2d(t, os),
             lambda v, s=size: ref.adaptive_avg_pool2d(v, s), [x], _d, **_tol(_d))
    for _v, (xs, size, mode, ac) in {
        "nearest-up": ((1, 2, 3, 4), (6, 8), "nearest", None),
        "nearest-down": ((1, 1, 6, 5), (3, 2), "nearest", None),
        "nearest-1d": ((2, 2, 5), (7,), "nearest", None),
        "linear": ((1, 2, 4), (7,), "linear", False),
        "linear-align_corners": ((1, 2, 4), (7,), "linear", True),
        "bilinear": ((1, 2, 3, 4), (5, 3), "bilinear", False),
        "bilinear-align_corners": ((2, 1, 3, 3), (4, 6), "bilinear", True),
    }.items():
        cid = f"interpolate-{_v}-{_d.name}"
        x = Arg(np.asarray(sample(xs, _d, rng_for(cid))), "", (), _d)
        case(cid, "nn", lambda t, s=size, m=mode, a=ac: F.interpolate(t, s, mode=m,
                                                                      align_corners=a),
             lambda v, s=size, m=mode, a=ac: ref.interpolate(v, s, m, bool(a)), [x], _d,
             **_tol(_d))
    cid = f"interpolate-scale_factor-{_d.name}"
    x = Arg(np.asarray(sample((1, 1, 3, 2), _d, rng_for(cid))), "", (), _d)
    case(cid, "nn", lambda t: F.interpolate(t, scale_factor=2, mode="nearest"),
         lambda v: ref.interpolate(v, (6, 4), "nearest", False), [x], _d)

for _d in dt.ALL_DTYPES:
    for _idt in (dt.int64, dt.int32):
        cid = f"embedding-{_idt.name}-index-{_d.name}"
        rng = rng_for(cid)
        w = Arg(np.asarray(sample((5, 3), _d, rng)), "", (), _d)
        idx = Arg(np.array([[0, 4, 4], [2, 1, 0]]).astype(_idt.numpy_name), "", (), _idt)
        case(cid, "nn", lambda i, w: F.embedding(i, w), lambda i, w: w[i], [idx, w], _d,
             grad=(1,) if _d.kind == "f" else ())


# -- attention ------------------------------------------------------------------------------------

def _sdpa_ref(q: Any, k: Any, v: Any, m: Any = None, causal: bool = False,
              scale: Any = None) -> Any:
    s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    if m is not None:
        s = np.where(m, s, -np.inf) if m.dtype == bool else s + m
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


for _d in FLOATS:
    for _v, (qs, src, mask, causal, scale, view) in {
        "basic": ((2, 3, 4), 5, None, False, None, ""),
        "causal-heads": ((2, 2, 4, 3), 4, None, True, None, "permuted"),
        "causal-longer-source": ((1, 3, 4), 5, None, True, 0.5, ""),
        "bool-mask": ((2, 4, 3), 4, "bool", False, None, ""),
        "additive-mask-heads": ((1, 2, 3, 4), 3, "additive", False, 0.3, ""),
    }.items():
        cid = f"scaled_dot_product_attention-{_v}-{_d.name}"
        rng = rng_for(cid)
        ks, vs = (*qs[:-2], src, qs[-1]), (*qs[:-2], src, qs[-1] + 1)
        args = [Arg(np.asarray(sample(s, _d, rng)), view if i == 0 else "", (), _d)
                for i, s in enumerate((qs, ks, vs))]
        if mask == "bool":
            keep = rng.random((qs[-2], src)) < 0.6
            keep[:, 0] = True  # no row without a key to attend to
            args.append(Arg(keep, "", (), dt.bool_))
        elif mask == "additive":
            args.append(Arg(np.asarray(sample((qs[-3], 1, src), _d, rng)), "", (), _d))
        case(cid, "nn",
             lambda q, k, v, m=None, c=causal, s=scale: NF.scaled_dot_product_attention(
                 q, k, v, m, is_causal=c, scale=s),
             lambda q, k, v, m=None, c=causal, s=scale: _sdpa_ref(q, k, v, m, c, s), args, _d,
             grad=(0, 1, 2), **_tol(_d))


# -- recurrent layers ---------------------------------------------------------------------------

def _sig(x: Any) -> Any:
    return 1 / (1 + np.exp(-x))


def _rnn_ref(kind: str, x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any = 0.0,
             b_hh: Any = 0.0) -> Any:
    ys = []
    for xt in x:
        if kind == "lstm":
            i, f, g, o = np.split(xt @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, -1)
            c = _sig(f) * c + _sig(i) * np.tanh(g)
            h = _sig(o) * np.tanh(c)
        else:
            xr, xz, xn = np.split(xt @ w_ih.T + b_ih, 3, -1)
            hr, hz, hn = np.split(h @ w_hh.T + b_hh, 3, -1)
            r, z = _sig(xr + hr), _sig(xz + hz)
            h = (1 - z) * np.tanh(xn + r * hn) + z * h
        ys.append(h)
    return np.stack(ys)


def _rnn_run(kind: str, x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, *b: Any) -> Any:
    """One ``nn.LSTM`` / ``nn.GRU`` layer with the given weights, on ``x``'s device."""
    from ... import nn

    cls = nn.LSTM if kind == "lstm" else nn.GRU
    m = cls(x.shape[-1], h.shape[-1], bias=bool(b), device=x.device, dtype=x.dtype)
    for name, t in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"),
                       (w_ih, w_hh, *b), strict=False):
        setattr(m, name, nn.Parameter(t))
    if kind == "lstm":
        return m(x, (h.unsqueeze(0), c.unsqueeze(0)))[0]
    return m(x, h.unsqueeze(0))[0]


for _d in FLOATS:
    for _kind, _gates in (("lstm", 4), ("gru", 3)):
        for _v, bias in (("bias", True), ("no-bias", False)):
            cid = f"{_kind}-layer-{_v}-{_d.name}"
            shapes = [(3, 2, 2), (2, 3), (2, 3), (_gates * 3, 2), (_gates * 3, 3)]
            shapes += [(_gates * 3,), (_gates * 3,)] if bias else []
            if _kind == "gru":  # no cell state
                del shapes[2]
                case(cid, "nn", lambda x, h, *w: _rnn_run("gru", x, h, None, *w),
                     lambda x, h, *w: _rnn_ref("gru", x, h, None, *w),
                     _args(cid, _d, *shapes), _d, **_tol(_d))
            else:
                case(cid, "nn", lambda *a: _rnn_run("lstm", *a),
                     lambda *a: _rnn_ref("lstm", *a), _args(cid, _d, *shapes), _d, **_tol(_d))


# -- pooling built on max_pool2d and gathers ----------------------------------------------------

def _adaptive_max_ref(x: Any, oh: int, ow: int) -> tuple[Any, Any]:
    n, c, h, w = x.shape
    values, indices = np.zeros((n, c, oh, ow)), np.zeros((n, c, oh, ow), dtype=np.int64)
    for a in range(oh):
        for b in range(ow):
            r0, r1 = (a * h) // oh, -(-((a + 1) * h) // oh)
            q0, q1 = (b * w) // ow, -(-((b + 1) * w) // ow)
            win = x[:, :, r0:r1, q0:q1].reshape(n, c, -1)
            j = win.argmax(-1)  # the first maximum in row-major order
            values[:, :, a, b] = np.take_along_axis(win, j[..., None], -1)[..., 0]
            indices[:, :, a, b] = (r0 + j // (q1 - q0)) * w + q0 + j % (q1 - q0)
    return values, indices


for _d in FLOATS:
    cid = f"max_pool1d-stride-padding-dilation-{_d.name}"
    x = Arg(np.asarray(sample((2, 3, 11), _d, rng_for(cid), "distinct")), "", (), _d)
    case(cid, "nn", lambda t: NF.max_pool1d(t, 3, 2, 1, 2, return_indices=True),
         lambda v: tuple(o[:, :, 0] for o in ref.max_pool2d(v[:, :, None], (1, 3), (1, 2),
                                                             (0, 1), (1, 2), False)),
         [x], (_d, dt.int64))
    cid = f"adaptive_max_pool2d-uneven-{_d.name}"
    x = Arg(np.asarray(sample((2, 2, 5, 7), _d, rng_for(cid), "distinct")), "permuted", (), _d)
    case(cid, "nn", lambda t: NF.adaptive_max_pool2d(t, (3, 4), return_indices=True),
         lambda v: _adaptive_max_ref(v, 3, 4), [x], (_d, dt.int64))
