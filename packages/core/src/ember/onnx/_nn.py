"""Neural-network operators: MatMul, Gemm, Conv, ConvTranspose, pooling, normalization
(Resize is in `_resize`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import ember as E
from ember import Tensor
from ember.nn import functional as F

from ._dtypes import ember_dtype
from ._registry import Node, Run, op

M = R = E  # ember's tensor functions, by family: movement, reductions


@op("MatMul")
def matmul(r: Run, node: Node, a: Any, b: Any) -> Tensor:
    return E.matmul(r.tensor(a), r.tensor(b))


@op("Gemm")
def gemm(r: Run, node: Node, a: Any, b: Any, c: Any = None) -> Tensor:
    at = node.attrs
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    ta, tb = r.tensor(a), r.tensor(b)
    if at.get("transA", 0):
        ta = ta.permute(1, 0)
    if at.get("transB", 0) and alpha == 1.0 and (c is None or beta == 1.0):
        tc = r.tensor(c) if c is not None else None
        if tc is None or (tc.ndim == 1 and tc.shape[0] == tb.shape[0]):
            return F.linear(ta, tb, tc)
    if at.get("transB", 0):
        tb = tb.permute(1, 0)
    out = E.matmul(ta, tb)
    if alpha != 1.0:
        out = out * alpha
    if c is not None:
        tc = r.tensor(c)
        out = out + (tc * beta if beta != 1.0 else tc)
    return out


# -- padding and windows ----------------------------------------------------------------------

def _spatial(node: Node, x: Tensor, kernel: Sequence[int]) -> tuple[
        list[int], list[int], list[int], list[int]]:
    """strides, dilations, pads at the start, pads at the end of each spatial axis."""
    n = len(kernel)
    at = node.attrs
    strides = list(at.get("strides", [1] * n))
    dil = list(at.get("dilations", [1] * n))
    auto = at.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(n):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size, 0)
            small = total // 2
            b = small if auto == "SAME_UPPER" else total - small
            begin.append(b)
            end.append(total - b)
    elif auto == "VALID":
        begin, end = [0] * n, [0] * n
    elif auto == "NOTSET":
        pads = list(at.get("pads", [0] * (2 * n)))
        begin, end = pads[:n], pads[n:]
    else:
        raise ValueError(f"{node.where()}: auto_pad {auto!r} is not one of NOTSET, "
                         "SAME_UPPER, SAME_LOWER, VALID")
    return strides, dil, begin, end


def _pad_explicit(x: Tensor, begin: Sequence[int], end: Sequence[int],
                  value: float = 0.0) -> Tensor:
    widths: list[int] = []
    for b, e in zip(reversed(begin), reversed(end), strict=True):
        widths += [b, e]
    return M.pad(x, widths, mode="constant", value=value)


def _rank_check(node: Node, x: Tensor, allowed: Sequence[int]) -> int:
    n = x.ndim - 2
    if n not in allowed:
        raise NotImplementedError(
            f"{node.where()}: {n}-D input {tuple(x.shape)} is not supported "
            f"(supported: {', '.join(f'{k}-D' for k in allowed)} spatial)")
    return n


@op("Conv", note="1-D and 2-D; every auto_pad")
def conv(r: Run, node: Node, x: Any, w: Any, b: Any = None) -> Tensor:
    t, wt = r.tensor(x), r.tensor(w)
    n = _rank_check(node, t, (1, 2))
    kernel = list(node.attrs.get("kernel_shape", wt.shape[2:]))
    strides, dil, begin, end = _spatial(node, t, kernel)
    if begin != end:
        t = _pad_explicit(t, begin, end)
        begin = [0] * n
    fn = F.conv2d if n == 2 else F.conv1d
    return fn(t, wt, r.tensor(b) if b is not None else None, stride=tuple(strides),
              padding=tuple(begin), dilation=tuple(dil), groups=node.attrs.get("group", 1))


@op("ConvTranspose", note="1-D and 2-D; pads, output_padding, output_shape")
def conv_transpose(r: Run, node: Node, x: Any, w: Any, b: Any = None) -> Tensor:
    t, wt = r.tensor(x), r.tensor(w)
    n = _rank_check(node, t, (1, 2))
    at = node.attrs
    kernel = list(at.get("kernel_shape", wt.shape[2:]))
    strides = list(at.get("strides", [1] * n))
    dil = list(at.get("dilations", [1] * n))
    outpad = list(at.get("output_padding", [0] * n))
    full = [(t.shape[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(n)]
    auto = at.get("auto_pad", "NOTSET")
    if "output_shape" in at or auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = list(at["output_shape"])[-n:] if "output_shape" in at else \
            [t.shape[2 + i] * strides[i] for i in range(n)]
        total = [full[i] + outpad[i] - shape[i] for i in range(n)]
        # as onnxruntime: the odd cell of padding goes at the end only for SAME_UPPER
        if auto == "SAME_UPPER":
            begin = [tt // 2 for tt in total]
        else:
            begin = [tt - tt // 2 for tt in total]
        end = [tt - bb for tt, bb in zip(total, begin, strict=True)]
    elif auto == "VALID":
        begin, end = [0] * n, [0] * n
    else:
        pads = list(at.get("pads", [0] * (2 * n)))
        begin, end = pads[:n], pads[n:]
    bias = r.tensor(b) if b is not None else None
    fn = F.conv_transpose2d if n == 2 else F.conv_transpose1d
    group = at.get("group", 1)
    if begin == end and all(0 <= p < max(s, d) for p, s, d in zip(outpad, strides, dil,
                                                                  strict=True)) \
            and min(begin, default=0) >= 0:
        return fn(t, wt, bias, stride=tuple(strides), padding=tuple(begin),
                  output_padding=tuple(outpad), groups=group, dilation=tuple(dil))
    y = fn(t, wt, None, stride=tuple(strides), groups=group, dilation=tuple(dil))
    # crop the pads (a negative pad grows the output with zeros), then the output padding
    y = _pad_explicit(y, [-p for p in begin], [op_ - p for p, op_ in zip(end, outpad,
                                                                           strict=True)])
    if bias is not None:
        y = y + bias.reshape((bias.shape[0],) + (1,) * n)
    return y


def _pool_geometry(node: Node, t: Tensor) -> tuple[list[int], list[int], list[int],
                                                   list[int], list[int]]:
    kernel = list(node.attrs["kernel_shape"])
    strides, dil, begin, end = _spatial(node, t, kernel)
    return kernel, strides, dil, begin, end


def _ceil_extra(node: Node, t: Tensor, kernel: Sequence[int], strides: Sequence[int],
                dil: Sequence[int], begin: Sequence[int], end: Sequence[int]) -> list[int]:
    """Extra end padding that makes a floor-mode pool give ceil_mode's output size (ONNX
    drops a last window that would start in the end padding)."""
    extra = []
    for i in range(len(kernel)):
        size = t.shape[2 + i] + begin[i] + end[i]
        eff = (kernel[i] - 1) * dil[i] + 1
        out = -(-(size - eff) // strides[i]) + 1
        if (out - 1) * strides[i] >= t.shape[2 + i] + begin[i]:
            out -= 1
        extra.append(max((out - 1) * strides[i] + eff - size, 0))
    return extra


@op("MaxPool", note="1-D and 2-D, ceil_mode, dilations; Indices (2-D, storage_order)")
def max_pool(r: Run, node: Node, x: Any) -> Any:
    t = r.tensor(x)
    n = _rank_check(node, t, (1, 2))
    kernel, strides, dil, begin, end = _pool_geometry(node, t)
    if len([o for o in node.outputs if o]) > 1:
        return _max_pool_indices(node, t, n, kernel, strides, dil, begin, end)
    if n == 2 and begin == end and not node.attrs.get("ceil_mode", 0) and \
            all(p <= k // 2 for p, k in zip(begin, kernel, strict=True)):
        # the kernel pads itself (no padded copy of the input)
        return F.max_pool2d(t, tuple(kernel), stride=tuple(strides),
                            padding=tuple(begin), dilation=tuple(dil))
    if node.attrs.get("ceil_mode", 0):
        end = [e + x_ for e, x_ in zip(end, _ceil_extra(node, t, kernel, strides, dil, begin,
                                                        end), strict=True)]
    if any(begin) or any(end):
        t = _pad_explicit(t, begin, end, value=-math.inf)
    if n == 1:
        return F.max_pool1d(t, kernel[0], stride=strides[0], dilation=dil[0])
    return F.max_pool2d(t, tuple(kernel), stride=tuple(strides),
                        dilation=tuple(dil))


def _max_pool_indices(node: Node, t: Tensor, n: int, kernel: list[int], strides: list[int],
                      dil: list[int], begin: list[int], end: list[int]) -> tuple[Tensor, Tensor]:
    """MaxPool's values and Indices: each maximum's position in the whole input, flattened
    row-major (storage_order 0) or with each plane column-major (1)."""
    if n != 2:
        raise NotImplementedError(f"{node.where()}: the Indices output is supported for 2-D "
                                  "pooling")
    if node.attrs.get("ceil_mode", 0):
        end = [e + x_ for e, x_ in zip(end, _ceil_extra(node, t, kernel, strides, dil, begin,
                                                        end), strict=True)]
    h, w = t.shape[2], t.shape[3]
    p = _pad_explicit(t, begin, end, value=-math.inf) if any(begin) or any(end) else t
    y, idx = F.max_pool2d(p, tuple(kernel), stride=tuple(strides), dilation=tuple(dil),
                          return_indices=True)
    wp = p.shape[3]
    row, col = idx // wp - begin[0], idx % wp - begin[1]
    plane = E.arange(t.shape[0] * t.shape[1], device=t.device).reshape(
        t.shape[0], t.shape[1], 1, 1) * (h * w)
    if node.attrs.get("storage_order", 0):
        return y, plane + col * h + row
    return y, plane + row * w + col


@op("AveragePool", note="1-D and 2-D, ceil_mode, count_include_pad")
def average_pool(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    n = _rank_check(node, t, (1, 2))
    kernel, strides, dil, begin, end = _pool_geometry(node, t)
    if any(d != 1 for d in dil):
        raise NotImplementedError(f"{node.where()}: dilations {dil} are not supported")
    extra = [0] * n
    if node.attrs.get("ceil_mode", 0):
        extra = _ceil_extra(node, t, kernel, strides, dil, begin, end)
    if n == 1:  # as 2-D with a unit height
        t = t.unsqueeze(2)
        kernel, strides, begin, end, extra = ([1, *kernel], [1, *strides], [0, *begin],
                                              [0, *end], [0, *extra])
    include = bool(node.attrs.get("count_include_pad", 0))
    if begin == end and all(p <= k // 2 for p, k in zip(begin, kernel, strict=True)):
        # PyTorch's avg_pool2d has ONNX's semantics here (a ceil_mode window that would start
        # in the end padding is dropped; count_include_pad counts the padding, never the
        # overhang past it), and the kernel pads itself (no padded copy of the input)
        out = F.avg_pool2d(t, tuple(kernel), stride=tuple(strides), padding=tuple(begin),
                           ceil_mode=bool(node.attrs.get("ceil_mode", 0)),
                           count_include_pad=include)
        return out.squeeze(2) if n == 1 else out
    # the window sum over the padded input, divided by how many of its cells count: padding
    # counts when count_include_pad is set, the ceil_mode overhang never does
    padded = _pad_explicit(t, begin, [e + x_ for e, x_ in zip(end, extra, strict=True)])
    sums = F.avg_pool2d(padded, tuple(kernel), stride=tuple(strides)) * math.prod(kernel)
    mask = E.ones((1, 1, *t.shape[2:]), dtype=t.dtype, device=t.device)
    if include:
        mask = _pad_explicit(mask, begin, end, value=1.0)
        mask = _pad_explicit(mask, [0] * len(begin), extra)
    else:
        mask = _pad_explicit(mask, begin, [e + x_ for e, x_ in zip(end, extra, strict=True)])
    counts = F.avg_pool2d(mask, tuple(kernel), stride=tuple(strides)) * math.prod(kernel)
    out = sums / counts
    return out.squeeze(2) if n == 1 else out


@op("GlobalAveragePool")
def global_average_pool(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return R.mean(t, dim=tuple(range(2, t.ndim)), keepdim=True)


@op("GlobalMaxPool")
def global_max_pool(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    return R.amax(t, dim=tuple(range(2, t.ndim)), keepdim=True)


# -- normalization ------------------------------------------------------------------------------

def _per_channel(v: Tensor, ndim: int) -> Tensor:
    return v.reshape((v.shape[0],) + (1,) * (ndim - 2))


@op("BatchNormalization", state_inputs=(3, 4),
    note="inference; training_mode (opset 14 on): batch statistics and running statistics")
def batch_norm(r: Run, node: Node, x: Any, scale: Any, bias: Any, mean: Any,
               var: Any) -> Any:
    if node.attrs.get("training_mode", 0) and node.opset >= 14:
        return _batch_norm_training(r, node, x, scale, bias, mean, var)
    if node.attrs.get("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        raise NotImplementedError(f"{node.where()}: the statistics outputs of training "
                                  "before opset 14 are not supported")
    if not node.attrs.get("spatial", 1):  # BatchNormalization-7 and -9: per-element stats
        raise NotImplementedError(f"{node.where()}: spatial=0 is not supported")
    t = r.tensor(x)
    eps = float(node.attrs.get("epsilon", 1e-5))
    s, b, m, v = (_per_channel(r.tensor(a), t.ndim) for a in (scale, bias, mean, var))
    k = E.rsqrt(v + eps) * s  # per channel: two passes over x instead of three
    return t * k + (b - m * k)


def _batch_norm_training(r: Run, node: Node, x: Any, scale: Any, bias: Any, mean: Any,
                         var: Any) -> tuple[Tensor, Tensor, Tensor]:
    """Y normalized with the batch's statistics (population variance), and the running
    statistics moved towards them by ``1 - momentum``."""
    t = r.tensor(x)
    eps = float(node.attrs.get("epsilon", 1e-5))
    momentum = float(node.attrs.get("momentum", 0.9))
    dims = tuple(d for d in range(t.ndim) if d != 1)
    mu = R.mean(t, dim=dims)
    d = t - _per_channel(mu, t.ndim)
    v = R.mean(d * d, dim=dims)
    s, b = (_per_channel(r.tensor(a), t.ndim) for a in (scale, bias))
    y = d * (E.rsqrt(_per_channel(v, t.ndim) + eps) * s) + b
    run_mean = r.tensor(mean) * momentum + mu * (1 - momentum)
    run_var = r.tensor(var) * momentum + v * (1 - momentum)
    return y, run_mean, run_var


@op("InstanceNormalization")
def instance_norm(r: Run, node: Node, x: Any, scale: Any, bias: Any) -> Tensor:
    t = r.tensor(x)
    eps = float(node.attrs.get("epsilon", 1e-5))
    dims = tuple(range(2, t.ndim))
    mu = R.mean(t, dim=dims, keepdim=True)
    d = t - mu
    var = R.mean(d * d, dim=dims, keepdim=True)
    return d * E.rsqrt(var + eps) * _per_channel(r.tensor(scale), t.ndim) + \
        _per_channel(r.tensor(bias), t.ndim)


@op("LayerNormalization", note="Y, Mean and InvStdDev (statistics in float32)")
def layer_norm(r: Run, node: Node, x: Any, scale: Any, bias: Any = None) -> Any:
    t = r.tensor(x)
    a = node.attrs.get("axis", -1) % t.ndim
    eps = float(node.attrs.get("epsilon", 1e-5))
    s = r.tensor(scale)
    bt = r.tensor(bias) if bias is not None else None
    norm = t.shape[a:]
    extra = len([o for o in node.outputs if o]) > 1
    if not extra and s.shape == norm and (bt is None or bt.shape == norm):
        return F.layer_norm(t, norm, s, bt, eps=eps)
    if int(node.attrs.get("stash_type", 1)) != 1:
        raise NotImplementedError(f"{node.where()}: stash_type must be 1 (float32)")
    dims = tuple(range(a, t.ndim))
    x32 = t.float()
    mu = R.mean(x32, dim=dims, keepdim=True)
    d = x32 - mu
    inv = E.rsqrt(R.mean(d * d, dim=dims, keepdim=True) + eps)
    y = (d * inv).to(t.dtype) * s
    y = y + bt if bt is not None else y
    return (y, mu, inv) if extra else y


@op("RMSNormalization", note="statistics in float32 (stash_type 1)")
def rms_norm(r: Run, node: Node, x: Any, scale: Any) -> Tensor:
    t = r.tensor(x)
    a = node.attrs.get("axis", -1) % t.ndim
    eps = float(node.attrs.get("epsilon", 1e-5))
    if int(node.attrs.get("stash_type", 1)) != 1:
        raise NotImplementedError(f"{node.where()}: stash_type must be 1 (float32)")
    x32 = t.float()
    ms = R.mean(x32 * x32, dim=tuple(range(a, t.ndim)), keepdim=True)
    return (x32 * E.rsqrt(ms + eps)).to(t.dtype) * r.tensor(scale)


@op("MeanVarianceNormalization")
def mean_variance_norm(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    axes = tuple(a % t.ndim for a in node.attrs.get("axes", [0, 2, 3]))
    mu = R.mean(t, dim=axes, keepdim=True)
    var = R.mean(t * t, dim=axes, keepdim=True) - mu * mu  # as ONNX's function body
    return (t - mu) / (E.sqrt(var) + 1e-9)


# -- losses ------------------------------------------------------------------------------------

def _nll(node: Node, logp: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    """NegativeLogLikelihoodLoss of log-probabilities ``logp`` [N, C, d...]."""
    red = node.attrs.get("reduction", "mean")
    if red not in ("none", "sum", "mean"):
        raise ValueError(f"{node.where()}: reduction must be none, sum or mean, got {red!r}")
    ignore = node.attrs.get("ignore_index")
    keep = E.ones_like(target).bool() if ignore is None else E.ne(target, int(ignore))
    safe = E.where(keep, target, E.zeros_like(target)).to(E.int64)
    picked = M.gather(logp, 1, safe.unsqueeze(1)).squeeze(1)
    w = keep.to(logp.dtype)
    if weight is not None:
        w = w * M.index_select(weight, 0, safe.reshape(-1)).reshape(safe.shape)
    loss = -picked * w
    if red == "none":
        return loss
    if red == "sum":
        return R.sum(loss)
    return R.sum(loss) / R.sum(w)


@op("NegativeLogLikelihoodLoss", note="reduction none, sum, mean; weight; ignore_index")
def nll_loss(r: Run, node: Node, x: Any, target: Any, weight: Any = None) -> Tensor:
    return _nll(node, r.tensor(x), r.tensor(target),
                r.tensor(weight) if weight is not None else None)


@op("SoftmaxCrossEntropyLoss", note="reduction none, sum, mean; weight; ignore_index")
def softmax_cross_entropy(r: Run, node: Node, x: Any, target: Any,
                          weight: Any = None) -> Any:
    logp = r.tensor(x).log_softmax(dim=1)
    loss = _nll(node, logp, r.tensor(target), r.tensor(weight) if weight is not None else None)
    return (loss, logp) if len(node.outputs) > 1 else loss


@op("GroupNormalization", note="scale and bias per group (opset 18) or per channel (21)")
def group_norm(r: Run, node: Node, x: Any, scale: Any, bias: Any) -> Tensor:
    t = r.tensor(x)
    g = int(node.attrs["num_groups"])
    eps = float(node.attrs.get("epsilon", 1e-5))
    n, c = t.shape[0], t.shape[1]
    if c % g:
        raise ValueError(f"{node.where()}: {c} channels do not split into {g} groups")
    grouped = t.reshape(n, g, -1)
    mu = R.mean(grouped, dim=2, keepdim=True)
    d = grouped - mu
    y = (d * E.rsqrt(R.mean(d * d, dim=2, keepdim=True) + eps)).reshape(t.shape)
    s, b = r.tensor(scale), r.tensor(bias)
    if node.opset < 21:  # one scale and bias per group, repeated over its channels
        s, b = (E.repeat_interleave(v, c // g) for v in (s, b))
    return y * _per_channel(s, t.ndim) + _per_channel(b, t.ndim)


@op("LpNormalization")
def lp_normalization(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    a = node.attrs.get("axis", -1)
    p = node.attrs.get("p", 2)
    if p == 1:
        norm = R.sum(E.abs(t), dim=a, keepdim=True)
    elif p == 2:
        norm = E.sqrt(R.sum(t * t, dim=a, keepdim=True))
    else:
        raise ValueError(f"{node.where()}: p must be 1 or 2, got {p}")
    zero = E.eq(norm, 0.0)  # ONNX: an all-zero slice normalizes to zeros, not 0/0
    return E.where(zero, E.zeros_like(t), t / E.where(zero, E.ones_like(norm), norm))


@op("DepthToSpace", note="modes DCR and CRD")
def depth_to_space(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    b = int(node.attrs["blocksize"])
    n, c, h, w = t.shape
    if node.attrs.get("mode", "DCR") == "DCR":
        y = t.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = t.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@op("SpaceToDepth", note="modes DCR and CRD")
def space_to_depth(r: Run, node: Node, x: Any) -> Tensor:
    t = r.tensor(x)
    b = int(node.attrs["blocksize"])
    n, c, h, w = t.shape
    mode = node.attrs.get("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise ValueError(f"{node.where()}: mode must be DCR or CRD, got {mode!r}")
    y = t.reshape(n, c, h // b, b, w // b, b)
    y = y.permute(0, 3, 5, 1, 2, 4) if mode == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


# -- Attention (opset 23-25) ------------------------------------------------------------------

def _attention_heads(node: Node, t: Tensor, heads: int | None, what: str) -> Tensor:
    """A 3-D (batch, seq, heads * size) input as 4-D (batch, heads, seq, size)."""
    if t.ndim == 4:
        return t
    if t.ndim != 3:
        raise ValueError(f"{node.where()}: {what} must be 3-D or 4-D, got {tuple(t.shape)}")
    if not heads or t.shape[2] % heads:
        raise ValueError(f"{node.where()}: 3-D {what} {tuple(t.shape)} needs q_num_heads and "
                         "kv_num_heads dividing its hidden size")
    b, s, hidden = t.shape
    return t.reshape((b, s, heads, hidden // heads)).permute(0, 2, 1, 3)


def _attention_frontier(node: Node, nq: int, nkv: int, offset: np.ndarray) -> np.ndarray:
    """(batch or 1, 1, q, kv) booleans: the keys is_causal and the window let each query see;
    ``offset`` (one per batch, or one in all) is the number of valid keys before the queries."""
    at = node.attrs
    left, right = int(at.get("left_window_size", -1)), int(at.get("right_window_size", -1))
    if left < -1 or right < -1:
        raise ValueError(f"{node.where()}: left_window_size/right_window_size must be -1 or "
                         f"nonnegative, got {left}, {right}")
    i = np.arange(nq).reshape(1, 1, nq, 1) + offset.reshape(-1, 1, 1, 1)  # absolute position
    j = np.arange(nkv).reshape(1, 1, 1, nkv)
    allowed = np.ones(np.broadcast_shapes(i.shape, j.shape), dtype=np.bool_)
    if int(at.get("is_causal", 0)):
        allowed &= j <= i
    if left >= 0:
        allowed &= i - j <= left
    if right >= 0:
        allowed &= j - i <= right
    return allowed


@op("Attention", note="opset 23 on (schemas 23-25): 3-D and 4-D inputs, MHA/GQA/MQA, bool "
    "and float attn_mask, is_causal, windows, scale, softcap, past/present key and value, "
    "nonpad_kv_seqlen (read on the host), qk_matmul_output modes 0-3, softmax_precision")
def attention(r: Run, node: Node, q: Any, k: Any, v: Any, attn_mask: Any = None,
              past_key: Any = None, past_value: Any = None,
              nonpad_kv_seqlen: Any = None) -> Any:
    at = node.attrs
    tq, tk, tv = r.tensor(q), r.tensor(k), r.tensor(v)
    if tq.dtype.kind != "f":
        raise TypeError(f"{node.where()}: Q must be floating point, got {tq.dtype.name}")
    if not tq.ndim == tk.ndim == tv.ndim:
        raise ValueError(f"{node.where()}: Q, K and V must have the same rank")
    three_d = tq.ndim == 3
    qh, kvh = at.get("q_num_heads"), at.get("kv_num_heads")
    if not three_d and node.opset >= 25 and (qh is not None or kvh is not None):
        raise ValueError(f"{node.where()}: q_num_heads and kv_num_heads must not be given "
                         "for 4-D inputs")
    if (past_key is None) != (past_value is None):
        raise ValueError(f"{node.where()}: past_key and past_value must be given together")
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise ValueError(f"{node.where()}: nonpad_kv_seqlen cannot be used with past_key")
    mode = int(at.get("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise NotImplementedError(f"{node.where()}: qk_matmul_output_mode {mode} is not one "
                                  "of 0, 1, 2, 3")
    dtype = tq.dtype
    npdt = np.dtype(np.float32) if dtype.name == "bfloat16" else np.dtype(dtype.name)
    tq = _attention_heads(node, tq, qh, "Q")
    tk = _attention_heads(node, tk, kvh, "K")
    tv = _attention_heads(node, tv, kvh, "V")
    scale = at.get("scale")
    root = float(np.sqrt(1.0 / math.sqrt(tq.shape[3]) if scale is None else float(scale)))
    root = float(npdt.type(root))  # sqrt(scale) cast to Q's type, as the spec's expansion
    past = 0
    if past_key is not None:
        tpk, tpv = r.tensor(past_key), r.tensor(past_value)
        past = tpk.shape[2]
        tk, tv = E.cat([tpk, tk], dim=2), E.cat([tpv, tv], dim=2)
    present_k, present_v = tk, tv
    nq, nkv = tq.shape[2], tk.shape[2]
    if nonpad_kv_seqlen is not None:
        lengths = np.asarray(r.ints(nonpad_kv_seqlen), dtype=np.int64)
        offset = lengths - nq
    else:
        lengths, offset = None, np.array([past], dtype=np.int64)
    allowed = _attention_frontier(node, nq, nkv, offset)
    if lengths is not None:  # padding keys past each sample's length
        allowed = allowed & (np.arange(nkv).reshape(1, 1, 1, nkv)
                             < lengths.reshape(-1, 1, 1, 1))
    bias = r.tensor(np.where(allowed, 0.0, -np.inf).astype(np.float32)).to(dtype)
    if attn_mask is not None:
        m = r.tensor(attn_mask)
        if m.shape[-1] < nkv:  # a short mask leaves the remaining keys out
            fill = (*m.shape[:-1], nkv - m.shape[-1])
            m = E.cat([m, E.full(fill, False if m.dtype.name == "bool" else -math.inf,
                                 dtype=m.dtype, device=m.device)], dim=-1)
        if m.dtype.name == "bool":
            m = E.where(m, 0.0, -math.inf).to(dtype)
        bias = bias + m.to(dtype)
    heads = tq.shape[1]
    if heads != tk.shape[1]:
        if heads % tk.shape[1] or tk.shape[1] != tv.shape[1]:
            raise ValueError(f"{node.where()}: {heads} query heads are not a multiple of "
                             f"{tk.shape[1]} key/value heads")
        reps = heads // tk.shape[1]
        tk, tv = E.repeat_interleave(tk, reps, dim=1), E.repeat_interleave(tv, reps, dim=1)
    qk = E.matmul(tq * root, (tk * root).transpose(-1, -2))
    softcap = at.get("softcap")
    if softcap is not None and float(softcap) > 0:
        qk = E.tanh(qk / float(softcap)) * float(softcap)
    scores = qk + bias
    logits = scores
    precision = at.get("softmax_precision")
    if precision is not None:
        logits = logits.to(ember_dtype(int(precision), node.where()))
    probs = E.softmax(logits, dim=-1)
    # a query that may see no key gives a zero row (decided on the bias, not on the logits)
    empty = E.isneginf(E.amax(bias, dim=-1, keepdim=True))
    probs = E.where(empty, 0.0, probs).to(dtype)
    y = E.matmul(probs, tv)
    if three_d:
        y = y.permute(0, 2, 1, 3)
        y = y.reshape((y.shape[0], y.shape[1], y.shape[2] * y.shape[3]))
    qk_out = {0: qk, 1: qk, 2: scores, 3: probs}[mode]
    return y, present_k, present_v, qk_out
