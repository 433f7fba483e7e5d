"""Linear algebra."""

from ._op import Op

#: ``matmul(a, b)``: both at least 2-D; batch axes broadcast (core handles 1-D operands).
matmul = Op("matmul", "linalg", 2, dtypes="number")
