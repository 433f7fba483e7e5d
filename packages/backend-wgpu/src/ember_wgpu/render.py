"""WGSL from the kernel IR (`ember.backend.ir`): an op's body as one ``let`` per node.

Values compute in WGSL's types for each IR dtype (``uint8``, the IR's view of a bool as a
byte, computes in ``u32`` and is masked back to 8 bits).  WGSL lacks some of the C library the
IR assumes (``expm1``, ``log1p``, ``erf``, C's ``pow`` for negative bases, ``isnan``): those are
helper functions in `PRELUDE`, written once here and prepended to the kernels that call them.
``isnan``/``isinf`` test the bits, so no compiler can fold ``x != x`` away.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

from ember.backend import ir
from ember.backend.spelling import CodeTable

__all__ = ["WGSL_TYPES", "Rendered", "const", "prelude", "render", "wrap"]

#: the WGSL type each IR compute dtype computes in
WGSL_TYPES = {"bool": "bool", "uint8": "u32", "int32": "i32", "uint32": "u32", "int64": "i64",
              "uint64": "u64", "float32": "f32", "int8": "i32", "int16": "i32",
              "uint16": "u32"}
#: the narrow integers compute in 32 bits and are wrapped back after every operation
_WRAP = {"int8": "(({x} << 24u) >> 24u)", "int16": "(({x} << 16u) >> 16u)",
         "uint8": "({x} & 0xffu)", "uint16": "({x} & 0xffffu)"}


def wrap(x: str, dtype: str) -> str:
    """``x`` (of the 32-bit type ``dtype`` computes in) wrapped to ``dtype``'s range."""
    form = _WRAP.get(dtype)
    return form.format(x=x) if form is not None else x
