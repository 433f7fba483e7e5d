"""``einsum``: Einstein summation reduced to diagonals (strided slices), sums, permutes and
batched matmuls, so it runs on every backend and Autodiff differentiates it.

The operands are contracted from left to right, two at a time: the labels both share and
need later become the matmul's batch, the shared ones not needed later its inner axis, the
rest its rows and columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _dtype as dt
from ._apply import cast
from ._errors import ShapeError

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["einsum"]

Label = str | int  # a letter, or the position of an axis inside the ellipsis

_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _sublist(labels: Sequence[Any]) -> str:
    """PyTorch's sublist form (``einsum(a, [0, 1], b, [1, 2], [0, 2])``) as subscripts."""
    out = []
    for v in labels:
        if v is Ellipsis:
            out.append("...")
        elif isinstance(v, int) and 0 <= v < len(_LETTERS):
            out.append(_LETTERS[v])
        else:
            raise ValueError(f"einsum: sublist labels must be Ellipsis or ints in [0, 52), "
                             f"got {v!r}")
    return "".join(out)


def _parse_term(term: str, where: str) -> tuple[list[str], bool]:
    """The letters of one term and whether it has an ellipsis (given where it sits)."""
    if term.count("...") > 1:
        raise ValueError(f"einsum: {where} {term!r} has more than one ellipsis")
    ellipsis = "..." in term
    before, _, after = term.partition("...")
    letters = list(before) + (["..."] if ellipsis else []) + list(after)
    for c in letters:
        if c != "..." and c not in _LETTERS:
            raise ValueError(f"einsum: invalid subscript {c!r} in {where} {term!r}: "
                             "subscripts are letters A-Z, a-z and '...'")
    return letters, ellipsis


def _diagonal(x: Tensor, labels: list[Label], eq: str,
              k: int) -> tuple[Tensor, list[Label]]:
    """Take the diagonal of every label repeated in one operand (``ii->i``)."""
    from ._manipulation import movedim, reshape

    while True:
        seen: dict[Label, int] = {}
        pair = None
        for pos, lab in enumerate(labels):
            if lab in seen:
                pair = (seen[lab], pos)
                break
            seen[lab] = pos
        if pair is None:
            return x, labels
        a, b = pair
        n = x.shape[a]
        if x.shape[b] != n:
            raise ShapeError(f"einsum {eq!r}: subscript {labels[a]} is repeated in operand {k} "
                             f"{x.shape} for axes of different sizes {n} and {x.shape[b]}")
        lab = labels[a]
        x = movedim(x, (a, b), (-2, -1))
        rest = [lb for i, lb in enumerate(labels) if i not in (a, b)]
        # the diagonal of the last two axes is every (n + 1)-th element of their flattening
        x = reshape(x, *x.shape[:-2], n * n)[..., ::n + 1]
        labels = [*rest, lab]


