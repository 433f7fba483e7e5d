"""Every differentiable primitive (and the main composites) against finite differences."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember
import ember.functional as F
import numpy as np
import pytest
from ember import ops

from ember_autodiff import RULES
from ember_autodiff.testing import check_grads

Case = tuple[str, Callable[..., Any], list[Any], dict[str, float]]
CASES: list[Case] = []
rng = np.random.default_rng(1234)


def case(name: str, fn: Callable[..., Any], *args: Any, **tol: float) -> None:
    CASES.append((name, fn, list(args), tol))


def n(*shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return rng.uniform(lo, hi, shape)


def away(*shape: int) -> np.ndarray:
    """Values with |x| in [0.3, 1.5]: away from kinks at 0."""
    return rng.uniform(0.3, 1.5, shape) * rng.choice([-1.0, 1.0], shape)


def pos(*shape: int) -> np.ndarray:
    return rng.uniform(0.3, 2.0, shape)


# -- elementwise unary: shapes (), (4,), (2,3), a non-contiguous view, a broadcast view -------

UNARY: dict[str, Callable[..., np.ndarray]] = {
    "exp": n, "expm1": n, "log": pos, "log1p": pos, "sqrt": pos, "rsqrt": pos, "sin": n,
    "cos": n, "tan": n, "tanh": n, "asin": lambda *s: n(*s, lo=-0.8, hi=0.8),
    "acos": lambda *s: n(*s, lo=-0.8, hi=0.8), "atan": n, "sinh": n, "cosh": n, "erf": n,
    "sigmoid": n, "reciprocal": away, "neg": n, "abs": away,
}
for name, gen in UNARY.items():
    fn = getattr(ember, name)
    case(f"{name}-scalar", fn, gen())
    case(f"{name}-vector", fn, gen(4))
    case(f"{name}-matrix", fn, gen(2, 3))
    case(f"{name}-transposed", lambda x, fn=fn: fn(x.mT), gen(3, 2))
    case(f"{name}-expanded", lambda x, fn=fn: fn(x.expand(3, 2)), gen(1, 2))

# -- elementwise binary: same shape, broadcasting both ways, a Python scalar, transposed ------

BINARY: dict[str, tuple[Callable[..., np.ndarray], Callable[..., np.ndarray], float]] = {
    "add": (n, n, 0.7), "sub": (n, n, 0.7), "mul": (n, n, 1.3), "div": (n, away, 1.7),
    "remainder": (lambda *s: n(*s, lo=0.1, hi=2.9), lambda *s: rng.uniform(1.05, 1.4, s), 1.3),
    "pow": (pos, n, 2.0), "maximum": (n, n, 0.1), "minimum": (n, n, 0.1),
    "atan2": (away, away, 0.6),
}
for name, (ga, gb, scalar) in BINARY.items():
    fn = getattr(ember, name)
    case(f"{name}-same", fn, ga(2, 3), gb(2, 3))
    case(f"{name}-broadcast-row", fn, ga(2, 3), gb(3))
    case(f"{name}-broadcast-outer", fn, ga(2, 1), gb(1, 3))
    case(f"{name}-scalar-rhs", lambda x, fn=fn, s=scalar: fn(x, s), ga(2, 3))
    case(f"{name}-scalar-tensor", fn, ga(), gb(2, 2))
    case(f"{name}-transposed", lambda x, y, fn=fn: fn(x.mT, y), ga(3, 2), gb(2, 3))

case("pow-scalar-base", lambda y: 2.0 ** y, n(3))
case("pow-square", lambda x: x ** 2, n(2, 3))
_TIED = n(3)
# at a tie central differences see half the slope on each side: the even split PyTorch uses
case("maximum-ties-split", ember.maximum, _TIED, _TIED.copy())
case("minimum-ties-split", ember.minimum, _TIED, _TIED.copy())
case("where", lambda c, x, y: ember.where(c > 0, x, y), n(2, 3), n(2, 3), n(2, 3))
case("where-broadcast", lambda c, x, y: ember.where(c > 0, x, y), n(2, 3), n(3), n(2, 1))
case("where-scalar", lambda c, x: ember.where(c > 0, x, 0.5), n(4), n(4))
case("clamp-min", lambda x: x.clamp(min=0.1), away(2, 3))
case("clamp-max", lambda x: x.clamp(max=-0.1), away(2, 3))
case("clamp-both", lambda x: x.clamp(-0.25, 0.25), rng.choice([-1.0, -0.1, 0.1, 1.0], (2, 3)))
case("clamp-tensor-bounds", lambda x, lo: x.clamp(min=lo), n(2, 3), n(3))
case("relu", F.relu, away(2, 3))
case("cast-roundtrip", lambda x: x.float().double() * 2.0, n(3), eps=1e-2, atol=1e-3)

# -- reductions -------------------------------------------------------------------------------

DIMS: list[tuple[Any, bool]] = [(None, False), (0, False), (1, True), ((0, 2), False),
                                (-1, True), ((1, 2), True)]
for name in ("sum", "mean", "prod", "amax", "amin", "var", "std"):
    for dim, keep in DIMS:
        gen = pos if name == "prod" else n
        case(f"{name}-dim{dim}-keep{keep}",
             lambda x, name=name, dim=dim, keep=keep: getattr(x, name)(dim, keep), gen(2, 3, 4))
case("sum-transposed", lambda x: x.mT.sum(0), n(3, 2))
case("prod-with-one-zero", lambda x: x.prod(1), np.array([[1.5, 0.0, 2.0], [0.5, 2.0, 3.0]]))
case("prod-with-two-zeros", lambda x: x.prod(1), np.array([[0.0, 0.0, 2.0], [1.0, 0.0, 0.5]]))
case("max-dim-values", lambda x: x.max(1).values, n(3, 4))
case("min-dim-values", lambda x: x.min(0, True).values, n(3, 4))
case("var-correction0", lambda x: x.var(1, correction=0), n(3, 4))
for name in ("cumsum", "cumprod"):
    for dim in (0, 1, -1):
        case(f"{name}-dim{dim}", lambda x, name=name, dim=dim: getattr(x, name)(dim), n(3, 4))
case("cumprod-with-zero", lambda x: x.cumprod(1), np.array([[1.5, 0.0, 2.0, 0.5],
                                                          [0.0, 2.0, 0.0, 3.0]]))
case("cumsum-vector", lambda x: x.cumsum(0), n(5))
case("logsumexp", lambda x: x.logsumexp(1), n(3, 4))
case("softmax", lambda x: x.softmax(-1), n(3, 4))
case("softmax-dim0", lambda x: x.softmax(0), n(3, 4))
case("log_softmax", lambda x: x.log_softmax(-1), n(3, 4))
case("norm", lambda x: x.norm(), n(3, 4))

# -- movement and indexing --------------------------------------------------------------------

case("reshape", lambda x: x.reshape(3, 2), n(2, 3))
case("reshape-flatten", lambda x: x.reshape(-1), n(2, 3, 2))
case("reshape-of-transposed", lambda x: x.mT.reshape(6), n(2, 3))
case("permute", lambda x: x.permute(2, 0, 1), n(2, 3, 4))
case("transpose", lambda x: x.transpose(0, 1), n(2, 3))
case("T", lambda x: x.T * 1.0, n(2, 3, 2))
case("expand", lambda x: x.expand(2, 3), n(1, 3))
case("expand-new-axes", lambda x: x.expand(2, 4, 3), n(3))
case("expand-middle", lambda x: x.expand(2, 3, 4), n(2, 1, 4))
case("slice-start", lambda x: x[1:], n(4, 3))
case("slice-step", lambda x: x[::2], n(5, 3))
case("slice-negative-step", lambda x: x[::-1], n(4, 3))
case("slice-2d-steps", lambda x: x[1:3, ::2], n(4, 5))
case("slice-negative-step-2", lambda x: x[:, 3:0:-2], n(2, 5))
case("index-int", lambda x: x[..., 0], n(2, 3))
case("index-int-row", lambda x: x[1], n(3, 2))
case("index-none", lambda x: x[None, :, 1:], n(2, 3))
case("advanced-index", lambda x: x[ember.tensor([0, 2, 0], device=x.device)], n(3, 2))
case("advanced-index-2d", lambda x: x[[0, 1], [2, 0]], n(2, 3))
case("boolean-mask", lambda x: x[x.detach() > 0], n(3, 3))
case("narrow", lambda x: x.narrow(1, 1, 2), n(2, 4))
case("pad-constant", lambda x: ember.pad(x, (1, 2)), n(2, 3))
case("pad-2d", lambda x: ember.pad(x, (1, 0, 2, 1), value=3.0), n(2, 3))
case("pad-negative-crops", lambda x: ember.pad(x, (-1, 1)), n(2, 4))
case("flip", lambda x: x.flip(0), n(3, 2))
case("flip-two", lambda x: x.flip((0, 1)), n(3, 2))
case("cat", lambda a, b: ember.cat([a, b], 0), n(2, 3), n(1, 3))
case("cat-dim1", lambda a, b, c: ember.cat([a, b, c], 1), n(2, 1), n(2, 3), n(2, 2))
case("cat-same-twice", lambda a: ember.cat([a, a * 2.0], -1), n(2, 2))
case("stack", lambda a, b: ember.stack([a, b], 1), n(2, 3), n(2, 3))
case("split", lambda x: x.split([1, 2], 1)[1] * x.split([1, 2], 1)[0], n(2, 3))
case("chunk", lambda x: x.chunk(2, 0)[0] + 1.0, n(4, 2))
case("roll", lambda x: x.roll(1, 1), n(2, 3))
case("repeat", lambda x: x.repeat(2, 3), n(2, 2))
case("squeeze-unsqueeze", lambda x: x.squeeze(1).unsqueeze(0), n(2, 1, 3))
_IDX = np.array([[0, 2, 1], [1, 1, 0]])
case("gather-dim0", lambda x, i: x.gather(0, i), n(3, 3), np.array([[0, 2, 1], [2, 2, 0]]))
case("gather-dim1", lambda x, i: x.gather(1, i), n(2, 4), _IDX)
case("gather-repeated", lambda x, i: x.gather(1, i), n(2, 3), np.array([[0, 0, 0], [2, 2, 1]]))
case("scatter_add", lambda x, i, s: x.scatter_add(1, i, s), n(2, 3), _IDX, n(2, 3))
case("scatter_add-dim0", lambda x, i, s: x.scatter_add(0, i, s), n(3, 3),
     np.array([[0, 2, 1], [0, 2, 2]]), n(2, 3))
case("scatter", lambda x, i, s: x.scatter(1, i, s), n(2, 3),
     np.array([[0, 2], [1, 0]]), n(2, 2))
case("scatter-scalar", lambda x, i: x.scatter(1, i, 0.5), n(2, 3), np.array([[0], [2]]))
case("index_select", lambda x, i: x.index_select(0, i), n(3, 2), np.array([2, 0, 2]))
case("index_select-dim1", lambda x, i: x.index_select(1, i), n(2, 4), np.array([3, 1]))
case("masked_fill", lambda x: x.masked_fill(x.detach() > 0, 2.0), n(3, 3))
case("masked_fill-broadcast", lambda x, m: x.masked_fill(m > 0, 0.0), n(2, 3), n(3))
case("tril", lambda x: x.tril(), n(3, 3))
case("triu-k1", lambda x: x.triu(1), n(3, 4))
case("tril-batched", lambda x: x.tril(-1), n(2, 3, 3))
case("contiguous", lambda x: x.mT.clone(), n(2, 3))
case("sort", lambda x: x.sort(-1).values, n(3, 4))
case("sort-descending-dim0", lambda x: x.sort(0, descending=True).values, n(3, 4))
case("sort-vector", lambda x: x.sort().values, n(6))
case("topk", lambda x: x.topk(2).values, n(3, 4))
case("topk-smallest-dim0", lambda x: x.topk(2, 0, largest=False).values, n(3, 4))
case("topk-vector", lambda x: x.topk(3).values, n(6))
case("setitem-slice", lambda x, v: _setitem(x, (slice(0, 2),), v), n(3, 2), n(2))
case("setitem-index", lambda x, v: _setitem(x, (1, slice(None)), v), n(3, 2), n(2))


def _setitem(x: Any, key: Any, v: Any) -> Any:
    y = x * 1.0
    y[key] = v * 3.0
    return y


# -- linear algebra ---------------------------------------------------------------------------

case("matmul", lambda a, b: a @ b, n(2, 3), n(3, 4))
case("matmul-batched", lambda a, b: a @ b, n(2, 2, 3), n(2, 3, 4))
case("matmul-broadcast-rhs", lambda a, b: a @ b, n(2, 2, 3), n(3, 4))
case("matmul-broadcast-both", lambda a, b: a @ b, n(1, 2, 3), n(3, 1, 3, 2))
case("matmul-vector-matrix", lambda a, b: a @ b, n(3), n(3, 4))
case("matmul-matrix-vector", lambda a, b: a @ b, n(2, 3), n(3))
case("matmul-transposed", lambda a, b: a.mT @ b.mT, n(3, 2), n(4, 3))
case("matmul-same-operand", lambda a: a @ a, n(3, 3))
case("outer", lambda a, b: ember.outer(a, b), n(3), n(2))
case("linear", lambda x, w, b: F.linear(x, w, b), n(4, 3), n(2, 3), n(2))

# -- nn ---------------------------------------------------------------------------------------

CONV2D = [dict(), dict(stride=2), dict(padding=1), dict(dilation=2), dict(groups=2),
          dict(stride=2, padding=1, dilation=1, groups=2), dict(stride=(2, 1), padding=(0, 2)),
          dict(stride=3, padding=2, dilation=2)]
for i, cfg in enumerate(CONV2D):
    case(f"conv2d-{i}-{cfg}", lambda x, w, cfg=cfg: F.conv2d(x, w, **cfg),
         n(2, 2, 5, 5), n(4, 2 // cfg.get("groups", 1), 3, 3))
case("conv2d-bias", lambda x, w, b: F.conv2d(x, w, b, padding=1), n(1, 2, 4, 4), n(3, 2, 3, 3),
     n(3))
case("conv2d-kernel-2x1", lambda x, w: F.conv2d(x, w, stride=2), n(1, 1, 5, 4), n(2, 1, 2, 1))
CONV1D = [dict(), dict(stride=2, padding=1), dict(dilation=2), dict(groups=2, padding=2)]
for i, cfg in enumerate(CONV1D):
    case(f"conv1d-{i}-{cfg}", lambda x, w, cfg=cfg: F.conv1d(x, w, **cfg),
         n(2, 2, 7), n(4, 2 // cfg.get("groups", 1), 3))
CONVT2D = [dict(), dict(stride=2), dict(stride=2, padding=1, output_padding=1), dict(dilation=2),
           dict(groups=2), dict(stride=2, padding=1, groups=2, dilation=2)]
for i, cfg in enumerate(CONVT2D):
    g = cfg.get("groups", 1)
    case(f"conv_transpose2d-{i}-{cfg}", lambda x, w, cfg=cfg: F.conv_transpose2d(x, w, **cfg),
         n(1, 2, 3, 3), n(2, 4 // g, 3, 3))
CONVT1D = [dict(), dict(stride=3, padding=1, output_padding=2), dict(groups=2, dilation=2)]
for i, cfg in enumerate(CONVT1D):
    g = cfg.get("groups", 1)
    case(f"conv_transpose1d-{i}-{cfg}", lambda x, w, cfg=cfg: F.conv_transpose1d(x, w, **cfg),
         n(2, 2, 4), n(2, 2 // g, 3))
POOL = [dict(kernel_size=2), dict(kernel_size=3, stride=1), dict(kernel_size=3, stride=2,
        padding=1), dict(kernel_size=2, stride=2, ceil_mode=True), dict(kernel_size=2,
        dilation=2, stride=1)]
for i, cfg in enumerate(POOL):
    case(f"max_pool2d-{i}-{cfg}", lambda x, cfg=cfg: F.max_pool2d(x, **cfg),
         rng.permutation(50).reshape(1, 2, 5, 5) / 10.0)
AVG = [dict(kernel_size=2), dict(kernel_size=3, stride=1), dict(kernel_size=3, stride=2,
       padding=1), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
       dict(kernel_size=2, stride=2, ceil_mode=True), dict(kernel_size=3, stride=2, padding=1,
       ceil_mode=True, count_include_pad=False)]
for i, cfg in enumerate(AVG):
    case(f"avg_pool2d-{i}-{cfg}", lambda x, cfg=cfg: F.avg_pool2d(x, **cfg), n(1, 2, 5, 5))
for size in ((1, 1), (2, 3), (3, 2)):
    case(f"adaptive_avg_pool2d-{size}", lambda x, s=size: F.adaptive_avg_pool2d(x, s),
         n(1, 2, 5, 4))
INTERP = [dict(size=(7,), mode="nearest"), dict(size=(3,), mode="linear"),
          dict(size=(7,), mode="linear", align_corners=True), dict(size=(5, 3), mode="nearest"),
          dict(size=(5, 6), mode="bilinear"), dict(size=(2, 5), mode="bilinear",
                                                    align_corners=True)]
for i, cfg in enumerate(INTERP):
    dims = len(cfg["size"])  # type: ignore[arg-type]
    case(f"interpolate-{i}-{cfg}", lambda x, cfg=cfg: F.interpolate(x, **cfg),
         n(1, 2, 4) if dims == 1 else n(1, 2, 3, 4))
case("embedding", lambda w, i: F.embedding(i, w), n(5, 3), np.array([[0, 4], [2, 0]]))
case("embedding-1d", lambda w, i: F.embedding(i, w), n(4, 2), np.array([3, 3, 1]))

# -- composites -------------------------------------------------------------------------------

case("layer_norm", lambda x, w, b: F.layer_norm(x, 4, w, b), n(3, 4), n(4), n(4))
case("layer_norm-2d", lambda x: F.layer_norm(x, (2, 3)), n(2, 2, 3))
case("rms_norm", lambda x, w: F.rms_norm(x, 3, w), n(2, 3), n(3))
case("gelu", F.gelu, n(2, 3))
case("gelu-tanh", lambda x: F.gelu(x, "tanh"), n(2, 3))
case("silu", F.silu, n(2, 3))
case("softplus", F.softplus, n(2, 3))
case("leaky_relu", F.leaky_relu, away(2, 3))
case("elu", F.elu, away(2, 3))
case("cross_entropy", lambda x, t: F.cross_entropy(x, t), n(3, 4), np.array([0, 3, 1]))
case("cross_entropy-smoothing", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
     n(3, 4), np.array([0, 3, 1]))
case("cross_entropy-probs", lambda x, t: F.cross_entropy(x, t.softmax(-1)),
     n(2, 3), n(2, 3))
case("nll_loss", lambda x, t: F.nll_loss(x.log_softmax(-1), t), n(3, 4), np.array([2, 2, 0]))
case("mse_loss", F.mse_loss, n(2, 3), n(2, 3))
case("mlp", lambda x, w1, w2: (x @ w1).tanh() @ w2, n(3, 4), n(4, 5), n(5, 2))


# -- second order: the gradient (create_graph=True) differentiated again ---------------------


def grad_of(f: Callable[..., Any]) -> Callable[..., Any]:
    """``x -> d sum(f(x)) / dx``, recorded so that it can be differentiated again."""

    def g(x: Any, *rest: Any) -> Any:
        with ember.enable_grad():  # check_grads evaluates under no_grad for its differences
            return f(x, *rest).sum().backward(create_graph=True)[x]

    return g


SECOND: dict[str, tuple[Callable[..., Any], list[Any]]] = {
    "exp": (ember.exp, [n(3)]), "log": (ember.log, [pos(3)]), "sin": (ember.sin, [n(3)]),
    "tanh": (ember.tanh, [n(2, 2)]), "sigmoid": (ember.sigmoid, [n(3)]),
    "sqrt": (ember.sqrt, [pos(3)]), "rsqrt": (ember.rsqrt, [pos(3)]),
    "erf": (ember.erf, [n(3)]), "atan": (ember.atan, [n(3)]),
    "mul-self": (lambda x: x * x * x, [n(3)]), "div": (lambda x, y: x / y, [n(3), away(3)]),
    "pow": (lambda x, y: x ** y, [pos(3), n(3)]), "atan2": (ember.atan2, [away(3), away(3)]),
    "matmul": (lambda a, b: (a @ b).tanh(), [n(2, 3), n(3, 2)]),
    "softmax": (lambda x: x.softmax(-1) * ember.tensor([1.0, 2.0, 3.0], dtype=ember.float64,
                                                       device=x.device), [n(2, 3)]),
    "log_softmax": (lambda x: x.log_softmax(-1) ** 2, [n(2, 3)]),
    "prod": (lambda x: x.prod(1), [pos(2, 3)]),
    "cumprod": (lambda x: x.cumprod(0), [pos(4)]),
    "var": (lambda x: x.var(0), [n(4, 2)]),
    "conv2d": (lambda x, w: F.conv2d(x, w, stride=2, padding=1).tanh(),
               [n(1, 1, 4, 4), n(2, 1, 3, 3)]),
    "layer_norm": (lambda x: F.layer_norm(x, 3) ** 2, [n(2, 3)]),
    "gather": (lambda x: (x.gather(1, ember.tensor([[2, 0]], device=x.device)) ** 3), [n(1, 3)]),
}
for name, (f, args) in SECOND.items():
    case(f"second-order-{name}", grad_of(f), *args, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize(("name", "fn", "args", "tol"), CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_finite_differences(name: str, fn: Callable[..., Any], args: list[Any],
                                             tol: dict[str, float]) -> None:
    check_grads(fn, args, **tol)


def test_every_differentiable_primitive_has_a_rule() -> None:
    missing = [op.name for op in ops.primitives() if op.differentiable and op not in RULES]
    assert missing == []


def test_there_are_at_least_300_gradient_cases() -> None:
    assert len(CASES) >= 300
