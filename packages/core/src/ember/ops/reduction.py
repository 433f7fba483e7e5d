"""Reductions.  ``dims`` is a sorted tuple of non-negative axes (never empty: core expands
``dim=None`` to every axis); ``keepdim`` keeps reduced axes with size 1."""

from ._op import Op

sum = Op("sum", "reduction", 1, ("dims", "keepdim"), dtypes="number")
prod = Op("prod", "reduction", 1, ("dims", "keepdim"), dtypes="number")
mean = Op("mean", "reduction", 1, ("dims", "keepdim"), dtypes="float")
max = Op("max", "reduction", 1, ("dims", "keepdim"), dtypes="number")
min = Op("min", "reduction", 1, ("dims", "keepdim"), dtypes="number")
#: ``var(x, dims=, keepdim=, correction=)``: correction 1 is the unbiased estimator.
var = Op("var", "reduction", 1, ("dims", "keepdim", "correction"), dtypes="float")
any = Op("any", "reduction", 1, ("dims", "keepdim"), result="bool", differentiable=False)
all = Op("all", "reduction", 1, ("dims", "keepdim"), result="bool", differentiable=False)
#: ``argmax(x, dim=, keepdim=)``: ``dim`` is an int, or None for the flattened input (the
#: result is then 0-d, or all ones with keepdim).  Ties resolve to the first index.
argmax = Op("argmax", "reduction", 1, ("dim", "keepdim"), result="index", differentiable=False)
argmin = Op("argmin", "reduction", 1, ("dim", "keepdim"), result="index", differentiable=False)
cumsum = Op("cumsum", "reduction", 1, ("dim",), dtypes="number")
cumprod = Op("cumprod", "reduction", 1, ("dim",), dtypes="number")
