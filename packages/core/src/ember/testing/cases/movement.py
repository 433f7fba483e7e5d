# Lambdas with default arguments bind loop variables; mypy cannot infer their types.
# mypy: disable-error-code="misc"
"""Movement primitives and their composites: reshape to topk, over every dtype and layout."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import ember

from ... import _dtype as dt
from .._case import Arg, Case, register, rng_for, sample
from ._build import ALL, case

_NO_BOOL = tuple(d for d in ALL if d is not dt.bool_)


def _idx(values: Any) -> Arg:
    return Arg(np.asarray(values, dtype=np.int64), "", (), dt.int64)


def each(name: str, fn: Callable[..., Any], oracle: Callable[..., Any], shape: Sequence[int],
         *, extra: Sequence[Arg] = (), dtypes: Sequence[dt.DType] = ALL,
         views: Sequence[str] = ("", "permuted"), domain: str = "distinct",
         out: Callable[[dt.DType], Any] | None = None, grad: bool = True) -> None:
    """Cases ``name[-permuted|-sliced]-dtype``: ``fn(x, *extra)`` vs ``oracle(x, *extra)``."""
    for d in dtypes:
        for view in views:
            cid = f"{name}{'-' + view if view else ''}-{d.name}"
            x = Arg(np.asarray(sample(shape, d, rng_for(cid), domain)), view, (), d)
            g = (0,) if grad and d.kind == "f" else ()
            case(cid, "movement", fn, oracle, [x, *extra], d if out is None else out(d), grad=g)


def _tuple_of(xs: Any) -> tuple[Any, ...]:
    return tuple(xs)


each("reshape", lambda x: x.reshape(4, -1), lambda v: v.reshape(4, -1), (2, 3, 4))
each("reshape-to-scalar", lambda x: x.reshape(()), lambda v: v.reshape(()), (1, 1), views=("",))
each("reshape-empty", lambda x: x.reshape(3, 0, 2), lambda v: v.reshape(3, 0, 2), (0, 6),
     views=("",))
each("flatten", lambda x: x.flatten(1), lambda v: v.reshape(v.shape[0], -1), (2, 3, 4))
each("unflatten", lambda x: x.unflatten(1, (2, 2)), lambda v: v.reshape(3, 2, 2), (3, 4))
each("permute", lambda x: x.permute(2, 0, 1), lambda v: v.transpose(2, 0, 1), (2, 3, 4),
     views=("", "sliced"))
each("transpose", lambda x: x.transpose(0, -1), lambda v: np.swapaxes(v, 0, -1), (2, 3, 4))
each("squeeze", lambda x: x.squeeze(1), lambda v: v.squeeze(1), (3, 1, 2))
each("squeeze-all", lambda x: x.squeeze(), lambda v: v.squeeze(), (1, 3, 1), views=("",))
each("unsqueeze", lambda x: x.unsqueeze(-1), lambda v: v[..., None], (3, 4))
each("expand", lambda x: x.expand(2, 3, 4), lambda v: np.broadcast_to(v, (2, 3, 4)), (3, 1))
each("expand-neg1", lambda x: x.expand(-1, 5), lambda v: np.broadcast_to(v, (3, 5)), (3, 1),
     views=("",))
each("broadcast_to", lambda x: ember.broadcast_to(x, (2, 3, 4)),
     lambda v: np.broadcast_to(v, (2, 3, 4)), (4,), views=("", "sliced"))
each("repeat", lambda x: x.repeat(2, 1, 3), lambda v: np.tile(v, (2, 1, 3)), (2, 3))
each("flip", lambda x: ember.flip(x, (0, 1)), lambda v: v[::-1, ::-1], (3, 4))
each("flip-neg", lambda x: ember.flip(x, -1), lambda v: v[..., ::-1], (2, 3, 4),
     views=("", "sliced"))
each("narrow", lambda x: ember.narrow(x, 1, 1, 2), lambda v: v[:, 1:3], (3, 4))
each("roll", lambda x: ember.roll(x, (1, -2), (0, 1)), lambda v: np.roll(v, (1, -2), (0, 1)),
     (3, 4))
each("roll-flat", lambda x: ember.roll(x, 5), lambda v: np.roll(v, 5), (3, 4))
each("squeeze-0d", lambda x: x.squeeze(0), lambda v: v, (), views=("",))
each("flip-0d", lambda x: x.flip(-1), lambda v: v, (), views=("",))
each("index-nested-tuple", lambda x: x[((2, 0),)], lambda v: v[[2, 0]], (3, 4))
each("contiguous", lambda x: x.contiguous(), lambda v: v, (3, 4), views=("permuted", "sliced"))
each("pad", lambda x: ember.pad(x, (1, 2)), lambda v: np.pad(v, ((0, 0), (1, 2))), (3, 4))
each("pad-2d-value", lambda x: ember.pad(x, (0, 1, 2, 0), value=1),
     lambda v: np.pad(v, ((0, 0), (2, 0), (0, 1)), constant_values=1), (2, 3, 2),
     dtypes=_NO_BOOL)
each("tril", lambda x: ember.tril(x), lambda v: np.tril(v), (4, 4))
each("tril-k", lambda x: ember.tril(x, -1), lambda v: np.tril(v, -1), (2, 3, 5))
each("triu", lambda x: ember.triu(x), lambda v: np.triu(v), (4, 3))
each("triu-k", lambda x: ember.triu(x, 2), lambda v: np.triu(v, 2), (3, 5))
each("split", lambda x: _tuple_of(ember.split(x, 2, dim=1)),
     lambda v: tuple(np.split(v, [2, 4], axis=1)), (3, 5))
each("split-sections", lambda x: _tuple_of(ember.split(x, [1, 3], dim=0)),
     lambda v: tuple(np.split(v, [1], axis=0)), (4, 2))
each("chunk", lambda x: _tuple_of(ember.chunk(x, 2, dim=-1)),
     lambda v: tuple(np.split(v, [2], axis=-1)), (3, 4))

# -- several inputs -------------------------------------------------------------------------------

for _d in ALL:
    rng = rng_for(f"cat-{_d.name}")
    a, b, c = (Arg(np.asarray(sample(s, _d, rng)), v, (), _d)
               for s, v in (((2, 3), ""), ((4, 3), "permuted"), ((0, 3), "")))
    g: tuple[int, ...] = (0, 1, 2) if _d.kind == "f" else ()
    case(f"cat-dim0-{_d.name}", "movement", lambda *xs: ember.cat(xs, 0),
         lambda *vs: np.concatenate(vs, 0), [a, b, c], _d, grad=g)
    a2, b2 = (Arg(np.asarray(sample(s, _d, rng)), v, (), _d)
              for s, v in (((2, 3, 1), ""), ((2, 3, 4), "sliced")))
    case(f"cat-neg-{_d.name}", "movement", lambda *xs: ember.cat(xs, -1),
         lambda *vs: np.concatenate(vs, -1), [a2, b2], _d, grad=g[:2])
    s1, s2 = (Arg(np.asarray(sample((3, 4), _d, rng)), v, (), _d) for v in ("", "permuted"))
    case(f"stack-dim0-{_d.name}", "movement", lambda *xs: ember.stack(xs, 0),
         lambda *vs: np.stack(vs, 0), [s1, s2], _d, grad=g[:2])
    case(f"stack-neg-{_d.name}", "movement", lambda *xs: ember.stack(xs, -1),
         lambda *vs: np.stack(vs, -1), [s1, s2], _d, grad=g[:2])

_GATHER = np.array([[0, 2, 1, 0], [3, 3, 0, 1], [1, 0, 2, 3]])
_PERM_ROWS = np.array([[2, 0, 1, 0], [0, 2, 2, 1], [1, 1, 0, 2]])  # a permutation per column


def _scatter_add(v: np.ndarray, i: np.ndarray, s: np.ndarray, dim: int) -> np.ndarray:
    out = v.astype(np.int64) if v.dtype == bool else v.copy()
    for pos in np.ndindex(*i.shape):
        tgt = list(pos)
        tgt[dim] = i[pos]
        out[tuple(tgt)] += s[pos]
    return out.astype(bool) if v.dtype == bool else out


def _scatter(v: np.ndarray, i: np.ndarray, s: np.ndarray, dim: int) -> np.ndarray:
    out = v.copy()
    for pos in np.ndindex(*i.shape):
        tgt = list(pos)
        tgt[dim] = i[pos]
        out[tuple(tgt)] = s[pos]
    return out


for _d in ALL:
    g = (0,) if _d.kind == "f" else ()
    for view in ("", "permuted"):
        sfx = f"{'-' + view if view else ''}-{_d.name}"
        rng = rng_for("gather" + sfx)
        x = Arg(np.asarray(sample((3, 4), _d, rng)), view, (), _d)
        case("gather-dim1" + sfx, "movement", lambda t, i: ember.gather(t, 1, i),
             lambda v, i: np.take_along_axis(v, i, 1), [x, _idx(_GATHER[:, :3])], _d, grad=g)
        x0 = Arg(np.asarray(sample((4, 4), _d, rng)), view, (), _d)
        case("gather-dim0" + sfx, "movement", lambda t, i: ember.gather(t, 0, i),
             lambda v, i: np.take_along_axis(v, i, 0), [x0, _idx(_GATHER)], _d, grad=g)
        case("index_select" + sfx, "movement",
             lambda t, i: ember.index_select(t, 1, i), lambda v, i: np.take(v, i, 1),
             [x, _idx([3, 0, 0, 2])], _d, grad=g)
        src = Arg(np.asarray(sample((3, 4), _d, rng)), "", (), _d)
        if _d is not dt.bool_:
            case("scatter_add-dim0" + sfx, "movement",
                 lambda t, i, s: ember.scatter_add(t, 0, i, s),
                 lambda v, i, s: _scatter_add(v, i, s, 0), [x0, _idx(_GATHER[:, :4] % 4), src],
                 _d, grad=(0, 2) if g else ())
        case("scatter-dim0" + sfx, "movement", lambda t, i, s: ember.scatter(t, 0, i, s),
             lambda v, i, s: _scatter(v, i, s, 0), [x, _idx(_PERM_ROWS), src], _d,
             grad=(0, 2) if g else ())
        case("scatter-scalar" + sfx, "movement", lambda t, i: ember.scatter(t, 1, i, 1),
             lambda v, i: _scatter(v, i, np.ones(i.shape, v.dtype), 1),
             [x, _idx([[0, 3], [1, 2], [2, 2]])], _d, grad=g)
        mask = Arg(np.asarray(sample((1, 4), dt.bool_, rng)), "", (), dt.bool_)
        case("masked_fill" + sfx, "movement", lambda t, m: ember.masked_fill(t, m, 1),
             lambda v, m: np.where(m, np.ones((), v.dtype), v), [x, mask], _d, grad=g)
    rng = rng_for(f"nonzero-{_d.name}")
    nz = Arg(np.asarray(sample((3, 4), _d, rng, "small")), "", (), _d)
    case(f"nonzero-{_d.name}", "movement", lambda t: ember.nonzero(t),
         lambda v: np.argwhere(v), [nz], dt.int64, grad=())
    case(f"nonzero-as_tuple-{_d.name}", "movement", lambda t: ember.nonzero(t, as_tuple=True),
         lambda v: tuple(np.nonzero(v)), [nz], dt.int64, grad=())

# -- sorting: distinct values, so indices are unique ---------------------------------------------

for _d in _NO_BOOL:
    for view in ("", "permuted"):
        for dim, desc in ((-1, False), (0, True)):
            tag = ("-descending" if desc else "") + ("-" + view if view else "")
            cid = f"sort-dim{dim}{tag}-{_d.name}"
            x = Arg(np.asarray(sample((3, 4), _d, rng_for(cid), "distinct")), view, (), _d)

            def srt(v: np.ndarray, dim: int = dim, desc: bool = desc) -> Any:
                i = np.argsort(-v.astype(np.float64) if desc else v, axis=dim, kind="stable")
                return np.take_along_axis(v, i, dim), i

            case(cid, "movement", lambda t, dim=dim, desc=desc: ember.sort(t, dim, desc),
                 srt, [x], (_d, dt.int64))
            case("arg" + cid, "movement", lambda t, dim=dim, desc=desc: ember.argsort(t, dim, desc),
                 lambda v, s=srt: s(v)[1], [x], dt.int64, grad=())
        for k, largest in ((2, True), (3, False)):
            tag = ("largest" if largest else "smallest") + ("-" + view if view else "")
            cid = f"topk-k{k}-{tag}-{_d.name}"
            x = Arg(np.asarray(sample((3, 5), _d, rng_for(cid), "distinct")), view, (), _d)

            def tk(v: np.ndarray, k: int = k, largest: bool = largest) -> Any:
                i = np.argsort(-v.astype(np.float64) if largest else v, axis=-1)[:, :k]
                return np.take_along_axis(v, i, -1), i

            case(cid, "movement", lambda t, k=k, largest=largest: ember.topk(t, k, -1, largest),
                 tk, [x], (_d, dt.int64))


# -- diff, meshgrid, repeat_interleave, unfold, pad modes, im2col (gathers by host indices) ------

def _np_pad(v: np.ndarray, pad: Sequence[int], mode: str) -> Any:
    widths = [(0, 0)] * v.ndim
    for i in range(len(pad) // 2):
        widths[v.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(widths, v.shape,
                                                                             strict=True))
    np_mode: Any = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    return np.pad(v[crop], [(max(lo, 0), max(hi, 0)) for lo, hi in widths], mode=np_mode)


def _np_unfold(v: np.ndarray, dim: int, size: int, step: int) -> Any:
    w = np.lib.stride_tricks.sliding_window_view(v, size, axis=dim)
    return np.take(w, np.arange(0, w.shape[dim], step), axis=dim)


def _np_im2col(v: np.ndarray, k: tuple[int, int], dil: tuple[int, int], pad: tuple[int, int],
               st: tuple[int, int]) -> Any:
    v = np.pad(v, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    n, c, h, w = v.shape
    oh = (h - dil[0] * (k[0] - 1) - 1) // st[0] + 1
    ow = (w - dil[1] * (k[1] - 1) - 1) // st[1] + 1
    out = np.zeros((n, c, k[0], k[1], oh, ow), v.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            out[:, :, i, j] = v[:, :, i * dil[0]::st[0], j * dil[1]::st[1]][:, :, :oh, :ow]
    return out.reshape(n, c * k[0] * k[1], oh * ow)


for _d in (dt.float32, dt.float64):
    rng = rng_for(f"diff-{_d.name}")
    x = Arg(np.asarray(sample((3, 5), _d, rng)), "permuted", (), _d)
    case(f"diff-{_d.name}", "movement", ember.diff, lambda v: np.diff(v), [x], _d)
    pre, app = (Arg(np.asarray(sample(s, _d, rng)), "", (), _d) for s in ((1, 5), (2, 5)))
    case(f"diff-n2-dim0-prepend-append-{_d.name}", "movement",
         lambda t, p, a: ember.diff(t, 2, 0, p, a),
         lambda v, p, a: np.diff(v, 2, 0, prepend=p, append=a), [x, pre, app], _d)
    vs = [Arg(np.asarray(sample((n,), _d, rng)), "", (), _d) for n in (2, 3, 4)]
    for ind in ("ij", "xy"):
        case(f"meshgrid-{ind}-{_d.name}", "movement",
             lambda *ts, ind=ind: ember.meshgrid(*ts, indexing=ind),
             lambda *v, ind=ind: tuple(np.meshgrid(*v, indexing=ind)), vs, _d, grad=(0,))
    y = Arg(np.asarray(sample((3, 4), _d, rng)), "permuted", (), _d)
    case(f"repeat_interleave-int-dim1-{_d.name}", "movement",
         lambda t: ember.repeat_interleave(t, 2, dim=1), lambda v: np.repeat(v, 2, 1), [y], _d)
    case(f"repeat_interleave-flat-{_d.name}", "movement",
         lambda t: t.repeat_interleave(3), lambda v: np.repeat(v.reshape(-1), 3), [y], _d)
    case(f"repeat_interleave-tensor-{_d.name}", "movement",
         lambda t, r: ember.repeat_interleave(t, r, dim=0), lambda v, r: np.repeat(v, r, 0),
         [y, _idx([2, 0, 3])], _d, grad=(0,))
    z = Arg(np.asarray(sample((2, 7, 3), _d, rng)), "permuted", (), _d)
    for size, step in ((3, 1), (2, 3)):
        case(f"unfold-size{size}-step{step}-{_d.name}", "movement",
             lambda t, s=size, st=step: t.unfold(1, s, st),
             lambda v, s=size, st=step: _np_unfold(v, 1, s, st), [z], _d)
    img = Arg(np.asarray(sample((2, 3, 5, 6), _d, rng)), "", (), _d)
    for mode in ("reflect", "replicate", "circular"):
        case(f"pad-{mode}-{_d.name}", "movement",
             lambda t, m=mode: ember.nn.functional.pad(t, (2, 1, 1, 3), mode=m),
             lambda v, m=mode: _np_pad(v, (2, 1, 1, 3), m), [img], _d)
    case(f"pad-circular-crop-{_d.name}", "movement",
         lambda t: ember.nn.functional.pad(t, (-1, 2), mode="circular"),
         lambda v: _np_pad(v, (-1, 2), "circular"), [img], _d)
    case(f"im2col-{_d.name}", "movement", lambda t: ember.nn.functional.unfold(t, 2),
         lambda v: _np_im2col(v, (2, 2), (1, 1), (0, 0), (1, 1)), [img], _d)
    case(f"im2col-dilation-padding-stride-{_d.name}", "movement",
         lambda t: ember.nn.functional.unfold(t, (2, 3), dilation=(2, 1), padding=1,
                                              stride=(1, 2)),
         lambda v: _np_im2col(v, (2, 3), (2, 1), (1, 1), (1, 2)), [img], _d)
case("diff-bool", "movement", ember.diff, lambda v: v[1:] != v[:-1],
     [Arg(np.array([True, False, False, True]), "", (), dt.bool_)], dt.bool_)


def _window_errors(device: Any) -> None:
    from .errors import _raises

    x = ember.ones(1, 2, 3, device=device)
    with _raises(ember.ShapeError, "pad", "reflect", "(3, 3)", "size 3", "(1, 2, 3)"):
        ember.nn.functional.pad(x, (3, 3), mode="reflect")
    with _raises(ember.ShapeError, "pad", "circular", "(4, 0)", "(1, 2, 3)"):
        ember.nn.functional.pad(x, (4, 0), mode="circular")
    with _raises(ValueError, "pad", "'reflect'", "value"):
        ember.nn.functional.pad(x, (1, 1), mode="reflect", value=2.0)
    with _raises(ValueError, "pad", "'wrap'"):
        ember.nn.functional.pad(x, (1, 1), mode="wrap")
    with _raises(ember.ShapeError, "unfold", "(1, 2, 3)", "size is 4"):
        x.unfold(2, 4, 1)
    with _raises(ember.ShapeError, "unfold", "(3, 3)", "(4, 4)"):
        ember.nn.functional.unfold(ember.ones(1, 1, 3, 3, device=device), 4)
    with _raises(ember.ShapeError, "repeat_interleave", "(2,)", "3 elements"):
        ember.repeat_interleave(ember.ones(3, device=device), ember.tensor([1, 2], device=device))
    with _raises(ember.ShapeError, "diff", "prepend", "(2, 2)", "(1, 2, 3)"):
        ember.diff(x, prepend=ember.ones(2, 2, device=device))


register(Case(id="error-pad-unfold-repeat_interleave-diff-name-op-and-shapes", group="errors",
              check=_window_errors, dtypes=(dt.float32, dt.int64)))
