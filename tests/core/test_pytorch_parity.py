"""einsum, cdist, norms, padding modes, windows, unique, bincount, ...: values and gradients
against PyTorch on the CPU (float64), and the errors bad input gets."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ember
import ember.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RNG = np.random.default_rng(20261)


def _close(got: Any, want: Any, what: str) -> None:
    np.testing.assert_allclose(np.asarray(got.numpy(), dtype=np.float64),
                               want.detach().numpy().astype(np.float64), rtol=1e-7,
                               atol=1e-10, err_msg=what)


def check(what: str, efn: Callable[..., Any], tfn: Callable[..., Any],
          *arrays: np.ndarray) -> None:
    """``efn`` on ``autodiff<cpu>`` against ``tfn`` in torch: the value and the gradient of
    ``sum(out * cotangent)`` for every float input."""
    dev = ember.device("autodiff<cpu>")
    floats = [a.dtype.kind == "f" for a in arrays]
    es = [ember.tensor(a, device=dev, requires_grad=f) for a, f in zip(arrays, floats,
                                                                         strict=True)]
    ts = [torch.tensor(a, requires_grad=f) for a, f in zip(arrays, floats, strict=True)]
    eo, to = efn(*es), tfn(*ts)
    _close(eo, to, what)
    if not eo.requires_grad:  # vector_norm(ord=0) counts: torch's gradient is all zeros
        to.sum().backward()
        assert all(not t.grad.any() for t in ts if t.grad is not None), what
        return
    cot = RNG.standard_normal(tuple(to.shape))
    grads = (eo * ember.tensor(cot, device=dev)).sum().backward()
    (to * torch.tensor(cot)).sum().backward()
    for i, (e, t) in enumerate(zip(es, ts, strict=True)):
        if floats[i]:
            _close(grads[e], t.grad, f"{what}: gradient of input {i}")


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


@pytest.mark.parametrize(("equation", "shapes"), [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]),
    ("...ij,...jk->ik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("iji->j", [(3, 2, 3)]),
    ("bij->", [(2, 3, 4)]),
    ("bij->jib", [(2, 3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(5,), (3,)]),
    ("bij,bjk,k->bi", [(2, 3, 4), (2, 4, 5), (5,)]),
    ("ij,jk", [(2, 1), (3, 5)]),
    ("b...,...->b...", [(2, 3, 4), (3, 4)]),
    ("Ab,bC->CA", [(2, 3), (3, 4)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
])
def test_einsum_matches_torch_with_gradients(equation: str, shapes: list[tuple[int, ...]]) -> None:
    arrays = [randn(*s) for s in shapes]
    check(equation, lambda *t: ember.einsum(equation, *t),
          lambda *t: torch.einsum(equation, *t), *arrays)


def test_einsum_sublist_form_and_list_of_operands() -> None:
    a, b = randn(2, 3, 4), randn(2, 4, 5)
    want = torch.einsum(torch.tensor(a), [0, 1, 2], torch.tensor(b), [0, 2, 3], [0, 1, 3])
    got = ember.einsum(ember.tensor(a), [0, 1, 2], ember.tensor(b), [0, 2, 3], [0, 1, 3])
    _close(got, want, "sublist")
    _close(ember.einsum("bij,bjk", [ember.tensor(a), ember.tensor(b)]),
           torch.einsum("bij,bjk", torch.tensor(a), torch.tensor(b)), "list of operands")


def test_einsum_of_int32_stays_int32() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = ember.einsum("ij,kj->ik", ember.tensor(a), ember.tensor(a))
    assert got.dtype is ember.int32
    np.testing.assert_array_equal(got.numpy(), a @ a.T)


@pytest.mark.parametrize("p", [2.0, 1.0, math.inf, 3.0, 0.5])
def test_cdist_matches_torch_including_zero_distances(p: float) -> None:
    x1 = randn(2, 4, 3)
    x2 = np.concatenate([x1[:, :2], randn(2, 3, 3)], axis=1)  # two zero distances
    check(f"cdist p={p}", lambda a, b: ember.cdist(a, b, p=p),
          lambda a, b: torch.cdist(a, b, p=p), x1, x2)


def test_cdist_past_25_rows_uses_the_matmul_form_as_torch() -> None:
    check("cdist mm", ember.cdist, torch.cdist, randn(30, 3), randn(7, 3))


@pytest.mark.parametrize("ord", [2, 1, math.inf, -math.inf, 0, 3, 0.5])
def test_vector_norm_matches_torch(ord: float) -> None:
    x = randn(3, 4)
    x[1] = 0.0  # a zero row: the gradient is 0 there, not nan
    dim = (0, 1) if ord == 3 else -1
    if ord in (-math.inf, 0.5):
        x[1] = 1.0  # min |x| and |x| ** 0.5 are not differentiable at 0
    check(f"vector_norm {ord}", lambda t: ember.linalg.vector_norm(t, ord, dim, keepdim=True),
          lambda t: torch.linalg.vector_norm(t, ord, dim, keepdim=True), x)


def test_vector_norm_dtype_argument_casts_first() -> None:
    x = ember.tensor([3.0, 4.0], dtype=ember.float16)
    out = ember.linalg.vector_norm(x, dtype=ember.float32)
    assert out.dtype is ember.float32 and out.item() == 5.0


@pytest.mark.parametrize(("p", "dim"), [(2.0, 1), (1.0, 0), (3.0, -1)])
def test_normalize_matches_torch(p: float, dim: int) -> None:
    x = randn(3, 4)
    check("normalize", lambda t: F.normalize(t, p, dim), lambda t: TF.normalize(t, p, dim), x)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(1, 2), (2, 1, 1, 3), (-1, 2, 3, 0), (1, 1, 2, 0, 1, 1)])
def test_pad_modes_match_torch(mode: str, pad: tuple[int, ...]) -> None:
    # torch pads 2k values only on inputs of k+1 or k+2 axes in these modes
    x = randn(*(2, 3, 4, 5, 6)[5 - (len(pad) // 2 + 2):])
    check(f"pad {mode} {pad}", lambda t: F.pad(t, pad, mode=mode),
          lambda t: TF.pad(t, pad, mode=mode), x)


@pytest.mark.parametrize("kw", [
    {"kernel_size": 2},
    {"kernel_size": (2, 3), "dilation": (2, 1), "padding": 1, "stride": (1, 2)},
    {"kernel_size": 3, "padding": (0, 1), "stride": 2},
])
def test_im2col_unfold_matches_torch(kw: dict[str, Any]) -> None:
    x = randn(2, 3, 5, 6)
    check(f"unfold {kw}", lambda t: F.unfold(t, **kw), lambda t: TF.unfold(t, **kw), x)
    check(f"nn.Unfold {kw} unbatched", lambda t: ember.nn.Unfold(**kw)(t),
          lambda t: torch.nn.Unfold(**kw)(t), x[0])


@pytest.mark.parametrize(("dim", "size", "step"), [(1, 2, 1), (0, 2, 2), (-1, 4, 3), (1, 7, 1)])
def test_tensor_unfold_matches_torch(dim: int, size: int, step: int) -> None:
    check("Tensor.unfold", lambda t: t.unfold(dim, size, step),
          lambda t: t.unfold(dim, size, step), randn(3, 7, 4))


def test_diff_matches_torch() -> None:
    x = randn(3, 5)
    check("diff", lambda t: t.diff(), lambda t: t.diff(), x)
    check("diff n=2 dim=0 prepend append", lambda t, p, a: ember.diff(t, 2, 0, p, a),
          lambda t, p, a: torch.diff(t, 2, 0, p, a), x, randn(1, 5), randn(2, 5))
    check("diff n larger than the axis", lambda t: ember.diff(t, 7), lambda t: torch.diff(t, n=7),
          x)
    b = np.array([True, False, False, True])
    assert ember.diff(ember.tensor(b)).tolist() == torch.diff(torch.tensor(b)).tolist()


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_matches_torch(indexing: str) -> None:
    arrays = [randn(2), randn(3), randn(4)]
    got = ember.meshgrid(*[ember.tensor(a) for a in arrays], indexing=indexing)
    want = torch.meshgrid(*[torch.tensor(a) for a in arrays], indexing=indexing)
    for g, w in zip(got, want, strict=True):
        _close(g, w, f"meshgrid {indexing}")
    check("meshgrid product", lambda a, b: ember.meshgrid([a, b], indexing=indexing)[0]
          * ember.meshgrid([a, b], indexing=indexing)[1],
          lambda a, b: torch.meshgrid(a, b, indexing=indexing)[0]
          * torch.meshgrid(a, b, indexing=indexing)[1], arrays[0], arrays[1])


def test_repeat_interleave_matches_torch() -> None:
    x = randn(3, 2)
    check("int", lambda t: ember.repeat_interleave(t, 2), lambda t: t.repeat_interleave(2), x)
    check("int dim", lambda t: t.repeat_interleave(3, dim=1),
          lambda t: t.repeat_interleave(3, dim=1), x)
    for reps in ([1, 0, 3], [0, 2, 0], [0, 0, 0]):
        check(f"tensor {reps}",
              lambda t, r=reps: t.repeat_interleave(ember.tensor(r, device=t.device), dim=0),
              lambda t, r=reps: t.repeat_interleave(torch.tensor(r), dim=0), x)
    r = [2, 0, 3]
    assert ember.repeat_interleave(ember.tensor(r)).tolist() == \
        torch.repeat_interleave(torch.tensor(r)).tolist()


@pytest.mark.parametrize("values", [[3, 1, 2, 3, 1, 5, 5, 5], [], [7],
                                    [2.5, float("nan"), 1.0, 2.5, float("nan")]])
def test_unique_matches_torch(values: list[float]) -> None:
    want = torch.unique(torch.tensor(values), return_inverse=True, return_counts=True)
    got = ember.unique(ember.tensor(values), return_inverse=True, return_counts=True)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    x = ember.tensor([[2, 1], [1, 2]])
    assert x.unique().tolist() == [1, 2]
    assert x.unique(return_inverse=True)[1].tolist() == [[1, 0], [0, 1]]


def test_bincount_matches_torch() -> None:
    v = [1, 2, 2, 5, 0]
    assert ember.bincount(ember.tensor(v)).tolist() == torch.bincount(torch.tensor(v)).tolist()
    assert ember.tensor([], dtype=ember.int64).bincount(minlength=3).tolist() == [0, 0, 0]
    w = randn(5)
    for weights in (w, w.astype(np.float32), np.arange(5, dtype=np.int32)):
        got = ember.bincount(ember.tensor(v), ember.tensor(weights), minlength=8)
        want = torch.bincount(torch.tensor(v), torch.tensor(weights), minlength=8)
        assert got.dtype.name == str(want.dtype).removeprefix("torch.")
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_allclose_and_isclose_match_torch() -> None:
    a = [1.0, 1.0, math.inf, -math.inf, math.nan, 0.0, 1e-9]
    b = [1.0 + 1e-7, 1.1, math.inf, math.inf, math.nan, 1e-9, 0.0]
    for nan in (False, True):
        got = ember.isclose(ember.tensor(a), ember.tensor(b), equal_nan=nan).tolist()
        assert got == torch.isclose(torch.tensor(a), torch.tensor(b), equal_nan=nan).tolist()
    x = ember.tensor([1.0, 2.0])
    assert x.allclose(x + 1e-9) is True and ember.allclose(x, x + 1e-3) is False


def test_bmm_matches_torch_and_names_shapes() -> None:
    check("bmm", lambda a, b: a.bmm(b), torch.bmm, randn(2, 3, 4), randn(2, 4, 5))
    with pytest.raises(ember.ShapeError, match=r"bmm.*\(2, 3, 4\).*\(3, 4, 5\)"):
        ember.bmm(ember.ones(2, 3, 4), ember.ones(3, 4, 5))


@pytest.mark.parametrize(("call", "exc", "needle"), [
    (lambda: ember.einsum("ij,jk", ember.ones(2, 3, 3), ember.ones(3, 2)), ember.ShapeError,
     r"operand 0 has subscripts 'ij' for 2 axes but its shape is \(2, 3, 3\)"),
    (lambda: ember.einsum("ij,jk", ember.ones(2, 3), ember.ones(4, 5)), ember.ShapeError,
     r"subscript j has size 4 in operand 1 \(4, 5\).*size 3"),
    (lambda: ember.einsum("ii", ember.ones(2, 3)), ember.ShapeError,
     r"subscript i is repeated in operand 0 \(2, 3\)"),
    (lambda: ember.einsum("i$", ember.ones(2, 3)), ValueError, r"invalid subscript '\$'"),
    (lambda: ember.einsum("ij->ii", ember.ones(2, 3)), ValueError, r"output subscript i appears "
     "twice"),
    (lambda: F.pad(ember.ones(1, 1, 3), (3, 3), mode="reflect"), ember.ShapeError,
     r"reflect padding \(3, 3\) must be smaller than the input size 3 at dimension 2"),
    (lambda: F.pad(ember.ones(1, 1, 3), (1, 1), mode="reflect", value=1.0), ValueError,
     "takes no value"),
    (lambda: ember.bincount(ember.tensor([1, -3])), ValueError, "negative values.*-3"),
    (lambda: ember.bincount(ember.tensor([1.0, 2.0])), ember.DTypeError, "float32"),
    (lambda: ember.cdist(ember.ones(2, 3), ember.ones(2, 4)), ember.ShapeError,
     r"\(2, 3\) and \(2, 4\)"),
    (lambda: ember.cdist(ember.ones(2, 3), ember.ones(2, 3), p=-1), ValueError, "non-negative"),
    (lambda: ember.linalg.vector_norm(ember.tensor([1, 2])), ember.DTypeError, "int64"),
    (lambda: ember.ones(5).unfold(0, 6, 1), ember.ShapeError, "maximum size .* is 5"),
    (lambda: ember.ones(5).unfold(0, 2, 0), ValueError, "step must be positive"),
    (lambda: F.unfold(ember.ones(1, 1, 3, 3), 4), ember.ShapeError, r"smaller than the kernel"),
    (lambda: F.unfold(ember.ones(3, 3), 2), ember.ShapeError, r"3-D or 4-D.*\(3, 3\)"),
    (lambda: ember.meshgrid(ember.ones(2, 2)), ember.ShapeError, r"0-d or 1-D.*\(2, 2\)"),
    (lambda: ember.meshgrid(ember.ones(2), indexing="ji"), ValueError, "'ij' or 'xy'"),
    (lambda: ember.repeat_interleave(ember.ones(3), ember.tensor([1, -1, 1])), ValueError,
     "non-negative"),
    (lambda: ember.diff(ember.tensor(1.0)), ember.ShapeError, "0-d"),
    (lambda: ember.unique(ember.ones(3), dim=2), IndexError, "dim 2 is out of range"),
])
def test_bad_input_is_an_error_naming_the_op_and_values(call: Callable[[], Any],
                                                        exc: type[Exception],
                                                        needle: str) -> None:
    with pytest.raises(exc, match=needle):
        call()
