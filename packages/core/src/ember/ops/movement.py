"""Movement and indexing.  Shapes and axes arrive normalised (no ``-1``, no negative axes)."""

from ._op import Op

reshape = Op("reshape", "movement", 1, ("shape",))
#: ``permute(x, dims=)`` with a full permutation.
permute = Op("permute", "movement", 1, ("dims",))
#: ``expand(x, shape=)``: same ndim as x; size-1 axes broadcast.
expand = Op("expand", "movement", 1, ("shape",))
#: ``slice(x, starts=, stops=, steps=)``: one entry per axis, as from ``slice.indices``; steps
#: may be negative (then a stop of -1 means "through index 0").
slice = Op("slice", "movement", 1, ("starts", "stops", "steps"))
#: ``pad(x, pad=, value=)``: ``pad`` holds ``(before, after)`` per axis, both >= 0.
pad = Op("pad", "movement", 1, ("pad", "value"))
flip = Op("flip", "movement", 1, ("dims",))
#: ``cat(*xs, dim=)``: inputs share a dtype and every size but ``dim``.
cat = Op("cat", "movement", -1, ("dim",))
#: ``gather(x, index, dim=)``: ``index`` is int64 with x's ndim.
gather = Op("gather", "movement", 2, ("dim",))
#: ``scatter_add(x, index, src, dim=)``: out = x with src added at index along dim.
scatter_add = Op("scatter_add", "movement", 3, ("dim",))
#: ``scatter(x, index, src, dim=)``: out = x with src written at index along dim.
scatter = Op("scatter", "movement", 3, ("dim",))
#: ``index_select(x, index, dim=)``: ``index`` is 1-D int64.
index_select = Op("index_select", "movement", 2, ("dim",))
#: ``masked_fill(x, mask, value=)``: mask is bool and broadcasts to x; value a Python scalar.
masked_fill = Op("masked_fill", "movement", 2, ("value",))
tril = Op("tril", "movement", 1, ("k",))
triu = Op("triu", "movement", 1, ("k",))
contiguous = Op("contiguous", "movement", 1)
#: ``nonzero(x)``: int64 ``[n, ndim]`` coordinates of the non-zero elements in C order.
nonzero = Op("nonzero", "movement", 1, result="index", differentiable=False)
#: ``sort(x, dim=, descending=, stable=)`` -> (values, int64 indices).
sort = Op("sort", "movement", 1, ("dim", "descending", "stable"), result="same+index", outputs=2)
#: ``topk(x, k=, dim=, largest=)`` -> (values, indices), sorted from the extreme value.
topk = Op("topk", "movement", 1, ("k", "dim", "largest"), result="same+index", outputs=2)
