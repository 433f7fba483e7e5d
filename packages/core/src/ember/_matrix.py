"""Matrix and vector products and diagonals under PyTorch's names: ``mm``, ``mv``, ``dot``,
``vdot``, ``inner``, ``addmm``, ``addmv``, ``baddbmm``, ``addbmm``, ``kron``, ``cross``,
``trace``, ``diagonal``, ``diag``; composites of ``matmul``, products, reshapes and strided
slices, so they run and differentiate on every device."""

from __future__ import annotations

from . import _linalg as _la, _manipulation as _mv
from ._apply import Scalar, as_tensor_pair, broadcast_shapes, normalize_dim
from ._errors import ShapeError
from ._tensor import Tensor

__all__ = ["addbmm", "addmm", "addmv", "baddbmm", "cross", "diag", "diagonal", "dot", "inner",
           "kron", "mm", "mv", "trace", "vdot"]


def _need(name: str, t: Tensor, ndim: int, what: str) -> None:
    if t.ndim != ndim:
        raise ShapeError(f"{name}: {what} must be {ndim}-D, got shape {t.shape}")


def mm(a: Tensor, b: Tensor) -> Tensor:
    """The product of two matrices ``a[n, m] @ b[m, p]`` (no broadcasting, no 1-D operands)."""
    _need("mm", a, 2, "the first operand")
    _need("mm", b, 2, "the second operand")
    return _la.matmul(a, b)


def mv(a: Tensor, v: Tensor) -> Tensor:
    """The product of a matrix ``a[n, m]`` and a vector ``v[m]``."""
    _need("mv", a, 2, "the matrix")
    _need("mv", v, 1, "the vector")
    return _la.matmul(a, v)


def dot(a: Tensor, b: Tensor) -> Tensor:
    """The dot product of two 1-D tensors of one size (a 0-d tensor).

    Examples
    --------
    >>> import ember
    >>> ember.dot(ember.tensor([1.0, 2.0]), ember.tensor([3.0, 4.0])).item()
    11.0
    """
    _need("dot", a, 1, "the first operand")
    _need("dot", b, 1, "the second operand")
    if a.shape != b.shape:
        raise ShapeError(f"dot: the vectors have {a.shape[0]} and {b.shape[0]} elements")
    return _la.matmul(a, b)


vdot = dot  # Note: ember has no complex dtypes, so the conjugate is the vector itself


def inner(a: Tensor, b: Tensor) -> Tensor:
    """Sums of products over the last axis of each: ``[*a.shape[:-1], *b.shape[:-1]]``; a 0-d
    operand multiplies."""
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.shape[-1] != b.shape[-1]:
        raise ShapeError(f"inner: the last axes differ: {a.shape} and {b.shape}")
    k = a.shape[-1]
    out = _la.matmul(a.reshape(-1, k), b.reshape(-1, k).transpose(0, 1))
    return out.reshape(*a.shape[:-1], *b.shape[:-1])


def _scaled(x: Tensor, product: Tensor, beta: Scalar, alpha: Scalar) -> Tensor:
    """``beta * x + alpha * product``; ``x`` is ignored when ``beta`` is 0 (its nan and inf do
    not propagate), as PyTorch."""
    if alpha != 1:
        product = product * alpha
    if broadcast_shapes(x.shape, product.shape) != product.shape:
        raise ShapeError(f"the input of shape {x.shape} does not broadcast to the product's "
                         f"shape {product.shape}")
    if beta == 0:
        return product
    return (x if beta == 1 else x * beta) + product


def addmm(x: Tensor, m1: Tensor, m2: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1) -> Tensor:
    """``beta * x + alpha * (m1 @ m2)`` for matrices ``m1``, ``m2``; ``x`` broadcasts."""
    return _scaled(x, mm(m1, m2), beta, alpha)


def addmv(x: Tensor, mat: Tensor, vec: Tensor, *, beta: Scalar = 1,
          alpha: Scalar = 1) -> Tensor:
    """``beta * x + alpha * (mat @ vec)``."""
    return _scaled(x, mv(mat, vec), beta, alpha)


def baddbmm(x: Tensor, b1: Tensor, b2: Tensor, *, beta: Scalar = 1,
            alpha: Scalar = 1) -> Tensor:
    """``beta * x + alpha * bmm(b1, b2)``."""
    return _scaled(x, _la.bmm(b1, b2), beta, alpha)


def addbmm(x: Tensor, b1: Tensor, b2: Tensor, *, beta: Scalar = 1,
           alpha: Scalar = 1) -> Tensor:
    """``beta * x + alpha * sum(bmm(b1, b2), 0)``."""
    return _scaled(x, _la.bmm(b1, b2).sum(0), beta, alpha)


