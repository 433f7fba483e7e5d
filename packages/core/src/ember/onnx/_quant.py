"""Quantization operators: QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked),
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Integer products are computed in int32 (the operands widened, zero points subtracted, the
matmul or im2col convolution accumulated in int32: exact), then requantized in float32 as the
ONNX reference does: ``rint(acc * (a_scale * b_scale / y_scale)) + y_zero_point``, saturated.
Quantized element types: uint8, int8, int16 (and int32 inputs to DequantizeLinear), and the
types carried in a wider dtype (`_carried`): uint16, the 4- and 2-bit integers (their own
ranges), the float8 kinds and float4 (rounded on the host by their numpy dtypes).
"""

from __future__ import annotations

from typing import Any

import ember as E
from ember import Tensor

from . import _carried, _nn
from ._dtypes import ember_dtype
from ._ndconv import conv_nd
from ._registry import Node, Run, op

_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-32768, 32767)}


def _int_range(node: Node, dtype: Any) -> tuple[int, int]:
    rng = _RANGES.get(dtype.name)
    if rng is None:
        raise TypeError(f"{node.where()}: quantized type {dtype.name} is not supported "
                        f"(supported: {', '.join(_RANGES)})")
    return rng


def _broadcast_param(r: Run, node: Node, v: Tensor, shape: tuple[int, ...],
                     axis: int, block: int) -> Tensor:
    """A scale or zero point shaped to broadcast against ``shape`` (per tensor, per axis,
    or repeated over blocks of ``block`` along ``axis``)."""
    nd = len(shape)
    if v.ndim == 0 or (v.numel() == 1 and not block):
        return v.reshape(())
    a = axis % nd if nd else 0
    if not block:
        if v.ndim != 1 or v.shape[0] != shape[a]:
            raise ValueError(f"{node.where()}: per-axis parameter of shape {tuple(v.shape)} "
                             f"for input {shape} along axis {a} (needs [{shape[a]}])")
        dims = [1] * nd
        dims[a] = shape[a]
        return v.reshape(*dims)
    if block < 0:
        raise ValueError(f"{node.where()}: block_size must be positive, got {block}")
    want = list(shape)
    want[a] = -(-shape[a] // block)
    if list(v.shape) != want:
        raise ValueError(f"{node.where()}: blocked parameter of shape {tuple(v.shape)} for "
                         f"input {shape}, axis {a}, block_size {block} (needs {want})")
    rep = E.repeat_interleave(v, block, dim=a)
    return E.narrow(rep, a, 0, shape[a])


def _quantize(r: Run, node: Node, t: Tensor, scale: Tensor, zp: Tensor | None,
              out_dtype: Any, axis: int, block: int, code: int | None = None) -> Tensor:
    """``x / scale`` rounded and saturated to ``out_dtype``, or to the carried type ``code``
    (its integer range; float8 and float4 through their numpy dtypes on the host)."""
    s = _broadcast_param(r, node, scale, tuple(t.shape), axis, block)
    ratio = t / s.to(t.dtype)
    if code in _carried.FLOAT8 or code == _carried.FLOAT4:
        if zp is not None and code == _carried.FLOAT4:
            ratio = ratio + _broadcast_param(r, node, zp, tuple(t.shape), axis, block)
        saturate = bool(node.attrs.get("saturate", 1))
        return r.tensor(_carried.cast_host(r.host(ratio), code, saturate, "up", node.where()))
    if code is not None:
        lo, hi = _carried.RANGE[code]
        out_dtype = _carried.CARRIER[code]
    else:
        lo, hi = _int_range(node, out_dtype)
    q = E.round(ratio).float()
    if zp is not None:
        q = q + _broadcast_param(r, node, zp, tuple(t.shape), axis, block).float()
    return E.clamp(q, float(lo), float(hi)).to(out_dtype)


@op("QuantizeLinear", note="per tensor, per axis and blocked; uint8, int8, int16 outputs; "
    "x / scale rounded half to even, saturated")
def quantize_linear(r: Run, node: Node, x: Any, scale: Any, zp: Any = None) -> Tensor:
    at = node.attrs
    if at.get("precision"):
        raise NotImplementedError(f"{node.where()}: the precision attribute is not supported")
    t = r.tensor(x)
    z = r.tensor(zp) if zp is not None else None
    if z is not None:
        out = z.dtype
        if at.get("output_dtype") and ember_dtype(int(at["output_dtype"]), node.where()) \
                is not out:
            raise TypeError(f"{node.where()}: output_dtype {at['output_dtype']} differs from "
                            f"the zero point's {out.name}")
    elif at.get("output_dtype"):
        out = ember_dtype(int(at["output_dtype"]), node.where())
    else:
        out = E.uint8
    code = _carried.quantized_type(r, node)
    return _quantize(r, node, t, r.tensor(scale), z, out, int(at.get("axis", 1)),
                     int(at.get("block_size", 0)), code)


@op("DequantizeLinear", note="per tensor, per axis and blocked; uint8, int8, int16, int32 "
    "inputs; (x - zero_point) * scale in float32")
def dequantize_linear(r: Run, node: Node, x: Any, scale: Any, zp: Any = None) -> Tensor:
    at = node.attrs
    t = r.tensor(x)
    code = _carried.input_type(r, node, 0)
    floating = code in _carried.FLOAT8 or code == _carried.FLOAT4  # carried in float32
    if not t.dtype.is_integer and not floating:
        raise TypeError(f"{node.where()}: input of dtype {t.dtype.name}; DequantizeLinear "
                        "takes integer, float8 or float4 inputs")
    s = r.tensor(scale)
    axis, block = int(at.get("axis", 1)), int(at.get("block_size", 0))
    d = t.float()
    if zp is not None and floating:  # ONNX: a float8 zero point must be 0
        if bool(E.any(E.ne(r.tensor(zp), 0.0)).item()):
            raise ValueError(f"{node.where()}: a float8/float4 zero point must be zero")
    elif zp is not None:
        z = r.tensor(zp)
        if z.dtype is not t.dtype:
            raise TypeError(f"{node.where()}: zero point of dtype {z.dtype.name} for an input "
                            f"of dtype {t.dtype.name}")
        d = d - _broadcast_param(r, node, z, tuple(t.shape), axis, block).float()
    y = d * _broadcast_param(r, node, s, tuple(t.shape), axis, block).float()
    out = ember_dtype(int(at["output_dtype"]), node.where()) if at.get("output_dtype") \
        else s.dtype
    return y.to(out)


@op("DynamicQuantizeLinear", note="uint8: scale from the range [min(0, x), max(0, x)]")
def dynamic_quantize_linear(r: Run, node: Node, x: Any) -> tuple[Tensor, Tensor, Tensor]:
    t = r.tensor(x).float()
    hi = E.clamp(E.amax(t), min=0.0)
    lo = E.clamp(E.amin(t), max=0.0)
    span = hi - lo
    scale = E.where(E.eq(span, 0.0), E.ones_like(span), span) / 255.0
    zp = E.round(E.clamp(0.0 - lo / scale, 0.0, 255.0))
    y = E.clamp(E.round(t / scale) + zp, 0.0, 255.0).to(E.uint8)
    return y, scale.to(r.tensor(x).dtype), zp.to(E.uint8)


def _widen(r: Run, node: Node, v: Any, zp: Any, axis: int | None = None) -> Tensor:
    """An integer operand as int32 with its zero point subtracted (per tensor, or one per
    row/filter along ``axis``)."""
    t = r.tensor(v)
    if not t.dtype.is_integer:
        raise TypeError(f"{node.where()}: operand of dtype {t.dtype.name}; integer inputs "
                        "expected")
    w = t.to(E.int32)
    if zp is None:
        return w
    z = r.tensor(zp)
    if z.dtype is not t.dtype:
        raise TypeError(f"{node.where()}: zero point of dtype {z.dtype.name} for an operand "
                        f"of dtype {t.dtype.name}")
    z = z.to(E.int32)
    if z.numel() == 1:
        return w - z.reshape(())
    if axis is None:
        return w - z
    dims = [1] * t.ndim
    dims[axis % t.ndim] = z.numel()
    return w - z.reshape(*dims)


@op("MatMulInteger", note="uint8/int8 operands and zero points, int32 accumulation")
def matmul_integer(r: Run, node: Node, a: Any, b: Any, azp: Any = None,
                   bzp: Any = None) -> Tensor:
    ta = _widen(r, node, a, azp, axis=-2 if azp is not None and r.tensor(azp).ndim else None)
    tb = _widen(r, node, b, bzp, axis=-1 if bzp is not None and r.tensor(bzp).ndim else None)
    return E.matmul(ta, tb)


def _conv_int(r: Run, node: Node, x: Tensor, w: Tensor) -> Tensor:
    kernel = list(node.attrs.get("kernel_shape", w.shape[2:]))
    strides, dil, begin, end = _nn._spatial(node, x, kernel)
    return conv_nd(x, w, None, strides, dil, begin, end, int(node.attrs.get("group", 1)),
                   node.where())


@op("ConvInteger", note="uint8/int8 operands, per-tensor or per-filter weight zero point, "
    "int32 accumulation (im2col + matmul), any spatial rank")
def conv_integer(r: Run, node: Node, x: Any, w: Any, xzp: Any = None,
                 wzp: Any = None) -> Tensor:
    return _conv_int(r, node, _widen(r, node, x, xzp), _widen(r, node, w, wzp, axis=0))


def _requantize(r: Run, node: Node, acc: Tensor, mult: Tensor, yzp: Tensor | None,
                out: Any) -> Tensor:
    lo, hi = _int_range(node, out)
    y = acc.double() * mult.double()  # as the reference: int32 times the scales' product
    if yzp is not None:
        y = y + yzp.double().reshape(())
    return E.clamp(E.round(y), float(lo), float(hi)).to(out)


@op("QLinearMatMul", note="uint8/int8; int32 accumulation, requantized in float32")
def qlinear_matmul(r: Run, node: Node, a: Any, a_scale: Any, azp: Any, b: Any, b_scale: Any,
                   bzp: Any, y_scale: Any, yzp: Any = None) -> Tensor:
    ta = _widen(r, node, a, azp, axis=-2 if azp is not None and r.tensor(azp).numel() > 1
                else None)
    tb = _widen(r, node, b, bzp, axis=-1 if bzp is not None and r.tensor(bzp).numel() > 1
                else None)
    acc = E.matmul(ta, tb)
    sa, sb = r.tensor(a_scale), r.tensor(b_scale)
    if sa.numel() > 1:
        sa = sa.reshape(*sa.shape, 1)
    mult = sa * sb / r.tensor(y_scale).reshape(())  # in the scales' dtype, as the reference
    z = r.tensor(yzp) if yzp is not None else None
    return _requantize(r, node, acc, mult, z, z.dtype if z is not None else r.tensor(a).dtype)


@op("QLinearConv", note="uint8/int8, per-tensor or per-filter weight scale and zero point, "
    "int32 bias; int32 accumulation, requantized in float32")
def qlinear_conv(r: Run, node: Node, x: Any, x_scale: Any, xzp: Any, w: Any, w_scale: Any,
                 wzp: Any, y_scale: Any, yzp: Any = None, bias: Any = None) -> Tensor:
    tx = _widen(r, node, x, xzp)
    tw = _widen(r, node, w, wzp, axis=0)
    acc = _conv_int(r, node, tx, tw)
    n = acc.ndim - 2
    if bias is not None:
        bt = r.tensor(bias)
        if bt.dtype is not E.int32:
            raise TypeError(f"{node.where()}: bias of dtype {bt.dtype.name} (int32 expected)")
        acc = acc + bt.reshape((bt.shape[0],) + (1,) * n)
    sw = r.tensor(w_scale)
    if sw.numel() > 1:
        sw = sw.reshape((sw.shape[0],) + (1,) * n)
    else:
        sw = sw.reshape(())
    mult = r.tensor(x_scale).reshape(()) * sw / r.tensor(y_scale).reshape(())
    z = r.tensor(yzp) if yzp is not None else None
    return _requantize(r, node, acc, mult, z, z.dtype if z is not None else r.tensor(x).dtype)
