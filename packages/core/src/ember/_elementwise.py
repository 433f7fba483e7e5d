"""Elementwise functions: ``ember.exp(x)``, ``ember.add(a, b)``, ``ember.where(c, a, b)``."""

from __future__ import annotations

from typing import Any

from . import _dtype as dt
from ._apply import Scalar, apply, as_tensor_pair, cast, check_broadcast, scalar_tensor, to_float
from ._checks import check_nonzero
from ._errors import DivisionByZeroError, DTypeError
from ._tensor import Tensor
from ._trace import TRACE
from .amp._state import AUTOCAST, autocast_inputs
from .ops import elementwise as ew
from .ops._op import Op

__all__ = [*ew.FLOAT_UNARY, *ew.NUMERIC_UNARY, *ew.BOOL_UNARY, *ew.ARITHMETIC_BINARY,
           *ew.FLOAT_BINARY, *ew.COMPARISON_BINARY, *ew.LOGICAL_BINARY, *ew.BITWISE_BINARY,
           "acosh", "allclose", "asinh", "atanh", "bitwise_not", "clamp", "copysign", "isclose",
           "where", "true_divide"]

_BOOL_AS_INT = dt.int64
_NO_PARAMS: dict[str, Any] = {}


def _float_unary(op: Op, x: Tensor) -> Tensor:
    return apply(op, to_float(x))  # type: ignore[no-any-return]


def _number_unary(op: Op, x: Tensor) -> Tensor:
    if x._dtype.kind == "b":
        x = cast(x, _BOOL_AS_INT)
    if x._dtype.kind != "f" and op.name in ("floor", "ceil", "round", "trunc"):
        return x
    return apply(op, x)  # type: ignore[no-any-return]


def _binary(op: Op, a: Tensor | Scalar, b: Tensor | Scalar, kind: str) -> Tensor:
    if (isinstance(a, Tensor) and isinstance(b, Tensor)
            and a._dtype is b._dtype and a._device is b._device):
        if a._dtype.kind == "f" and kind != "int":  # the common case: two float tensors
            if a._data.shape != b._data.shape:
                check_broadcast(op, a, b)
            fast = a._device.dispatch_binary
            if fast is not None and not TRACE:  # a trace records every kernel (dispatch)
                try:
                    out = fast(op, a, b)
                except MemoryError as exc:  # named as `Backend.dispatch` names it
                    oom = a._device.backend.memory_error(op, (a, b), _NO_PARAMS, exc)
                    if oom is None or oom is exc:
                        raise
                    raise oom from exc
                if out is not None:
                    return out
            return a._device.dispatch(op, (a, b), _NO_PARAMS)  # type: ignore[no-any-return]
        x, y = a, b
    else:
        x, y = as_tensor_pair(a, b)
    k = x._dtype.kind
    if k != "f" and kind != "any":
        if k == "b" and kind != "int":
            x, y = cast(x, _BOOL_AS_INT), cast(y, _BOOL_AS_INT)
        if kind == "float":
            x, y = to_float(x), to_float(y)
    elif kind == "int" and k == "f":
        raise DTypeError(f"{op.name} needs integer or bool tensors, got {x._dtype.name}")
    if x._data.shape != y._data.shape:
        check_broadcast(op, x, y)
    if x._device is not y._device:
        return apply(op, x, y)  # type: ignore[no-any-return]  # raises the device error
    return x._device.dispatch(op, (x, y), _NO_PARAMS)  # type: ignore[no-any-return]