_INFIX = {"add": "+", "sub": "-", "mul": "*", "fdiv": "/", "idiv": "/", "imod": "%",
          "fmod": "%", "lt": "<", "le": "<=", "eq": "==", "ne": "!=", "gt": ">", "ge": ">=",
          "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
_CALL = {"exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan",
         "tanh": "tanh_", "asin": "asin_", "acos": "acos_", "atan": "atan_", "sinh": "sinh_",
         "cosh": "cosh_", "floor": "floor", "ceil": "ceil", "rint": "round", "trunc": "trunc",
         "fabs": "abs", "expm1": "expm1_", "log1p": "log1p_", "erf": "erf_", "isnan": "isnan_",
         "isinf": "isinf_", "pow": "pow_", "atan2": "atan2_"}

#: helper functions, by name; `prelude` picks those a source calls
HELPERS = {
    # round to nearest even bfloat16, kept as the f32 of its value (quiet nans stay nans)
    "bf16_": """fn bf16_(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return bitcast<f32>(u | 0x00400000u); }
    return bitcast<f32>((u + 0x7fffu + ((u >> 16u) & 1u)) & 0xffff0000u);
}""",
    "isnan_": "fn isnan_(x: f32) -> bool {\n"
              "    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;\n}",
    "isinf_": "fn isinf_(x: f32) -> bool {\n"
              "    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;\n}",
    # large arguments: tanh(x) = sign(x) (some drivers compute exp(2x) and return nan)
    "tanh_": "fn tanh_(x: f32) -> f32 { if (abs(x) > 15.0) { return sign(x); } return tanh(x); }",
    "sinh_": """fn sinh_(x: f32) -> f32 {
    if (abs(x) < 0.25) {
        let x2 = x * x;
        return x * (1.0 + x2 * (1.0 / 6.0 + x2 * (1.0 / 120.0 + x2 / 5040.0)));
    }
    let e = exp(abs(x) - 0.69314718);  // e^|x| / 2, finite one step further
    return sign(x) * (e - 0.25 / e);
}""",
    "cosh_": """fn cosh_(x: f32) -> f32 {
    let e = exp(abs(x) - 0.69314718);
    return e + 0.25 / e;
}""",
    # Kahan's tricks: exact where 1 + x or e^x rounds to 1
    "expm1_": """fn expm1_(x: f32) -> f32 {
    if (abs(x) < 1e-5) { return x + 0.5 * x * x; }
    if (x > 88.0) { return exp(x); }
    let u = exp(x);
    if (u == 1.0) { return x; }
    let um1 = u - 1.0;
    if (um1 == -1.0) { return -1.0; }
    return um1 * x / log(u);
}""",
    "log1p_": """fn log1p_(x: f32) -> f32 {
    if (x < -1.0) { return bitcast<f32>(0x7fc00000u); }
    let u = 1.0 + x;
    if (u == 1.0) { return x; }
    if (isinf_(u) || u == 0.0) { return log(u); }
    return log(u) * x / (u - 1.0);
}""",
    # the inverse trigonometric functions from Cephes' atanf (drivers' own are often far
    # less accurate than float32, and some give 0 for nan)
    "atan_": """fn atan_(x0: f32) -> f32 {
    if (isnan_(x0)) { return x0; }
    var x = abs(x0);
    var y = 0.0;
    if (x > 2.414213562373095) { y = 1.5707963267948966; x = -1.0 / x; }
    else if (x > 0.4142135623730950) { y = 0.7853981633974483; x = (x - 1.0) / (x + 1.0); }
    let z = x * x;
    y = y + ((((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z
        - 3.33329491539e-1) * z * x + x);
    return select(y, -y, x0 < 0.0);
}""",
    "atan2_": """fn atan2_(y: f32, x: f32) -> f32 {
    if (isnan_(x) || isnan_(y)) { return x + y; }
    let ax = abs(x); let ay = abs(y);
    let xneg = (bitcast<u32>(x) & 0x80000000u) != 0u;
    var r: f32;
    if (isinf_(ax) && isinf_(ay)) { r = select(0.7853981633974483, 2.356194490192345, xneg); }
    else if (isinf_(ax)) { r = select(0.0, 3.141592653589793, xneg); }
    else if (isinf_(ay) || ax == 0.0 && ay != 0.0) { r = 1.5707963267948966; }
    else if (ay == 0.0) { r = select(0.0, 3.141592653589793, xneg); }
    else {
        let a = atan_(ay / ax);
        r = select(a, 3.141592653589793 - a, xneg);
    }
    return select(r, -r, (bitcast<u32>(y) & 0x80000000u) != 0u);
}""",
    "asin_": """fn asin_(x: f32) -> f32 {
    return atan2_(x, sqrt((1.0 - x) * (1.0 + x)));
}""",
    "acos_": """fn acos_(x: f32) -> f32 {
    return 2.0 * atan2_(sqrt(1.0 - x), sqrt(1.0 + x));
}""",
    # erf: its Taylor series near 0, 1 - erfc beyond
    "erf_": """fn erf_(x: f32) -> f32 {
    let a = abs(x);
    if (a < 0.5) {
        let z = x * x;
        let t = 1.1283791670955126 + z * (-0.37612638903183754 + z * (0.11283791670955126
            + z * (-0.026866170645131252 + z * (0.005223977625442188
            + z * -0.0008548327023450852))));
        return x * t;
    }
    if (a > 4.0) { return sign(x); }
    // erfc by Numerical Recipes' Chebyshev fit (relative error below 1.2e-7)
    let t = 1.0 / (1.0 + 0.5 * a);
    let y = t * exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
        + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
        + t * (-0.82215223 + t * 0.17087277)))))))));
    return sign(x) * (1.0 - y);
}""",
    # C's pow: negative bases with integer exponents, pow(x, 0) = pow(1, y) = 1
    "pow_": """fn pow_(a: f32, b: f32) -> f32 {
    if (b == 0.0 || a == 1.0) { return 1.0; }
    if (isnan_(a) || isnan_(b)) { return a + b; }
    let ab = abs(a);
    let bi = trunc(b) == b;
    let odd = bi && abs(b) < 16777216.0 && (i32(abs(b)) & 1) == 1;
    if (isinf_(b)) {
        if (ab == 1.0) { return 1.0; }
        if ((ab > 1.0) == (b > 0.0)) { return bitcast<f32>(0x7f800000u); }
        return 0.0;
    }
    var r: f32;
    if (ab == 0.0) {
        r = select(0.0, bitcast<f32>(0x7f800000u), b < 0.0);
    } else if (isinf_(ab)) {
        r = select(0.0, bitcast<f32>(0x7f800000u), b > 0.0);
    } else if (a < 0.0 && !bi) {
        return bitcast<f32>(0x7fc00000u);
    } else if (bi && abs(b) <= 64.0) {
        var e = u32(abs(b));
        var base = ab;
        r = 1.0;
        loop {
            if ((e & 1u) == 1u) { r = r * base; }
            e = e >> 1u;
            if (e == 0u) { break; }
            base = base * base;
        }
        if (b < 0.0) { r = 1.0 / r; }
    } else {
        r = exp2(b * log2(ab));
    }
    let neg = odd && (a < 0.0 || (a == 0.0 && (bitcast<u32>(a) & 0x80000000u) != 0u));
    return select(r, -r, neg);
}""",
}
_DEPENDS = {"log1p_": ("isinf_",), "pow_": ("isnan_", "isinf_"), "atan_": ("isnan_",),
            "atan2_": ("isnan_", "isinf_", "atan_"), "asin_": ("atan2_",),
            "acos_": ("atan2_",)}


def prelude(source: str) -> str:
    """The helper functions ``source`` calls (with what they call), to put before it."""
    names: list[str] = []

    def want(n: str) -> None:
        for d in _DEPENDS.get(n, ()):
            want(d)
        if n not in names:
            names.append(n)

    for n in HELPERS:
        if f"{n}(" in source and f"fn {n}(" not in source:
            want(n)
    names = [n for n in names if f"fn {n}(" not in source]
    return "\n".join(HELPERS[n] for n in names) + ("\n" if names else "")


def const(value: Any, dtype: str) -> str:
    """A WGSL literal of ``value`` as IR compute ``dtype`` (floats by their bits where a
    literal cannot say it: nan, infinities, negative zero)."""
    if dtype == "bool":
        return "true" if value else "false"
    t = WGSL_TYPES[dtype]
    if t == "f32":
        v = float(value)
        f = struct.unpack("<f", struct.pack("<f", v))[0] if math.isfinite(v) and abs(v) < 3.5e38 \
            else v
        if not math.isfinite(f) or abs(f) > 3.4028234663852886e38 or (f == 0 and
                                                                       math.copysign(1, f) < 0):
            bits = struct.unpack("<I", struct.pack("<f", f))[0] if math.isfinite(f) else (
                0x7FC00000 if math.isnan(f) else (0x7F800000 if f > 0 else 0xFF800000))
            return f"bitcast<f32>({bits:#x}u)"
        return f"f32({f!r})"
    v = int(value)
    if t == "i32":
        v = (v + (1 << 31)) % (1 << 32) - (1 << 31)
        return "i32(-2147483647 - 1)" if v == -(1 << 31) else f"{v}i"
    if t == "i64":
        v = (v + (1 << 63)) % (1 << 64) - (1 << 63)
        return "(-9223372036854775807li - 1li)" if v == -(1 << 63) else f"{v}li"
    if t == "u64":
        return f"{v % (1 << 64)}lu"
    return f"{v % (1 << 32)}u"


def _zero(dtype: str) -> str:
    return const(0, dtype)


def _cast(x: str, src: str, dst: str) -> str:
    if dst == "bool":
        return f"(!({x} == {_zero(src)}))" if ir.is_float(src) else f"({x} != {_zero(src)})"
    t = WGSL_TYPES[dst]
    if src == "bool":
        return f"select({_zero(dst)}, {const(1, dst)}, {x})"
    if dst in _WRAP:
        if ir.is_float(src) and t == "u32":  # through a signed integer, as numpy: wraps
            return wrap(f"u32(i32({x}))", dst)
        return wrap(f"{t}({x})", dst)
    return f"{t}({x})"


class Rendered:
    """WGSL of an IR body: ``lines`` (``let`` statements) and the expression of the root."""

    def __init__(self, lines: list[str], expr: str) -> None:
        self.lines, self.expr = lines, expr


class _WGSL(CodeTable):
    INFIX = _INFIX
    CALL = _CALL
    WHERE = "select({2}, {1}, {0})"
    NOT = "(!{0})"

    def const(self, value: Any, dtype: str) -> str:
        return const(value, dtype)

    def cast(self, x: str, src: str, dst: str) -> str:
        return _cast(x, src, dst)

    def wrap(self, code: str, dtype: str) -> str:
        return wrap(code, dtype)

    def check(self, v: ir.Value) -> None:
        if v.dtype not in WGSL_TYPES:
            raise NotImplementedError(f"wgpu: the kernel IR's {v.dtype} has no WGSL type here")

    def special(self, v: ir.Value, args: list[str]) -> str | None:
        op = v.op
        if op in ("shl", "shr"):
            count = v.src[1]
            n = f"{count.arg % 64}u" if count.op == "const" else f"u32({args[1]})"
            return wrap(f"({args[0]} {_INFIX[op]} {n})", v.dtype)
        if op == "xor" and v.dtype == "bool":
            return f"({args[0]} != {args[1]})"
        if op == "imod" and WGSL_TYPES[v.dtype] in ("i32", "i64"):
            # not WGSL's ``%``: naga emits SPIR-V's OpSRem, whose result Vulkan leaves
            # undefined for a negative operand (NVIDIA's driver gives the unsigned remainder);
            # OpSDiv is defined, and the IR never divides by 0 or MIN by -1
            a, b = args
            return wrap(f"({a} - {b} * ({a} / {b}))", v.dtype)
        if op == "ne" and ir.is_float(v.src[0].dtype):  # unordered: true for nan
            return f"(!({args[0]} == {args[1]}))"
        return None


_TABLE = _WGSL()


def render(root: ir.Value, names: Sequence[str], prefix: str = "t") -> Rendered:
    """WGSL for ``root`` over inputs named ``names`` (scalars ``s0, s1, ...``): one ``let`` per
    node used more than once, the rest inlined into the expression."""
    lines, expr = ir.spell(root, lambda v, args: _TABLE.expr(v, args, names),
                           lambda v, name, text: f"let {name} = {text};", prefix, longest=200)
    return Rendered(lines, expr)
