"""Convolution and pooling of any spatial rank as composites of ember ops (3-D and up, and
the cases ember's 1-D/2-D kernels do not take: dilated AveragePool, LpPool).

Each window op is written over the kernel's *taps*: for kernel offset ``k`` the strided slice
``x[..., k*d : k*d + (out-1)*s + 1 : s]`` holds, for every output position, the input cell
that tap reads.  A convolution stacks the taps after the channel axis (im2col) and multiplies
by the filters reshaped to ``[groups, O/groups, C/groups * taps]``: one batched matmul, in the
input's dtype (int32 for ConvInteger/QLinearConv, exact).  Pooling reduces over the stacked
taps.  Everything is ember slicing, stacking, matmul and reductions, so gradients flow under
``autodiff<...>`` and every device runs it.  The 1-D and 2-D cases ember's kernels support
keep running on those kernels (`_nn`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import ember as E
from ember import Tensor

from . import _nn
from ._registry import OPS, Node, Run, op

__all__ = ["conv_nd", "conv_transpose_nd"]


def _out_sizes(shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
               dil: Sequence[int], where: str) -> list[int]:
    out = []
    for size, k, s, d in zip(shape, kernel, strides, dil, strict=True):
        eff = (k - 1) * d + 1
        if size < eff:
            raise ValueError(f"{where}: the (padded) input length {size} is shorter than the "
                             f"dilated kernel {eff}")
        out.append((size - eff) // s + 1)
    return out


def _taps(t: Tensor, kernel: Sequence[int], strides: Sequence[int], dil: Sequence[int],
          out: Sequence[int]) -> list[Tensor]:
    """One strided slice of the (already padded) ``t`` [N, C, *S] per kernel offset."""
    res = []
    for k in itertools.product(*(range(n) for n in kernel)):
        idx: list[Any] = [slice(None), slice(None)]
        for ki, s, d, o in zip(k, strides, dil, out, strict=True):
            idx.append(slice(ki * d, ki * d + (o - 1) * s + 1, s))
        res.append(t[tuple(idx)])
    return res


def conv_nd(t: Tensor, w: Tensor, bias: Tensor | None, strides: Sequence[int],
            dil: Sequence[int], begin: Sequence[int], end: Sequence[int], groups: int,
            where: str) -> Tensor:
    """N-D convolution (ONNX Conv) of ``t`` [N, C, *S] by ``w`` [O, C/groups, *K]."""
    n = t.ndim - 2
    if w.ndim != t.ndim:
        raise ValueError(f"{where}: weight of rank {w.ndim} for an input of rank {t.ndim}")
    nb, c = t.shape[0], t.shape[1]
    o, cg = w.shape[0], w.shape[1]
    if c % groups or o % groups or cg * groups != c:
        raise ValueError(f"{where}: {c} input channels, {o} filters of {cg} channels do not "
                         f"fit group={groups}")
    kernel = list(w.shape[2:])
    if any(begin) or any(end):
        t = _nn._pad_explicit(t, begin, end)
    out = _out_sizes(t.shape[2:], kernel, strides, dil, where)
    taps = math.prod(kernel)
    cols = E.stack(_taps(t, kernel, strides, dil, out), dim=2)  # [N, C, T, *out]
    cols = cols.reshape(nb, groups, cg * taps, math.prod(out))
    wg = w.reshape(groups, o // groups, cg * taps)
    y = E.matmul(wg, cols).reshape(nb, o, *out)
    if bias is not None:
        y = y + bias.reshape((o,) + (1,) * n)
    return y


def _dilate(t: Tensor, strides: Sequence[int]) -> Tensor:
    """``s - 1`` zeros between neighbouring cells along each spatial axis."""
    for i, s in enumerate(strides):
        if s == 1:
            continue
        a = 2 + i
        length = t.shape[a]
        u = t.unsqueeze(a + 1)
        zshape = list(u.shape)
        zshape[a + 1] = s - 1
        u = E.cat([u, E.zeros(tuple(zshape), dtype=t.dtype, device=t.device)], dim=a + 1)
        shape = list(t.shape)
        shape[a] = length * s
        t = u.reshape(*shape)
        t = E.narrow(t, a, 0, (length - 1) * s + 1)
    return t


def conv_transpose_nd(r: Run, node: Node, t: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    """N-D ConvTranspose: the zero-dilated input convolved with the flipped filters."""
    n = t.ndim - 2
    at = node.attrs
    kernel = list(at.get("kernel_shape", w.shape[2:]))
    strides = list(at.get("strides", [1] * n))
    dil = list(at.get("dilations", [1] * n))
    outpad = list(at.get("output_padding", [0] * n))
    group = int(at.get("group", 1))
    full = [(t.shape[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(n)]
    auto = at.get("auto_pad", "NOTSET")
    if "output_shape" in at or auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = list(at["output_shape"])[-n:] if "output_shape" in at else \
            [t.shape[2 + i] * strides[i] for i in range(n)]
        total = [full[i] + outpad[i] - shape[i] for i in range(n)]
        begin = [tt // 2 for tt in total] if auto == "SAME_UPPER" else \
            [tt - tt // 2 for tt in total]
        end = [tt - bb for tt, bb in zip(total, begin, strict=True)]
    elif auto == "VALID":
        begin, end = [0] * n, [0] * n
    else:
        pads = list(at.get("pads", [0] * (2 * n)))
        begin, end = pads[:n], pads[n:]
    c = t.shape[1]
    if w.shape[0] != c or c % group:
        raise ValueError(f"{node.where()}: weight {tuple(w.shape)} for {c} input channels "
                         f"and group={group}")
    og = w.shape[1]
    # [C, O/g, *K] -> [O, C/g, *K], each filter flipped
    wc = w.reshape(group, c // group, og, *kernel).permute(0, 2, 1, *range(3, 3 + n))
    wc = E.flip(wc.reshape(group * og, c // group, *kernel), tuple(range(2, 2 + n)))
    x = _dilate(t, strides)
    edge = [(k - 1) * d for k, d in zip(kernel, dil, strict=True)]
    y = conv_nd(x, wc, None, [1] * n, dil, edge, edge, group, node.where())
    y = _nn._pad_explicit(y, [-p for p in begin],
                          [op_ - p for p, op_ in zip(end, outpad, strict=True)])
    if bias is not None:
        y = y + bias.reshape((bias.shape[0],) + (1,) * n)
    return y


# -- pooling ------------------------------------------------------------------------------------

def _pool_setup(node: Node, t: Tensor) -> tuple[list[int], list[int], list[int], list[int],
                                                list[int], list[int]]:
    """kernel, strides, dilations, begin and end pads, and the ceil_mode overhang."""
    kernel, strides, dil, begin, end = _nn._pool_geometry(node, t)
    n = len(kernel)
    extra = [0] * n
    if node.attrs.get("ceil_mode", 0):
        extra = _nn._ceil_extra(node, t, kernel, strides, dil, begin, end)
    return kernel, strides, dil, begin, end, extra


def _window_sum(t: Tensor, kernel: Sequence[int], strides: Sequence[int],
                dil: Sequence[int], where: str) -> Tensor:
    out = _out_sizes(t.shape[2:], kernel, strides, dil, where)
    return E.sum(E.stack(_taps(t, kernel, strides, dil, out), dim=0), dim=0)


def _counts(t: Tensor, kernel: Sequence[int], strides: Sequence[int], dil: Sequence[int],
            begin: Sequence[int], end: Sequence[int], extra: Sequence[int],
            include: bool) -> np.ndarray:
    """How many cells of each window count (host numpy): padding counts when ``include``,
    the ceil_mode overhang never does."""
    spatial = tuple(t.shape[2:])
    mask = np.ones(spatial, np.float64)
    if include:
        mask = np.pad(mask, list(zip(begin, end, strict=True)), constant_values=1.0)
        mask = np.pad(mask, [(0, x) for x in extra])
    else:
        mask = np.pad(mask, [(b, e + x) for b, e, x in zip(begin, end, extra, strict=True)])
    out = [(s - ((k - 1) * d + 1)) // st + 1
           for s, k, d, st in zip(mask.shape, kernel, dil, strides, strict=True)]
    total = np.zeros(out)
    for k in itertools.product(*(range(n) for n in kernel)):
        idx = tuple(slice(ki * d, ki * d + (o - 1) * st + 1, st)
                    for ki, d, o, st in zip(k, dil, out, strides, strict=True))
        total += mask[idx]
    return total


def _average_pool_nd(r: Run, node: Node, t: Tensor) -> Tensor:
    kernel, strides, dil, begin, end, extra = _pool_setup(node, t)
    include = bool(node.attrs.get("count_include_pad", 0))
    padded = _nn._pad_explicit(t, begin, [e + x for e, x in zip(end, extra, strict=True)])
    sums = _window_sum(padded, kernel, strides, dil, node.where())
    counts = _counts(t, kernel, strides, dil, begin, end, extra, include)
    return sums / r.tensor(counts.astype(np.dtype(t.dtype.numpy_name)))


def _max_pool_nd(r: Run, node: Node, t: Tensor) -> Tensor:
    kernel, strides, dil, begin, end, extra = _pool_setup(node, t)
    ends = [e + x for e, x in zip(end, extra, strict=True)]
    if any(begin) or any(ends):
        low = -math.inf if t.dtype.is_floating_point else int(np.iinfo(t.dtype.numpy_name).min)
        t = _nn._pad_explicit(t, begin, ends, value=low)
    out = _out_sizes(t.shape[2:], kernel, strides, dil, node.where())
    return E.amax(E.stack(_taps(t, kernel, strides, dil, out), dim=0), dim=0)


@op("LpPool", note="any spatial rank; p, pads, auto_pad, strides, dilations, ceil_mode")
def lp_pool(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    if t.ndim < 3:
        raise ValueError(f"{node.where()}: input of rank {t.ndim}; LpPool takes [N, C, ...]")
    p = int(node.attrs.get("p", 2))
    kernel, strides, dil, begin, end, extra = _pool_setup(node, t)
    a = E.abs(t)
    powered = a * a if p == 2 else (a if p == 1 else E.pow(a, float(p)))
    padded = _nn._pad_explicit(powered, begin, [e + x for e, x in zip(end, extra,
                                                                        strict=True)])
    s = _window_sum(padded, kernel, strides, dil, node.where())
    if p == 1:
        return s
    return E.sqrt(s) if p == 2 else E.pow(s, 1.0 / p)


# -- dispatch: ember's 1-D/2-D kernels where they apply, the composites otherwise -----------

_CONV = OPS["Conv"]
_CONV_T = OPS["ConvTranspose"]
_MAX = OPS["MaxPool"]
_AVG = OPS["AveragePool"]


@op("Conv", note="any spatial rank (3-D and up as im2col + matmul); every auto_pad")
def conv(r: Run, node: Node, x: Any, w: Any, b: Any = None) -> Tensor:
    t, wt = r.tensor(x), r.tensor(w)
    if t.ndim - 2 in (1, 2):
        return _CONV.device(r, node, x, w, b)  # type: ignore[no-any-return]
    if t.ndim < 3:
        raise ValueError(f"{node.where()}: input of rank {t.ndim}; Conv takes [N, C, ...]")
    kernel = list(node.attrs.get("kernel_shape", wt.shape[2:]))
    strides, dil, begin, end = _nn._spatial(node, t, kernel)
    return conv_nd(t, wt, r.tensor(b) if b is not None else None, strides, dil, begin, end,
                   int(node.attrs.get("group", 1)), node.where())


@op("ConvTranspose", note="any spatial rank (3-D and up as a composite); pads, "
    "output_padding, output_shape")
def conv_transpose(r: Run, node: Node, x: Any, w: Any, b: Any = None) -> Tensor:
    t = r.tensor(x)
    if t.ndim - 2 in (1, 2):
        return _CONV_T.device(r, node, x, w, b)  # type: ignore[no-any-return]
    if t.ndim < 3:
        raise ValueError(f"{node.where()}: input of rank {t.ndim}; ConvTranspose takes "
                         "[N, C, ...]")
    return conv_transpose_nd(r, node, t, r.tensor(w), r.tensor(b) if b is not None else None)


@op("MaxPool", note="any spatial rank (3-D and up as a composite), ceil_mode, dilations; "
    "no Indices output")
def max_pool(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    if t.ndim - 2 in (1, 2) or len([o for o in node.outputs if o]) > 1:
        return _MAX.device(r, node, x)  # type: ignore[no-any-return]
    if t.ndim < 3:
        raise ValueError(f"{node.where()}: input of rank {t.ndim}; MaxPool takes [N, C, ...]")
    return _max_pool_nd(r, node, t)


@op("AveragePool", note="any spatial rank, ceil_mode, count_include_pad, dilations "
    "(3-D and up, and dilated windows, as a composite)")
def average_pool(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    dilated = any(d != 1 for d in node.attrs.get("dilations", []))
    if t.ndim - 2 in (1, 2) and not dilated:
        return _AVG.device(r, node, x)  # type: ignore[no-any-return]
    if t.ndim < 3:
        raise ValueError(f"{node.where()}: input of rank {t.ndim}; AveragePool takes "
                         "[N, C, ...]")
    return _average_pool_nd(r, node, t)


@op("GlobalLpPool", note="p-norm over every spatial axis")
def global_lp_pool(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    if t.ndim < 3:
        raise ValueError(f"{node.where()}: input of rank {t.ndim}; GlobalLpPool takes "
                         "[N, C, ...]")
    p = int(node.attrs.get("p", 2))
    a = E.abs(t)
    s = E.sum(a * a if p == 2 else E.pow(a, float(p)), dim=tuple(range(2, t.ndim)),
              keepdim=True)
    return E.sqrt(s) if p == 2 else (s if p == 1 else E.pow(s, 1.0 / p))