def _logical(op: Op, a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    x, y = as_tensor_pair(a, b)
    check_broadcast(op, x, y)
    return apply(op, cast(x, dt.bool_), cast(y, dt.bool_))  # type: ignore[no-any-return]


def exp(x: Tensor) -> Tensor:
    """Elementwise ``exp``; integer inputs compute in the default float."""
    return _float_unary(ew.exp, x)


def expm1(x: Tensor) -> Tensor:
    """Elementwise ``expm1``; integer inputs compute in the default float."""
    return _float_unary(ew.expm1, x)


def log(x: Tensor) -> Tensor:
    """Elementwise ``log``; integer inputs compute in the default float."""
    return _float_unary(ew.log, x)


def log1p(x: Tensor) -> Tensor:
    """Elementwise ``log1p``; integer inputs compute in the default float."""
    return _float_unary(ew.log1p, x)


def sqrt(x: Tensor) -> Tensor:
    """Elementwise ``sqrt``; integer inputs compute in the default float."""
    return _float_unary(ew.sqrt, x)


def rsqrt(x: Tensor) -> Tensor:
    """Elementwise ``rsqrt``; integer inputs compute in the default float."""
    return _float_unary(ew.rsqrt, x)


def sin(x: Tensor) -> Tensor:
    """Elementwise ``sin``; integer inputs compute in the default float."""
    return _float_unary(ew.sin, x)


def cos(x: Tensor) -> Tensor:
    """Elementwise ``cos``; integer inputs compute in the default float."""
    return _float_unary(ew.cos, x)


def tan(x: Tensor) -> Tensor:
    """Elementwise ``tan``; integer inputs compute in the default float."""
    return _float_unary(ew.tan, x)


def tanh(x: Tensor) -> Tensor:
    """Elementwise ``tanh``; integer inputs compute in the default float."""
    return _float_unary(ew.tanh, x)


def asin(x: Tensor) -> Tensor:
    """Elementwise ``asin``; integer inputs compute in the default float."""
    return _float_unary(ew.asin, x)


def acos(x: Tensor) -> Tensor:
    """Elementwise ``acos``; integer inputs compute in the default float."""
    return _float_unary(ew.acos, x)


def atan(x: Tensor) -> Tensor:
    """Elementwise ``atan``; integer inputs compute in the default float."""
    return _float_unary(ew.atan, x)


def sinh(x: Tensor) -> Tensor:
    """Elementwise ``sinh``; integer inputs compute in the default float."""
    return _float_unary(ew.sinh, x)


def cosh(x: Tensor) -> Tensor:
    """Elementwise ``cosh``; integer inputs compute in the default float."""
    return _float_unary(ew.cosh, x)


def erf(x: Tensor) -> Tensor:
    """Elementwise ``erf``; integer inputs compute in the default float."""
    return _float_unary(ew.erf, x)


def sigmoid(x: Tensor) -> Tensor:
    """Elementwise ``sigmoid``; integer inputs compute in the default float."""
    return _float_unary(ew.sigmoid, x)


def reciprocal(x: Tensor) -> Tensor:
    """Elementwise ``reciprocal``; integer inputs compute in the default float."""
    return _float_unary(ew.reciprocal, x)


def asinh(x: Tensor) -> Tensor:
    """Elementwise inverse hyperbolic sine; integer inputs compute in the default float.

    Examples
    --------
    >>> import ember
    >>> round(ember.asinh(ember.tensor([1.0])).item(), 4)
    0.8814
    """
    return _float_unary(ew.asinh, x)


def acosh(x: Tensor) -> Tensor:
    """Elementwise inverse hyperbolic cosine (nan below 1); integer inputs compute in the
    default float."""
    return _float_unary(ew.acosh, x)


def atanh(x: Tensor) -> Tensor:
    """Elementwise inverse hyperbolic tangent (inf at 1, nan past it); integer inputs compute
    in the default float."""
    return _float_unary(ew.atanh, x)


def neg(x: Tensor) -> Tensor:
    """Elementwise ``neg``, keeping the dtype."""
    return _number_unary(ew.neg, x)


def abs(x: Tensor) -> Tensor:
    """Elementwise ``abs``, keeping the dtype."""
    return _number_unary(ew.abs, x)


def sign(x: Tensor) -> Tensor:
    """Elementwise ``sign``, keeping the dtype."""
    return _number_unary(ew.sign, x)


def floor(x: Tensor) -> Tensor:
    """Elementwise ``floor``, keeping the dtype."""
    return _number_unary(ew.floor, x)


def ceil(x: Tensor) -> Tensor:
    """Elementwise ``ceil``, keeping the dtype."""
    return _number_unary(ew.ceil, x)


def round(x: Tensor) -> Tensor:
    """Elementwise ``round``, keeping the dtype."""
    return _number_unary(ew.round, x)


def trunc(x: Tensor) -> Tensor:
    """Elementwise ``trunc``, keeping the dtype."""
    return _number_unary(ew.trunc, x)


def logical_not(x: Tensor) -> Tensor:
    """Elementwise ``logical_not``, giving bool."""
    return apply(ew.logical_not, x)  # type: ignore[no-any-return]


def isnan(x: Tensor) -> Tensor:
    """Elementwise ``isnan``, giving bool."""
    return apply(ew.isnan, x)  # type: ignore[no-any-return]


def isinf(x: Tensor) -> Tensor:
    """Elementwise ``isinf``, giving bool."""
    return apply(ew.isinf, x)  # type: ignore[no-any-return]


def add(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``add`` with broadcasting and type promotion."""
    return _binary(ew.add, a, b, "number")


def sub(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``sub`` with broadcasting and type promotion."""
    return _binary(ew.sub, a, b, "number")


def mul(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``mul`` with broadcasting and type promotion."""
    return _binary(ew.mul, a, b, "number")


def _integer_division(op: Op, a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """``a // b`` or ``a % b``: an integer divisor of 0 is a `DivisionByZeroError`, as in
    PyTorch (float division by zero gives inf and nan, as IEEE says)."""
    x, y = as_tensor_pair(a, b)
    if x._dtype.kind != "f":
        if type(b) is int or type(b) is bool:  # a Python divisor: no device value to read
            if b == 0:
                raise DivisionByZeroError(f"{op.name}: integer division by zero "
                                          "(ZeroDivisionError) by the Python scalar 0")
        else:
            check_nonzero(op.name, y)
    return _binary(op, x, y, "number")


def floordiv(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``floordiv`` with broadcasting and type promotion; integer division by
    zero raises `ember.DivisionByZeroError`."""
    return _integer_division(ew.floordiv, a, b)


def remainder(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``remainder`` with broadcasting and type promotion; integer division by
    zero raises `ember.DivisionByZeroError`."""
    return _integer_division(ew.remainder, a, b)


def pow(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``pow`` with broadcasting and type promotion; an integer tensor to a
    negative Python integer is a RuntimeError, as in PyTorch."""
    if _integers(a) and _integers(b):
        _check_exponent(b)
    if AUTOCAST:  # `ember.autocast`: float32 (ember.amp._policy); the short path skips apply
        a, b = autocast_inputs(ew.pow, as_tensor_pair(a, b))
    return _binary(ew.pow, a, b, "number")


def _integers(v: Tensor | Scalar) -> bool:
    return v._dtype.kind in "iu" if isinstance(v, Tensor) else type(v) is int


_NEGATIVE_POWER = "Integers to negative integer powers are not allowed"


def _check_exponent(b: Tensor | Scalar) -> None:
    # Note: as PyTorch, only a Python exponent is checked: a tensor of negative exponents
    # gives integer results (2 ** -1 == 0, 1 ** -1 == 1, (-1) ** -1 == -1) without a value read
    if not isinstance(b, Tensor) and b < 0:
        raise RuntimeError(f"pow: {_NEGATIVE_POWER} (exponent {b}).")


def maximum(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``maximum`` with broadcasting and type promotion (of two bool tensors,
    their logical or, as PyTorch keeps bool)."""
    if _both_bool(a, b):
        return logical_or(a, b)
    return _binary(ew.maximum, a, b, "number")


def minimum(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``minimum`` with broadcasting and type promotion (of two bool tensors,
    their logical and)."""
    if _both_bool(a, b):
        return logical_and(a, b)
    return _binary(ew.minimum, a, b, "number")


def _both_bool(a: Tensor | Scalar, b: Tensor | Scalar) -> bool:
    return (isinstance(a, Tensor) and isinstance(b, Tensor) and a._dtype is dt.bool_
            and b._dtype is dt.bool_)


def div(a: Tensor | Scalar, b: Tensor | Scalar, *, rounding_mode: str | None = None) -> Tensor:
    """Elementwise ``a / b`` with broadcasting and type promotion; ``rounding_mode`` as
    PyTorch: None (true division, a float), ``"trunc"`` (rounded toward zero) or ``"floor"``
    (rounded down; both keep an integer dtype, and refuse an integer divisor of 0).

    Examples
    --------
    >>> import ember
    >>> ember.div(ember.tensor([7, -7]), 2, rounding_mode="trunc").tolist()
    [3, -3]
    """
    if rounding_mode is None:
        return _binary(ew.div, a, b, "float")
    if rounding_mode == "floor":
        x, y = as_tensor_pair(a, b)
        return floordiv(x, y)  # Python's rule for floats too, as PyTorch: 1 // 0.1 is 9
    if rounding_mode == "trunc":
        x, y = as_tensor_pair(a, b)
        if x._dtype.kind == "f":
            return trunc(_binary(ew.div, x, y, "float"))
        q = floordiv(x, y)  # checks the divisor
        # floor and trunc differ where the division is inexact and the signs differ
        up = logical_and(ne(remainder(x, y), 0), logical_xor(lt(x, 0), lt(y, 0)))
        return add(q, cast(up, q._dtype))
    raise RuntimeError("div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                       f"but found {rounding_mode!r}")


def copysign(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """The magnitude of ``a`` with the sign of ``b`` (-0.0 counts as negative), in floating
    point, as ``torch.copysign``.

    Examples
    --------
    >>> import ember
    >>> ember.copysign(ember.tensor([1.0, -2.0]), -1.0).tolist()
    [-1.0, -2.0]
    """
    return _binary(ew.copysign, a, b, "float")


def atan2(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``atan2`` with broadcasting and type promotion."""
    return _binary(ew.atan2, a, b, "float")


def eq(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``eq`` with broadcasting and type promotion."""
    return _binary(ew.eq, a, b, "any")


def ne(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``ne`` with broadcasting and type promotion."""
    return _binary(ew.ne, a, b, "any")


def lt(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``lt`` with broadcasting and type promotion."""
    return _binary(ew.lt, a, b, "any")


def le(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``le`` with broadcasting and type promotion."""
    return _binary(ew.le, a, b, "any")


def gt(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``gt`` with broadcasting and type promotion."""
    return _binary(ew.gt, a, b, "any")


def ge(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``ge`` with broadcasting and type promotion."""
    return _binary(ew.ge, a, b, "any")


def bitwise_and(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``bitwise_and`` with broadcasting and type promotion."""
    return _binary(ew.bitwise_and, a, b, "int")


def bitwise_or(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``bitwise_or`` with broadcasting and type promotion."""
    return _binary(ew.bitwise_or, a, b, "int")


def bitwise_xor(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``bitwise_xor`` with broadcasting and type promotion."""
    return _binary(ew.bitwise_xor, a, b, "int")


def left_shift(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``left_shift`` with broadcasting and type promotion."""
    return _binary(ew.left_shift, a, b, "int")


def right_shift(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``right_shift`` with broadcasting and type promotion."""
    return _binary(ew.right_shift, a, b, "int")


def logical_and(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``logical_and`` of the truth values."""
    return _logical(ew.logical_and, a, b)


def logical_or(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``logical_or`` of the truth values."""
    return _logical(ew.logical_or, a, b)


def logical_xor(a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """Elementwise ``logical_xor`` of the truth values."""
    return _logical(ew.logical_xor, a, b)


true_divide = div


def bitwise_not(x: Tensor) -> Tensor:
    """Elementwise bitwise not (logical not for bool)."""
    if x._dtype.kind == "f":
        raise DTypeError(f"bitwise_not needs integer or bool tensors, got {x._dtype.name}")
    return apply(ew.bitwise_not, x)  # type: ignore[no-any-return]


def where(condition: Tensor, a: Tensor | float, b: Tensor | float) -> Tensor:
    """``a`` where ``condition`` holds, else ``b``; all three broadcast.

    Examples
    --------
    >>> import ember
    >>> x = ember.tensor([1., -2., 3.])
    >>> ember.where(x > 0, x, 0.0).tolist()
    [1.0, 0.0, 3.0]
    """
    from ._tensor import Tensor

    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        dtype = dt.result_type_scalar(dt.bool_, a, dt.float32)
        dtype = dt.promote_types(dtype, dt.result_type_scalar(dt.bool_, b, dt.float32))
        a = scalar_tensor(a, dtype, condition._device)
    x, y = as_tensor_pair(a, b)
    cond = cast(condition, dt.bool_)
    check_broadcast(ew.where, x, y)
    check_broadcast(ew.where, cond, x)
    check_broadcast(ew.where, cond, y)
    return apply(ew.where, cond, x, y)  # type: ignore[no-any-return]


def clamp(x: Tensor, min: Tensor | float | None = None,  # PyTorch's names
          max: Tensor | float | None = None) -> Tensor:
    """Limit ``x`` to ``[min, max]``; either bound may be None or a tensor."""
    from ._tensor import Tensor

    if isinstance(min, Tensor) or isinstance(max, Tensor):
        out = x
        if min is not None:
            out = maximum(out, min)
        if max is not None:
            out = minimum(out, max)
        return out
    if min is None and max is None:
        raise ValueError("clamp needs at least one of min and max")
    if x._dtype.kind != "f" and any(isinstance(v, float) for v in (min, max)):
        x = to_float(x)
    elif x._dtype.kind == "b":
        x = cast(x, _BOOL_AS_INT)
    return apply(ew.clamp, x, min=min, max=max)  # type: ignore[no-any-return]


def isclose(a: Tensor, b: Tensor | float, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """Elementwise ``|a - b| <= atol + rtol * |b|`` (equal infinities are close; nan is close
    to nan only with ``equal_nan``), as ``torch.isclose``; a and b broadcast."""
    if rtol < 0 or atol < 0:
        raise ValueError(f"isclose: rtol ({rtol}) and atol ({atol}) must be non-negative")
    x, y = as_tensor_pair(a, b)
    check_broadcast(ew.le, x, y)
    if x._dtype.kind != "f":
        if x._dtype.kind == "b":
            x, y = cast(x, dt.int64), cast(y, dt.int64)
        if rtol == 0 and atol == 0:
            return eq(x, y)
        x, y = to_float(x), to_float(y)
    # infinities are close only when equal; keeping them out of the subtraction also keeps
    # inf - inf (an invalid operation some backends warn about) from ever running
    finite = logical_not(logical_or(isinf(x), isinf(y)))
    xs, ys = where(finite, x, 0.0), where(finite, y, 0.0)
    close = logical_or(eq(x, y), logical_and(
        finite, le(abs(sub(xs, ys)), add(mul(abs(ys), rtol), atol))))
    if equal_nan:
        close = logical_or(close, logical_and(isnan(x), isnan(y)))
    return close


def allclose(a: Tensor, b: Tensor | float, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """Whether every element of ``a`` is close to ``b`` (`isclose`): a Python bool.

    Examples
    --------
    >>> import ember
    >>> ember.allclose(ember.tensor([1.0, 2.0]), ember.tensor([1.0, 2.0 + 1e-9]))
    True
    """
    return bool(isclose(a, b, rtol, atol, equal_nan).all().item())
