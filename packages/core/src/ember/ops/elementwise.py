"""Elementwise primitives.  Binary ops broadcast; core has already promoted both inputs to one
dtype, and cast integer inputs of float-only ops (``exp``, ``div``) to the default float."""

from ._op import Op

# float-valued functions: inputs are always floating point when they reach a kernel
FLOAT_UNARY = (
    "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "asin", "acos",
    "atan", "sinh", "cosh", "erf", "sigmoid", "reciprocal",
)
# functions defined on every numeric dtype, keeping it
NUMERIC_UNARY = ("neg", "abs", "sign", "floor", "ceil", "round", "trunc")
# predicates: any dtype in, bool out
BOOL_UNARY = ("logical_not", "isnan", "isinf")

ARITHMETIC_BINARY = ("add", "sub", "mul", "floordiv", "remainder", "pow", "maximum", "minimum")
FLOAT_BINARY = ("div", "atan2")
COMPARISON_BINARY = ("eq", "ne", "lt", "le", "gt", "ge")
LOGICAL_BINARY = ("logical_and", "logical_or", "logical_xor")
BITWISE_BINARY = ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")

exp = Op("exp", "elementwise", 1, dtypes="float")
expm1 = Op("expm1", "elementwise", 1, dtypes="float")
log = Op("log", "elementwise", 1, dtypes="float")
log1p = Op("log1p", "elementwise", 1, dtypes="float")
sqrt = Op("sqrt", "elementwise", 1, dtypes="float")
rsqrt = Op("rsqrt", "elementwise", 1, dtypes="float")
sin = Op("sin", "elementwise", 1, dtypes="float")
cos = Op("cos", "elementwise", 1, dtypes="float")
tan = Op("tan", "elementwise", 1, dtypes="float")
tanh = Op("tanh", "elementwise", 1, dtypes="float")
asin = Op("asin", "elementwise", 1, dtypes="float")
acos = Op("acos", "elementwise", 1, dtypes="float")
atan = Op("atan", "elementwise", 1, dtypes="float")
sinh = Op("sinh", "elementwise", 1, dtypes="float")
cosh = Op("cosh", "elementwise", 1, dtypes="float")
erf = Op("erf", "elementwise", 1, dtypes="float")
sigmoid = Op("sigmoid", "elementwise", 1, dtypes="float")
reciprocal = Op("reciprocal", "elementwise", 1, dtypes="float")
neg = Op("neg", "elementwise", 1, dtypes="number")
abs = Op("abs", "elementwise", 1, dtypes="number")
sign = Op("sign", "elementwise", 1, dtypes="number")  # gradient 0
floor = Op("floor", "elementwise", 1, dtypes="number")  # gradient 0
ceil = Op("ceil", "elementwise", 1, dtypes="number")  # gradient 0
round = Op("round", "elementwise", 1, dtypes="number")  # gradient 0
trunc = Op("trunc", "elementwise", 1, dtypes="number")  # gradient 0
logical_not = Op("logical_not", "elementwise", 1, result="bool", differentiable=False)
isnan = Op("isnan", "elementwise", 1, result="bool", differentiable=False)
isinf = Op("isinf", "elementwise", 1, result="bool", differentiable=False)
bitwise_not = Op("bitwise_not", "elementwise", 1, dtypes="int", differentiable=False)
add = Op("add", "elementwise", 2, dtypes="number")
sub = Op("sub", "elementwise", 2, dtypes="number")
mul = Op("mul", "elementwise", 2, dtypes="number")
floordiv = Op("floordiv", "elementwise", 2, dtypes="number")  # gradient 0
remainder = Op("remainder", "elementwise", 2, dtypes="number")
pow = Op("pow", "elementwise", 2, dtypes="number")
maximum = Op("maximum", "elementwise", 2, dtypes="number")
minimum = Op("minimum", "elementwise", 2, dtypes="number")
div = Op("div", "elementwise", 2, dtypes="float")
atan2 = Op("atan2", "elementwise", 2, dtypes="float")
eq = Op("eq", "elementwise", 2, result="bool", differentiable=False)
ne = Op("ne", "elementwise", 2, result="bool", differentiable=False)
lt = Op("lt", "elementwise", 2, result="bool", differentiable=False)
le = Op("le", "elementwise", 2, result="bool", differentiable=False)
gt = Op("gt", "elementwise", 2, result="bool", differentiable=False)
ge = Op("ge", "elementwise", 2, result="bool", differentiable=False)
logical_and = Op("logical_and", "elementwise", 2, result="bool", differentiable=False)
logical_or = Op("logical_or", "elementwise", 2, result="bool", differentiable=False)
logical_xor = Op("logical_xor", "elementwise", 2, result="bool", differentiable=False)
bitwise_and = Op("bitwise_and", "elementwise", 2, dtypes="int", differentiable=False)
bitwise_or = Op("bitwise_or", "elementwise", 2, dtypes="int", differentiable=False)
bitwise_xor = Op("bitwise_xor", "elementwise", 2, dtypes="int", differentiable=False)
left_shift = Op("left_shift", "elementwise", 2, dtypes="int", differentiable=False)
right_shift = Op("right_shift", "elementwise", 2, dtypes="int", differentiable=False)

# ops known only from their kernel IR definition (`ember.backend.ir`): no backend has a kernel
# of its own for them, each renders the definition
asinh = Op("asinh", "elementwise", 1, dtypes="float")
acosh = Op("acosh", "elementwise", 1, dtypes="float")
atanh = Op("atanh", "elementwise", 1, dtypes="float")
copysign = Op("copysign", "elementwise", 2, dtypes="float")

#: ``where(cond, a, b)``: cond is bool; a and b share a dtype; all three broadcast.
where = Op("where", "elementwise", 3, result="last")
#: ``clamp(x, min=, max=)`` with Python-scalar bounds; either may be None.
clamp = Op("clamp", "elementwise", 1, ("min", "max"), dtypes="number")
