"""Row programs (`ember.backend.rows`) as numba loops: the spelling of the shared scheduling
loop (`ember.backend.row_schedule`) for numba, and the kernels built from it.

One compiled function per program: a loop over the rows, in which each stage of reductions is
one loop over the row and the elem outputs a last one.  Inputs are passed in their compute
dtypes (half types widened to float32) and outputs are written there, then rounded once.
Reductions are written without branches (selects), and the function is compiled with only
``reassoc`` of the fast-math flags, so sums vectorise while nan and inf keep IEEE meaning.
The source is cached like fusion's loops (`ember_cpu._fusion_loops`), but the first call waits
for it to load (`SYNC`: results do not change bits once a load finishes); where numba is missing
a program runs as its numpy reference (`ember.backend.rows.evaluate`).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from ember.backend import ir, rows
from ember.backend.ir import Value
from ember.backend.row_schedule import RowRenderer

from . import _fusion_loops
from ._common import F32, LOW

__all__ = ["NumbaRows", "compiled", "kernel", "run"]

_FN = {"exp": "np.exp", "expm1": "np.expm1", "log": "np.log", "log1p": "np.log1p",
       "sqrt": "np.sqrt", "sin": "np.sin", "cos": "np.cos", "tan": "np.tan",
       "tanh": "np.tanh", "asin": "np.arcsin", "acos": "np.arccos", "atan": "np.arctan",
       "sinh": "np.sinh", "cosh": "np.cosh", "erf": "math.erf", "floor": "np.floor",
       "ceil": "np.ceil", "rint": "np.rint", "trunc": "np.trunc", "fabs": "abs",
       "isinf": "np.isinf"}


class NumbaRows(RowRenderer):
    """numba's spelling of a row program: scalars, one row ``r`` at a time."""

    CODE: ClassVar[dict[str, str]] = {
        **{k: f"{v}({{0}})" for k, v in _FN.items()},
        "isnan": "({0} != {0})", "neg": "(-{0})", "invert": "(~{0})", "not": "(not {0})",
        "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})",
        "fdiv": "({0} / {1})", "fmod": "np.fmod({0}, {1})", "pow": "np.power({0}, {1})",
        "atan2": "np.arctan2({0}, {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
        "eq": "({0} == {1})", "ne": "({0} != {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
        "and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} ^ {1})",
        "shl": "({0} << {1})", "shr": "({0} >> {1})", "where": "({1} if {0} else {2})",
    }
    _WRAP = frozenset({"add", "sub", "mul", "neg", "invert", "and", "or", "xor", "shl"})

    def spell(self, v: Value, args: list[str]) -> str:
        if v.op in ("idiv", "imod"):
            raise NotImplementedError(f"{self.p.name}: integer division in a numba row kernel")
        text = super().spell(v, args)
        if v.op in self._WRAP and ir.is_int(v.dtype):  # numba widens small ints: wrap
            text = f"np.{v.dtype}({text})"
        return text

    def const(self, v: Value) -> str:
        x = v.arg
        if v.dtype == "bool":
            return "True" if x else "False"
        if ir.is_float(v.dtype):
            text = ("np.nan" if math.isnan(x) else "np.inf" if x == math.inf
                    else "-np.inf" if x == -math.inf else repr(x))
            return f"np.{v.dtype}({text})"
        return f"np.{v.dtype}({x})"

    def cast(self, v: Value, src: str) -> str:
        return f"({src} != 0)" if v.dtype == "bool" else f"np.{v.dtype}({src})"

    def load(self, index: int, layout: str, dtype: str) -> str:
        return {"elem": f"in{index}[r, j]", "row": f"in{index}[r]",
                "col": f"in{index}[j]"}[layout]

    def column(self) -> str:
        return "np.int64(j)"

    def rowlen(self) -> str:
        return "np.int64(N)"

    def open_pass(self) -> list[str]:
        return ["for j in range(N):"]

    ACC_DECL = "{acc} = {init}"
    INDEX_DECL = "{acc}i = np.int64(0)"
    ACC_UPDATE: ClassVar[dict[str, tuple[str, ...]]] = {
        "sum": ("{acc} += {v}",),
        "prod": ("{acc} *= {v}",),
        "extreme": ("{acc} = {v} if ({v} {cmp} {acc} or {v} != {v}) else {acc}",),
        "arg": ("{acc}b = {v} {cmp} {acc} or ({v} != {v} and {acc} == {acc})",
                "{acc}i = np.int64(j) if {acc}b else {acc}i",
                "{acc} = {v} if {acc}b else {acc}"),
    }

    def type_name(self, dtype: str) -> str:
        return f"np.{dtype}"

    def literal(self, value: int, dtype: str) -> str:
        return str(bool(value)) if dtype == "bool" else f"np.{dtype}({value})"

    def infinity(self, dtype: str, negative: bool) -> str:
        return f"np.{dtype}({'-' if negative else ''}np.inf)"

    def acc_final(self, r: Value, acc: str, out: str) -> list[str]:
        return [f"{out} = {acc}i" if r.arg.startswith("arg") else f"{out} = {acc}"]

    def store(self, k: int, layout: str, value: Value, spelled: str) -> list[str]:
        return [f"out{k}[r, j] = {spelled}" if layout == "elem" else f"out{k}[r] = {spelled}"]