def kron(a: Tensor, b: Tensor) -> Tensor:
    """The Kronecker product: ``out[i * b.shape[k] + j] = a[i] * b[j]`` along each axis (the
    operand of fewer axes gets leading axes of size 1)."""
    n = max(a.ndim, b.ndim)
    sa = (1,) * (n - a.ndim) + a.shape
    sb = (1,) * (n - b.ndim) + b.shape
    x = a.reshape(*[s for d in sa for s in (d, 1)])
    y = b.reshape(*[s for d in sb for s in (1, d)])
    return (x * y).reshape(*[p * q for p, q in zip(sa, sb, strict=True)])


def cross(a: Tensor, b: Tensor, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along ``dim``; the operands broadcast.  Without ``dim``,
    the first axis of size 3 (as ``torch.cross``; ``torch.linalg.cross`` takes the last).

    Examples
    --------
    >>> import ember
    >>> ember.cross(ember.tensor([1.0, 0.0, 0.0]), ember.tensor([0.0, 1.0, 0.0])).tolist()
    [0.0, 0.0, 1.0]
    """
    x, y = as_tensor_pair(a, b)
    shape = broadcast_shapes(x.shape, y.shape)
    if dim is None:
        sizes3 = [i for i, s in enumerate(shape) if s == 3]
        if not sizes3:
            raise ShapeError(f"cross: no axis of size 3 in the shape {shape}")
        d = sizes3[0]
    else:
        d = normalize_dim(dim, len(shape))
    if shape[d] != 3:
        raise ShapeError(f"cross: axis {d} must have size 3, the shape is {shape}")
    x, y = x.expand(*shape), y.expand(*shape)
    x0, x1, x2 = (x.narrow(d, i, 1) for i in range(3))
    y0, y1, y2 = (y.narrow(d, i, 1) for i in range(3))
    return _mv.cat([x1 * y2 - x2 * y1, x2 * y0 - x0 * y2, x0 * y1 - x1 * y0], d)


def diagonal(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the matrices in axes ``dim1``, ``dim2`` (above it for ``offset > 0``,
    below for ``offset < 0``), as the last axis of the result.

    Examples
    --------
    >>> import ember
    >>> ember.diagonal(ember.arange(9).reshape(3, 3), 1).tolist()
    [1, 5]
    """
    if x.ndim < 2:
        raise ShapeError(f"diagonal: expected a tensor of at least 2 dimensions, got {x.shape}")
    d1, d2 = normalize_dim(dim1, x.ndim, name="dim1"), normalize_dim(dim2, x.ndim, name="dim2")
    if d1 == d2:
        raise ValueError(f"diagonal: dim1 and dim2 are both axis {d1}")
    m = _mv.movedim(x, (d1, d2), (-2, -1))
    rows, cols = m.shape[-2:]
    if offset >= 0:
        length, start = max(0, min(rows, cols - offset)), offset
    else:
        length, start = max(0, min(rows + offset, cols)), -offset * cols
    flat = m.reshape(*m.shape[:-2], rows * cols)
    if length == 0:
        return flat[..., 0:0]
    return flat[..., start:start + (length - 1) * (cols + 1) + 1:cols + 1]


def diag(x: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D ``x`` as the ``diagonal``-th diagonal of a square matrix (zeros elsewhere); a 2-D
    ``x``'s ``diagonal``-th diagonal.

    Examples
    --------
    >>> import ember
    >>> ember.diag(ember.tensor([1, 2]), 1).tolist()
    [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    """
    if x.ndim == 2:
        return _diagonal(x, diagonal)
    if x.ndim != 1:
        raise ShapeError(f"diag: expected a 1-D or 2-D tensor, got shape {x.shape}")
    n = x.shape[0]
    from ._creation import zeros

    # each value followed by n zeros, cut to n * n: the values land on the main diagonal
    rows = _mv.cat([x.reshape(n, 1), zeros(n, n, dtype=x._dtype, device=x._device)], 1)
    square = rows.reshape(n * (n + 1))[:n * n].reshape(n, n)
    k = abs(diagonal)
    if k == 0:
        return square
    pad = (k, 0, 0, k) if diagonal > 0 else (0, k, k, 0)
    return _mv.pad(square, pad)


_diagonal = diagonal  # diag's argument is named diagonal, as PyTorch's


def trace(x: Tensor) -> Tensor:
    """The sum of a matrix's main diagonal (integers sum in int64)."""
    _need("trace", x, 2, "the input")
    return diagonal(x).sum()
