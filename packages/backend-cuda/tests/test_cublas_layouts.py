"""cuBLAS's and cuBLASLt's reading of ember's row-major operands (`ember_cuda.cublas`,
`ember_cuda.cublaslt`), checked with numpy: no GPU needed."""

from __future__ import annotations

import numpy as np
import pytest

from ember_cuda.cublas import gemm_layout
from ember_cuda.cublaslt import alignment, lt_layouts


@pytest.mark.parametrize(("shape", "strides", "want"), [
    ((4, 6), (6, 1), (0, 6)),      # row-major: not transposed, ld = row stride
    ((4, 6), (8, 1), (0, 8)),      # rows of a wider matrix (a slice)
    ((4, 6), (1, 4), (1, 4)),      # a transposed view: transposed, ld = column stride
    ((1, 6), (1, 1), (1, 1)),      # a single row: either reading is exact
    ((6, 1), (1, 1), (0, 1)),
    ((4, 6), (12, 2), None),       # no unit stride: not a cuBLAS operand
])
def test_gemm_layout_reads_row_major_strides(shape: tuple[int, int], strides: tuple[int, int],
                                             want: tuple[int, int] | None) -> None:
    assert gemm_layout(*shape, *strides) == want


def _column_major(flat: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    """The column-major ``rows x cols`` matrix with leading dimension ``ld`` over ``flat``."""
    return np.lib.stride_tricks.as_strided(flat, (rows, cols),
                                           (flat.itemsize, ld * flat.itemsize))


@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("pad", [0, 3])
def test_cublaslt_reads_row_major_operands_as_the_transposed_product(layout: str,
                                                                     pad: int) -> None:
    """`lt_layouts` hands cuBLASLt our B as its A and our A as its B; cuBLASLt's column-major
    ``D = op(A) @ op(B)`` over the same memory (emulated with numpy) is ``(a @ b)^T``."""
    rng = np.random.default_rng(5)
    m, n, k = 7, 5, 6
    a = rng.uniform(-1, 1, (m, k))
    b = rng.uniform(-1, 1, (k, n))

    def stored(x: np.ndarray, transposed: bool) -> tuple[np.ndarray, tuple[int, int]]:
        """``x`` in a flat buffer, row-major (padded rows) or as a transposed view."""
        rows, cols = x.shape
        if transposed:  # memory holds x.T row-major: x's columns are contiguous
            buf = np.zeros((cols, rows + pad))
            buf[:, :rows] = x.T
            return buf.ravel(), (1, rows + pad)
        buf = np.zeros((rows, cols + pad))
        buf[:, :cols] = x
        return buf.ravel(), (cols + pad, 1)

    fa, sa = stored(a, layout[0] == "t")
    fb, sb = stored(b, layout[1] == "t")
    la, lb = gemm_layout(m, k, *sa), gemm_layout(k, n, *sb)
    assert la is not None and lb is not None
    first, second, c = lt_layouts(m, n, k, la, lb)
    op1 = _column_major(fb, *first[1:])
    op2 = _column_major(fa, *second[1:])
    d = (op1.T if first[0] else op1) @ (op2.T if second[0] else op2)
    assert d.shape == c[:2] == (n, m)
    flat_c = np.zeros(c[2] * m)
    _column_major(flat_c, *c)[...] = d
    np.testing.assert_allclose(flat_c.reshape(m, n), a @ b, rtol=1e-12)  # row-major C


def test_cublaslt_alignment_is_the_weakest_operands() -> None:
    assert alignment(0x1000, 0x2300) == 256
    assert alignment(0x1000, 0x2310) == 16
    assert alignment(0x1000, 0x2308) == 0