def source(p: rows.RowProgram) -> str:
    """The numba module of program ``p``: ``kernel(out0.., in0.., R, N)``."""
    body = NumbaRows(p).body()
    outs = [f"out{k}" for k in range(len(p.outputs))]
    ins = [f"in{i}" for i in range(len(p.layouts))]
    lines = ["import math", "import numba", "import numpy as np", "",
             "@numba.njit(cache=True, error_model='numpy', fastmath={'reassoc'})",
             f"def kernel({', '.join([*outs, *ins, 'R', 'N'])}):",
             "    for r in range(R):"]
    lines += ["        " + s for s in body]
    return "\n".join(lines) + "\n"


class _Source:
    """What `_fusion_loops.load` needs: a key and the module's source."""

    __slots__ = ("key", "source")

    def __init__(self, text: str) -> None:
        self.source = text
        self.key = "rows_" + hashlib.sha256(text.encode()).hexdigest()[:24]


#: compile (or load from the disk cache) on the first call, waiting for it, rather than in the
#: background: a row program's reductions sum in another order than the numpy path that would
#: run while it loads, so a background load would change an op's bits in the middle of a run
#: and make two runs of one program differ by when the load finished.  Compiling one program
#: takes ~0.25 s once per machine (the disk cache keeps it); ``EMBER_CPU_ROWS_SYNC=0`` loads in
#: the background instead (callers keep their numpy path meanwhile)
SYNC = os.environ.get("EMBER_CPU_ROWS_SYNC", "1") != "0"
#: id(program) -> (the program, its compiled function or None while loading); the program
#: is kept so that its id is not reused by another one
_STATE: dict[int, tuple[rows.RowProgram, Any]] = {}


def compiled(p: rows.RowProgram) -> Callable[..., Any] | None:
    """``p``'s compiled function, or ``None`` until it is loaded (the first call starts it)."""
    got = _STATE.get(id(p))
    if got is None or got[0] is not p:
        _STATE[id(p)] = (p, None)
        src = _Source(source(p))

        def ready(module: Any) -> None:
            _STATE[id(p)] = (p, module.kernel)

        _fusion_loops.load_soon(src, ready)  # type: ignore[arg-type]  # key and source suffice
        return None
    fn: Callable[..., Any] | None = got[1]
    return fn


def _compute(a: np.ndarray) -> np.ndarray:
    return a.astype(F32) if a.dtype in LOW else a


def run(p: rows.RowProgram, arrays: Sequence[np.ndarray], wait: bool = False
        ) -> list[np.ndarray] | None:
    """``p`` on ``arrays`` (elem ``[*lead, N]``, row ``lead``, col ``[N]``): the outputs in
    their storage dtypes and shapes, or ``None`` while the compiled function is not loaded
    (``wait``: compile now, or fall back to the numpy reference where numba is missing)."""
    lead, r, n = rows.geometry(p, [a.shape for a in arrays])
    fn = compiled(p)
    if fn is None and (wait or SYNC):
        _fusion_loops.wait()
        fn = compiled(p)
        if fn is None:  # no numba here: the reference
            flat = [_flat(a, lay, r, n) for a, lay in zip(arrays, p.layouts, strict=True)]
            outs = rows.evaluate(p, flat)
            return [_shape(o, lay, lead, n) for o, lay in zip(outs, p.out_layouts(),
                                                              strict=True)]
    if fn is None:
        return None
    ins = [np.ascontiguousarray(_compute(_flat(a, lay, r, n)))
           for a, lay in zip(arrays, p.layouts, strict=True)]
    outs = [np.empty((r, n) if lay == "elem" else (r,), ir.compute_dtype(store)
                     if store != "bfloat16" else F32)
            for (_, store), lay in zip(p.outputs, p.out_layouts(), strict=True)]
    with np.errstate(all="ignore"):
        fn(*outs, *ins, r, n)
    result = []
    for o, (_, store), lay in zip(outs, p.outputs, p.out_layouts(), strict=True):
        dt = _storage(store)
        result.append(_shape(o if o.dtype == dt else o.astype(dt), lay, lead, n))
    return result


def _storage(name: str) -> np.dtype[Any]:
    from ._common import BF16

    return BF16 if name == "bfloat16" else np.dtype(name)


def _flat(a: np.ndarray, layout: str, r: int, n: int) -> np.ndarray:
    return a.reshape(r, n) if layout == "elem" else a.reshape(r) if layout == "row" else a


def _shape(o: np.ndarray, layout: str, lead: tuple[int, ...], n: int) -> np.ndarray:
    return o.reshape(*lead, n) if layout == "elem" else o.reshape(lead)


def kernel(name: str) -> Callable[..., Any]:
    """A cpu kernel of row kernel ``name``: ``kernel(*arrays, **params)`` (what
    ``CpuBackend.row_kernel`` adopts)."""
    def run_kernel(*arrays: np.ndarray, **params: Any) -> Any:
        p = rows.expand(name, [a.dtype.name for a in arrays], params)
        outs = run(p, arrays, wait=True)
        assert outs is not None
        return outs[0] if len(outs) == 1 else tuple(outs)

    run_kernel.__name__ = name
    return run_kernel
