"""The `Op` object: one per primitive, hashed by identity, used as the key of every op table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from .._dtype import DType, bool_, float32, int64

__all__ = ["Op", "registry"]

DTypeRule = Callable[[Sequence[Any], dict[str, Any]], "DType | tuple[DType, ...]"]
#: ``rule(input shapes, params) -> shape | list of shapes`` (see `ember.ops._shapes`)
ShapeRule = Callable[[Sequence[tuple[int, ...]], dict[str, Any]], Any]

#: Every primitive by name.  Custom ops registered by plugins land here too.
registry: Final[dict[str, Op]] = {}
#: called with each op made after core's shape rules were built (gives new ops their rule)
ON_NEW: Final[list[Callable[[Op], None]]] = []


# Rules receive the input tensors (anything with ``_dtype``) and the params.


def _same(args: Sequence[Any], params: dict[str, Any]) -> DType:
    dtype: DType = args[0]._dtype
    return dtype


def _last(args: Sequence[Any], params: dict[str, Any]) -> DType:
    dtype: DType = args[-1]._dtype
    return dtype


def _bool(args: Sequence[Any], params: dict[str, Any]) -> DType:
    return bool_


def _index(args: Sequence[Any], params: dict[str, Any]) -> DType:
    return int64


def _param(args: Sequence[Any], params: dict[str, Any]) -> DType:
    dtype: DType = params["dtype"]
    return dtype


def _same_and_index(args: Sequence[Any], params: dict[str, Any]) -> tuple[DType, DType]:
    return args[0]._dtype, int64


def _stat(dtype: DType) -> DType:
    """Row statistics (mean, rstd, logsumexp) of half types are kept in float32."""
    return float32 if dtype.itemsize < 4 else dtype


def _same_and_stats(args: Sequence[Any], params: dict[str, Any]) -> tuple[DType, DType, DType]:
    d: DType = args[0]._dtype
    return d, _stat(d), _stat(d)


def _loss_and_stats(args: Sequence[Any], params: dict[str, Any]) -> tuple[DType, DType, DType]:
    d: DType = args[0]._dtype
    return (_stat(d) if params.get("float32_loss") else d), _stat(d), _stat(d)


def _second(args: Sequence[Any], params: dict[str, Any]) -> DType:
    d: DType = args[1]._dtype
    return d


def _same_and_stat(args: Sequence[Any], params: dict[str, Any]) -> tuple[DType, DType]:
    d: DType = args[0]._dtype
    return d, _stat(d)


def _same_twice(args: Sequence[Any], params: dict[str, Any]) -> tuple[DType, DType]:
    return args[0]._dtype, args[0]._dtype


def _same_thrice(args: Sequence[Any], params: dict[str, Any]) -> tuple[DType, DType, DType]:
    return args[0]._dtype, args[0]._dtype, args[0]._dtype


def _same_four_times(args: Sequence[Any], params: dict[str, Any]) -> tuple[DType, ...]:
    return (args[0]._dtype,) * 4


def _params_thrice(args: Sequence[Any], params: dict[str, Any]) -> tuple[DType, ...]:
    # four lists of n tensors in, three lists out, each with the first list's dtypes
    dtypes = tuple(a._dtype for a in args[:len(args) // 4])
    return dtypes * 3


RESULT_RULES: Final[dict[str, DTypeRule]] = {
    "same": _same,
    "last": _last,
    "bool": _bool,
    "index": _index,
    "param": _param,
    "same+index": _same_and_index,
    "same+stats": _same_and_stats,
    "loss+stats": _loss_and_stats,
    "second": _second,
    "same+stat": _same_and_stat,
    "same*2": _same_twice,
    "same*3": _same_thrice,
    "same*4": _same_four_times,
    "params*3": _params_thrice,
}


class Op:
    """A primitive or composite operation.

    Parameters
    ----------
    name : the op's name, unique in :data:`registry`.
    group : the array-API section it belongs to: ``creation``, ``elementwise``, ``reduction``,
        ``movement``, ``linalg``, ``nn``; ``composite`` for ops that core can also compute
        from primitives (a backend may implement them, it need not: see `ember.ops.composite`).
    arity : number of tensor inputs; ``-1`` for a variadic op (``cat``).
    params : names of the keyword parameters kernels receive, already normalised by core.
    result : rule giving the output dtype(s) from the input dtypes and params: ``same``,
        ``last``, ``bool``, ``index`` (int64), ``param`` (``params["dtype"]``), ``same+index``;
        composites also use ``same+stats`` / ``same+stat`` (the input's dtype, then two / one
        row statistics in float32 for half types), ``loss+stats`` (``same+stats`` whose first
        output takes the statistics' dtype under the ``float32_loss`` param), ``second`` (the
        second input's dtype), ``same*2`` / ``same*3`` / ``same*4``, and
        ``params*3`` (inputs are four lists of n tensors, outputs three lists with the first
        list's dtypes).
    outputs : number of outputs (``sort`` returns values and indices); ``-1`` where it
        depends on the number of inputs (``adam_steps``).
    differentiable : whether gradients flow through it (Autodiff keeps a rule for each).
    dtypes : which input dtypes it accepts: ``any``, ``float``, ``int`` (ints and bool), ``number``
        (everything but bool).
    shape_rule : ``rule(shapes, params)``: the result's shape (a list of shapes for several
        results) from the input shapes and params, raising `ember.ShapeError` where they do not
        fit (see `ember.ops.check_shapes`).  Core's ops have theirs from `ember.ops._shapes`;
        elementwise ops get the broadcast.  ``check`` is the rule `Backend.dispatch` calls
        before a kernel: the shape rule, but ``None`` for elementwise ops (nothing to index).

    Examples
    --------
    >>> from ember import ops
    >>> ops.add.name, ops.add.arity, ops.add.group
    ('add', 2, 'elementwise')
    """

    __slots__ = (
        "__weakref__",
        "arity",
        "check",
        "composite",
        "differentiable",
        "dtypes",
        "group",
        "name",
        "outputs",
        "params",
        "result",
        "result_rule",
        "shape_rule",
    )

    def __init__(
        self,
        name: str,
        group: str,
        arity: int,
        params: Sequence[str] = (),
        *,
        result: str = "same",
        outputs: int = 1,
        differentiable: bool = True,
        dtypes: str = "any",
        shape_rule: ShapeRule | None = None,
    ) -> None:
        if name in registry:
            raise ValueError(f"an op named {name!r} is already registered")
        self.name = name
        self.group = group
        self.arity = arity
        self.params = tuple(params)
        self.result = result
        self.result_rule: DTypeRule = RESULT_RULES[result]
        self.outputs = outputs
        self.differentiable = differentiable
        self.dtypes = dtypes
        #: a composite has a decomposition in core; backends may, but need not, implement it
        self.composite = group == "composite"
        self.shape_rule: ShapeRule | None = shape_rule
        self.check: ShapeRule | None = shape_rule if group != "elementwise" else None
        registry[name] = self
        for hook in ON_NEW:
            hook(self)

    def __repr__(self) -> str:
        return f"ember.ops.{self.name}"

    def __reduce__(self) -> tuple[Callable[[str], Op], tuple[str]]:
        return registry.__getitem__, (self.name,)
