"""ONNX element types ember has no dtype for, carried in a wider ember dtype that holds every
value exactly: UINT16 in int32, UINT32 in int64, INT4/INT2 in int8, UINT4/UINT2 in uint8,
and the float8 kinds, FLOAT4E2M1 and FLOAT8E8M0 in float32.

A carried value is its numbers in the carrier dtype.  What keeps it exact:

* every value an op computes of a carried integer type is reduced to its width (UINT16 and
  UINT32 arithmetic wraps as ONNX's does: ``& 0xFFFF``, ``& 0xFFFFFFFF``; non-negative
  carriers compare, divide, shift and take remainders as the unsigned type does);
* a Cast or CastLike *to* a carried type rounds on the host with the numpy dtypes that define
  it (``ml_dtypes``, and onnx's ``numpy_helper.saturate_cast`` / ``to_float8e8m0`` for the
  saturating float8 and E8M0 rules), so the carrier holds exactly the narrow type's values;
  a Cast *from* one is the ordinary cast of its carrier, exact;
* graph inputs of the narrow numpy dtype are widened on the way in, and `backend` narrows the
  outputs to their declared types on the way out.  `OnnxModel` itself returns the carrier
  (``model.carried`` names each output's ONNX type).

UINT64 is carried in int64 for values below 2**63, where every op's signed result is the
unsigned one; a value at or above 2**63 (an input, or a result that wraps, which int64 shows
as negative) is an error, never a silent wrong number.  Each UINT64 result is checked, a
reduction and a read-back per node.  Adding these as real ember dtypes would
mean kernels for each in every backend (numba, OpenCL, Triton, WGSL), which the importer
cannot do on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import ember as E
from ember import DType, Tensor

from . import _elementwise  # noqa: F401  # its Cast and CastLike rules, wrapped here
from ._registry import OPS, Node, Run, op

__all__ = ["CARRIER", "from_carrier", "normalize", "to_carrier", "value_types"]

FLOAT8 = (17, 18, 19, 20)  # E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ
FLOAT4, E8M0 = 23, 24
UINT16, UINT32, UINT64 = 4, 12, 13
#: ONNX element type -> the ember dtype that carries it
CARRIER: dict[int, DType] = {
    UINT16: E.int32, UINT32: E.int64, UINT64: E.int64, 21: E.uint8, 22: E.int8,
    25: E.uint8, 26: E.int8,
    **{c: E.float32 for c in (*FLOAT8, FLOAT4, E8M0)}}
#: integer ranges of the carried integer types
RANGE = {UINT16: (0, 65535), UINT32: (0, 4294967295), 21: (0, 15), 22: (-8, 7),
         25: (0, 3), 26: (-2, 1)}
_MASK = {UINT16: 0xFFFF, UINT32: 0xFFFFFFFF}


def storage(code: int) -> np.dtype[Any]:
    """The numpy dtype of the narrow type (``ml_dtypes`` for the sub-byte and float8 ones)."""
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(code))


def to_carrier(a: Any, code: int) -> np.ndarray:
    arr = np.asarray(a)
    if code == UINT64 and arr.size and arr.dtype.kind in "uif" and \
            (arr.max() >= 2**63 or arr.min() < 0):
        raise OverflowError(_UINT64_LIMIT)
    return arr.astype(CARRIER[code].numpy_name)


def from_carrier(a: Any, code: int) -> np.ndarray:
    return np.asarray(a).astype(storage(code))


_UINT64_LIMIT = ("a UINT64 value is 2**63 or more (or a UINT64 result wrapped below 0): "
                 "ember carries UINT64 in int64 and computes it exactly below 2**63 only")


def normalize(v: Any, code: int) -> Any:
    """A value an op computed of carried type ``code``, reduced to that type (UINT16 and
    UINT32 wrap; UINT64 is checked to lie below 2**63, an error otherwise; the others come
    only from casts, which round themselves)."""
    if code == UINT64:
        neg = bool(np.any(v < 0)) if isinstance(v, np.ndarray) else \
            bool(E.any(v < 0).item()) if isinstance(v, Tensor) and v.numel() else False
        if neg:
            raise OverflowError(_UINT64_LIMIT)
        return v
    mask = _MASK.get(code)
    if mask is None:
        return v
    if isinstance(v, np.ndarray):
        return np.bitwise_and(v.astype(CARRIER[code].numpy_name), mask)
    if isinstance(v, Tensor):
        return E.bitwise_and(v.to(CARRIER[code]), mask)
    return v


def value_types(model: Any) -> dict[str, int]:
    """The ONNX element type of each value of the main graph whose type is carried (declared
    or found by onnx's shape inference)."""
    from onnx import shape_inference

    g = model.graph
    if not _mentions_carried(g):
        return {}  # the usual case: no inference needed
    try:
        g = shape_inference.infer_shapes(model).graph
    except Exception:  # inference is a help, the declared types remain
        pass
    out: dict[str, int] = {}
    for v in [*g.input, *g.output, *g.value_info]:
        t = v.type
        if t.WhichOneof("value") == "tensor_type" and t.tensor_type.elem_type in CARRIER:
            out[v.name] = t.tensor_type.elem_type
    for init in g.initializer:
        if init.data_type in CARRIER:
            out[init.name] = init.data_type
    for n in g.node:  # casts say their output type even where inference gave up
        if n.op_type == "Cast":
            for a in n.attribute:
                if a.name == "to" and a.i in CARRIER and n.output:
                    out[n.output[0]] = a.i
    return out


def _mentions_carried(g: Any) -> bool:
    """Whether the graph declares, stores or casts to a carried type anywhere."""
    for v in [*g.input, *g.output, *g.value_info]:
        if v.type.WhichOneof("value") == "tensor_type" and \
                v.type.tensor_type.elem_type in CARRIER:
            return True
    if any(t.data_type in CARRIER for t in g.initializer):
        return True
    for n in g.node:
        for a in n.attribute:
            if a.name in ("to", "output_dtype", "dtype") and a.i in CARRIER:
                return True
            if a.HasField("t") and a.t.data_type in CARRIER:
                return True
    return False


def _types(r: Run) -> Mapping[str, int]:
    return r.types


def cast_host(x: np.ndarray, to: int, saturate: bool, round_mode: str, where: str) -> np.ndarray:
    """``x`` (numbers) cast to the carried type ``to``, as the carrier."""
    from onnx import numpy_helper

    if to == E8M0:
        y = numpy_helper.to_float8e8m0(x, saturate, round_mode).astype(storage(to))
    elif to in FLOAT8 and saturate:
        y = numpy_helper.saturate_cast(x, storage(to))
    else:
        y = np.asarray(x).astype(storage(to))
    return to_carrier(y, to)


def _cast_to(r: Run | None, node: Node, x: Any, to: int) -> Any:
    saturate = bool(node.attrs.get("saturate", 1))
    mode = str(node.attrs.get("round_mode", "up"))
    src = x if isinstance(x, np.ndarray) else r.host(x)  # type: ignore[union-attr]
    y = cast_host(src, to, saturate, mode, node.where())
    return y if r is None else r.tensor(y)


_CAST, _CAST_LIKE = OPS["Cast"], OPS["CastLike"]


def _cast_host(node: Node, x: np.ndarray) -> Any:
    to = int(node.attrs["to"])
    if to in CARRIER:
        return _cast_to(None, node, x, to)
    assert _CAST.host is not None
    return _CAST.host(node, x)


@op("Cast", host=_cast_host, note="every ember dtype, and the carried types (UINT16, UINT32, "
    "INT4, UINT4, INT2, UINT2, float8 kinds, FLOAT4E2M1, FLOAT8E8M0) with saturate and "
    "round_mode")
def cast(r: Run, node: Node, x: Any) -> Any:
    to = int(node.attrs["to"])
    if to in CARRIER:
        return _cast_to(r, node, x, to)
    return _CAST.device(r, node, x)


@op("CastLike", note="as Cast, to the second input's type (on the device: a host constant "
    "may be of a carried type)")
def cast_like(r: Run, node: Node, x: Any, like: Any) -> Any:
    to = _types(r).get(node.inputs[1])
    if to is not None:
        return _cast_to(r, node, x, to)
    return _CAST_LIKE.device(r, node, x, like)


def quantized_type(r: Run, node: Node) -> int | None:
    """The carried ONNX type a quantizing node writes (its output's), if any."""
    return _types(r).get(node.outputs[0]) if node.outputs else None


def input_type(r: Run, node: Node, i: int) -> int | None:
    return _types(r).get(node.inputs[i]) if len(node.inputs) > i and node.inputs[i] else None