def einsum(equation: Any, *operands: Any) -> Tensor:
    """Einstein summation over the operands, as ``torch.einsum``.

    Subscripts are letters, with ``...`` for broadcast leading axes; without ``->`` the
    output holds the ellipsis axes, then every letter that appears once, in alphabetical
    order.  A letter repeated in one operand takes its diagonal.  The sublist form
    ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` works too.

    Examples
    --------
    >>> import ember
    >>> a, b = ember.ones(2, 3), ember.ones(3, 4)
    >>> ember.einsum("ij,jk->ik", a, b).shape
    (2, 4)
    >>> ember.einsum("ii", ember.eye(3)).item()
    3.0
    """
    from ._manipulation import expand, permute, reshape
    from ._tensor import Tensor as T

    if isinstance(equation, T):  # sublist form: op, labels, op, labels, ..., [output]
        items = [equation, *operands]
        out_term = _sublist(items.pop()) if len(items) % 2 else None  # odd: output last
        ops = items[0::2]
        terms = [_sublist(s) for s in items[1::2]]
        equation = ",".join(terms) + ("" if out_term is None else "->" + out_term)
        operands = tuple(ops)
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise TypeError(f"einsum: expected an equation string, got {type(equation).__name__}")
    if not operands:
        raise ValueError("einsum: needs at least one operand")
    for i, t in enumerate(operands):
        if not isinstance(t, T):
            raise TypeError(f"einsum: operand {i} is a {type(t).__name__}, not a Tensor")
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum {equation!r}: {len(terms)} operand subscript(s) for "
                         f"{len(operands)} tensor(s)")

    # labels of every operand's axes, the ellipsis expanded to its axes' positions
    parsed = [_parse_term(t, f"operand {k}") for k, t in enumerate(terms)]
    ell = 0
    for k, ((letters, has_ell), x) in enumerate(zip(parsed, operands, strict=True)):
        named = len(letters) - has_ell
        if x.ndim < named or (not has_ell and x.ndim != named):
            raise ShapeError(
                f"einsum {equation!r}: operand {k} has subscripts {terms[k]!r} for "
                f"{named} axes{' and more' if has_ell else ''} but its shape is {x.shape} "
                f"({x.ndim} axes)")
        if has_ell:
            ell = max(ell, x.ndim - named)
    labels: list[list[Label]] = []
    for (letters, has_ell), x in zip(parsed, operands, strict=True):
        e = x.ndim - (len(letters) - has_ell)
        labs: list[Label] = []
        for c in letters:
            labs.extend(range(ell - e, ell) if c == "..." else [c])
        labels.append(labs)

    sizes: dict[Label, int] = {}
    for k, (labs, x) in enumerate(zip(labels, operands, strict=True)):
        own: dict[Label, int] = {}
        for lab, n in zip(labs, x.shape, strict=True):
            if own.setdefault(lab, n) != n:
                raise ShapeError(f"einsum {equation!r}: subscript {lab} is repeated in operand "
                                 f"{k} {x.shape} for axes of different sizes {own[lab]} and {n}")
            seen = sizes.get(lab, 1)
            if n != seen and 1 not in (n, seen):
                what = "an ellipsis axis" if isinstance(lab, int) else f"subscript {lab}"
                raise ShapeError(f"einsum {equation!r}: {what} has size {n} in operand {k} "
                                 f"{x.shape}, which does not broadcast with size {seen} seen "
                                 "before")
            sizes[lab] = max(n, seen) if lab in sizes else n

    if arrow:
        out_letters, _ = _parse_term(rhs, "output")
        out: list[Label] = []
        for c in out_letters:
            if c == "...":
                out.extend(range(ell))
            elif c not in sizes:
                raise ValueError(f"einsum {equation!r}: output subscript {c} appears in no "
                                 "operand")
            elif c in out:
                raise ValueError(f"einsum {equation!r}: output subscript {c} appears twice")
            else:
                out.append(c)
    else:
        counts: dict[Label, int] = {}
        for labs in labels:
            for lab in labs:
                counts[lab] = counts.get(lab, 0) + 1
        singles = sorted(c for c, m in counts.items() if isinstance(c, str) and m == 1)
        out = [*range(ell), *singles]

    dtype = operands[0]._dtype
    for x in operands[1:]:
        dtype = dt.promote_types(dtype, x._dtype)
    work = dtype if dtype.kind != "b" else dt.int64

    def needed_after(k: int) -> set[Label]:
        later: set[Label] = set(out)
        for labs in labels[k + 1:]:
            later.update(labs)
        return later

    def sum_out(x: Tensor, labs: list[Label], keep: set[Label]) -> tuple[Tensor, list[Label]]:
        drop = tuple(i for i, lab in enumerate(labs) if lab not in keep)
        if drop:
            x = cast(x.sum(dim=drop), work)
            labs = [lab for lab in labs if lab in keep]
        return x, labs

    acc: Tensor | None = None
    acc_labs: list[Label] = []
    for k, x in enumerate(operands):
        x, labs = _diagonal(cast(x, work), list(labels[k]), equation, k)
        later = needed_after(k)
        x, labs = sum_out(x, labs, later | set(acc_labs))
        if acc is None:
            acc, acc_labs = x, labs
            continue
        acc, acc_labs = sum_out(acc, acc_labs, later | set(labs))
        acc, acc_labs = _contract(acc, acc_labs, x, labs, later, sizes)
    assert acc is not None
    acc, acc_labs = sum_out(acc, acc_labs, set(out))
    # broadcast axes of size 1 the output keeps at the full size
    shape = [sizes[lab] for lab in acc_labs]
    if tuple(shape) != acc.shape:
        acc = expand(acc, shape)
    acc = permute(acc, [acc_labs.index(lab) for lab in out])
    return cast(reshape(acc, [sizes[lab] for lab in out]), dtype)


def _contract(a: Tensor, la: list[Label], b: Tensor, lb: list[Label], keep: set[Label],
              sizes: dict[Label, int]) -> tuple[Tensor, list[Label]]:
    """``a`` and ``b`` multiplied, summed over the labels they share and ``keep`` lacks."""
    from ._linalg import matmul
    from ._manipulation import expand, permute, reshape

    shared = [lab for lab in la if lab in lb]
    batch = [lab for lab in shared if lab in keep]
    inner = [lab for lab in shared if lab not in keep]
    rows = [lab for lab in la if lab not in lb]
    cols = [lab for lab in lb if lab not in la]
    # shared labels broadcast: a size-1 axis on one side meets the other side's size
    for lab in shared:
        n = sizes[lab]
        if a.shape[la.index(lab)] != n:
            a = expand(a, [sizes[x] if x == lab else m for x, m in zip(la, a.shape,
                                                                       strict=True)])
        if b.shape[lb.index(lab)] != n:
            b = expand(b, [sizes[x] if x == lab else m for x, m in zip(lb, b.shape,
                                                                       strict=True)])
    sz = dict(zip(la, a.shape, strict=True)) | dict(zip(lb, b.shape, strict=True))
    nb = [sz[lab] for lab in batch]
    m, k, n = (math.prod(sz[lab] for lab in g) for g in (rows, inner, cols))
    am = reshape(permute(a, [la.index(lab) for lab in (*batch, *rows, *inner)]),
                 math.prod(nb), m, k)
    bm = reshape(permute(b, [lb.index(lab) for lab in (*batch, *inner, *cols)]),
                 math.prod(nb), k, n)
    out = matmul(am, bm)
    labs = [*batch, *rows, *cols]
    return reshape(out, [sz[lab] for lab in labs]), labs
