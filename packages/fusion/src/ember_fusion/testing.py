"""Random op programs for property tests of fusion compilers (needs ``hypothesis``).

A program is a list of steps (unary, binary and keepdim-reduction ops on a pool of tensors);
`run` executes it on a device and returns the values it keeps.  The CPU compiler's tests and
the Triton and OpenCL compilers' tests all draw programs from `step`.  `chain` is the 7-op
elementwise chain whose kernel count every compiler's tests assert, `chain_oracle` its value.

Examples
--------
>>> import numpy as np
>>> from ember_fusion.testing import run
>>> run([("u", "neg", 0, 0, 0)], [np.ones(2)], [], "fusion<cpu>")[0].tolist()
[-1.0, -1.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ember
import numpy as np
from hypothesis import strategies as st

__all__ = ["BINARY", "REDUCE", "SHAPES", "UNARY", "RandomProgram", "Step", "chain",
           "chain_oracle", "check_adam_is_one_kernel", "check_census", "check_matmul_epilogue",
           "check_random_program", "random_program", "run", "step"]

# every pair of these broadcasts to (13, 6), and so do keepdim reductions of them
SHAPES = [(13, 6), (13, 1), (1, 6), (6,), ()]
UNARY = ["neg", "abs", "exp", "tanh", "sigmoid", "relu", "sqrt", "square", "view", "cast"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "where", "gt"]
REDUCE = ["sum", "mean", "amax", "amin", "var"]


def _unary(kind: str, a: ember.Tensor) -> ember.Tensor:
    if kind == "exp":
        return a.clamp(-20, 20).exp()
    if kind == "sqrt":
        return a.abs().sqrt()
    if kind == "square":
        return a * a
    if kind == "relu":
        return a.relu()
    if kind == "view":  # two lazy reshapes: a view step between fused groups
        return a.unsqueeze(0).squeeze(0)
    if kind == "cast":
        other = ember.float32 if a.dtype is ember.float64 else ember.float64
        return a.to(other).to(a.dtype)
    return getattr(a, kind)()  # type: ignore[no-any-return]  # getattr is untyped


def _binary(kind: str, a: ember.Tensor, b: ember.Tensor) -> ember.Tensor:
    if kind == "div":
        return a / (b.abs() + 0.5)
    if kind == "where":
        return ember.where(a > b, a, b * 2.0)
    if kind == "gt":
        return (a > b).to(a.dtype)
    return getattr(ember, kind)(a, b)  # type: ignore[no-any-return]  # getattr is untyped


def _reduce(kind: str, a: ember.Tensor, dim: int) -> ember.Tensor:
    if a.ndim == 0:
        return a
    dims: Any = None if dim >= a.ndim else dim
    if kind == "var":
        return a.var(dim=dims, keepdim=True, correction=0)
    return getattr(a, kind)(dim=dims, keepdim=True)  # type: ignore[no-any-return]  # getattr is untyped


Step = tuple[str, str, int, int, int]
step = st.one_of(
    st.tuples(st.just("u"), st.sampled_from(UNARY), st.integers(0, 99), st.just(0), st.just(0)),
    st.tuples(st.just("b"), st.sampled_from(BINARY), st.integers(0, 99), st.integers(0, 99),
              st.just(0)),
    st.tuples(st.just("r"), st.sampled_from(REDUCE), st.integers(0, 99), st.just(0),
              st.integers(0, 2)),
)


def run(program: list[Step], arrays: list[np.ndarray], keep: list[int],
        device: str) -> list[np.ndarray]:
    pool = [ember.tensor(a, device=device) for a in arrays]
    for group, kind, i, j, dim in program:
        a, b = pool[i % len(pool)], pool[j % len(pool)]
        if group == "u":
            pool.append(_unary(kind, a))
        elif group == "b":
            pool.append(_binary(kind, a, b))
        else:
            pool.append(_reduce(kind, a, dim))
    held = [pool[-1]] + [pool[k % len(pool)] for k in keep]
    del pool  # only `held` survives: everything else may stay unmaterialised
    return [t.numpy() for t in held]


@dataclass(frozen=True)
class RandomProgram:
    """One draw of `random_program`: a program, its inputs' shapes, seed and dtype, the pool
    entries it keeps, and the fused device it runs on."""

    program: list[Step]
    shapes: list[tuple[int, ...]]
    keep: list[int]
    dtype: str
    device: str
    seed: int


def random_program(devices: Sequence[str], max_steps: int, max_keep: int = 3
                   ) -> st.SearchStrategy[RandomProgram]:
    """Programs of up to ``max_steps`` steps on one to three inputs, float32 or float64,
    keeping up to ``max_keep`` more values, run on one of ``devices`` (`check_random_program`
    checks one)."""
    return st.builds(RandomProgram, program=st.lists(step, min_size=1, max_size=max_steps),
                     shapes=st.lists(st.sampled_from(SHAPES), min_size=1, max_size=3),
                     keep=st.lists(st.integers(0, 99), max_size=max_keep),
                     dtype=st.sampled_from(["float32", "float64"]),
                     device=st.sampled_from(list(devices)), seed=st.integers(0, 2**16))


def check_random_program(case: RandomProgram, plain: str) -> None:
    """``case`` gives the same values (shapes, dtypes) on its fused device as on ``plain``."""
    rng = np.random.default_rng(case.seed)
    arrays = [np.asarray(rng.standard_normal(s), dtype=case.dtype) for s in case.shapes]
    want = run(case.program, arrays, case.keep, plain)
    got = run(case.program, arrays, case.keep, case.device)
    tol = 1e-4 if case.dtype == "float32" else 1e-10
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def check_adam_is_one_kernel(device: ember.Device, rng: np.random.Generator,
                             launches: Callable[[], int] | None = None) -> None:
    """Each Adam step of one (40, 9) parameter is one fused kernel on ``device`` (with
    ``launches``, one launch of the backend) and the parameter follows Adam written out in
    numpy (float64)."""
    from . import reset_stats, stats

    p0 = rng.standard_normal((40, 9))
    grads = [rng.standard_normal((40, 9)) for _ in range(3)]
    w = ember.tensor(p0, device=device)
    opt = ember.optim.Adam([w], lr=0.01)
    ember.tensor(grads[0], device=device)  # warm the scalar cache: counts below are steady
    for n, g in enumerate(grads, 1):
        gt = ember.tensor(g, device=device)
        device.synchronize()
        reset_stats(device)
        before = launches() if launches is not None else 0
        opt.step({w: gt})
        w.numpy()
        assert stats(device).kernels_launched == 1, n
        if launches is not None:
            assert launches() - before == 1, n
    p, m, v = p0.copy(), np.zeros_like(p0), np.zeros_like(p0)
    for t, g in enumerate(grads, 1):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        p = p - 0.01 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    np.testing.assert_allclose(w.numpy(), p, rtol=1e-10, atol=1e-12)


def check_matmul_epilogue(device: ember.Device, rng: np.random.Generator,
                          launches: Callable[[], int] | None = None,
                          column_sum: bool = False) -> Any:
    """``relu(x @ w + bias)`` on the fused ``device`` (with ``column_sum``, its column sums
    too, in the same flush) agrees with numpy (float64); with ``launches``, it is one launch
    of the backend.  Returns the flush's fusion stats."""
    from . import reset_stats, stats

    a, w, bias = rng.standard_normal((30, 5)), rng.standard_normal((5, 4)), rng.standard_normal(4)
    x = ember.tensor(a, device=device)
    wt, bt = ember.tensor(w, device=device), ember.tensor(bias, device=device)
    device.synchronize()
    reset_stats(device)
    before = launches() if launches is not None else 0
    h = ((x @ wt) + bt).relu()
    col = h.sum(dim=0) if column_sum else None
    got = h.numpy()
    want = np.maximum(a @ w + bias, 0)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    if col is not None:
        np.testing.assert_allclose(col.numpy(), want.sum(0), rtol=1e-12)
    if launches is not None:
        assert launches() - before == 1
    return stats(device)


def chain(x: ember.Tensor) -> ember.Tensor:
    """The 7-op chain ``v = relu(x*1.5+0.25)*0.5-1; v*sigmoid(v)`` (one kernel when fused)."""
    v = (x * 1.5 + 0.25).relu() * 0.5 - 1
    return v * v.sigmoid()


def chain_oracle(a: np.ndarray) -> np.ndarray:
    """`chain` in numpy float64."""
    a = a.astype(np.float64)
    v = np.maximum(a * 1.5 + 0.25, 0) * 0.5 - 1
    return v / (1 + np.exp(-v))  # type: ignore[no-any-return]  # numpy ufuncs are untyped here


# -- layer programs: reductions with prologues and epilogues, row patterns, matmul epilogues --

#: every float input holds multiples of 1/4 in [-4, 4]: sums, maxima and matmuls of such values
#: (and of their sums, differences, products with 0.5/2, clamps and wheres) are exact in
#: float32 in any order, so comparisons, casts to int and arg-reductions of them must agree
#: bit for bit; only transcendental ops, divisions, means and variances round
GRID = 4
#: tolerances of float outputs, relative to ``max(1, max |expected|)`` of each output: a
#: program's rounding comes from reordered reductions of n <= 130 * 3 terms of such values
#: after at most a few rounded ops, whose error is below n * eps * max|term| ~ 4e-5 x scale in
#: float32 (eps 1.2e-7) and ~1e-13 in float64 (also covering a transcendental's last ulp or a
#: contracted multiply-add)
TOL = {"float32": 2e-4, "float64": 1e-9, "float16": 4e-3, "bfloat16": 3e-2}


@dataclass
class Value:
    """A value of a layer program: its name, shape, dtype and whether it is exact (see GRID)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    exact: bool


@dataclass
class Program:
    """A random straight-line program over ember tensors (`layer_program`)."""

    seed: int
    shapes: int
    small: bool
    inputs: list[Value]
    lines: list[str]
    outputs: list[str]
    dtypes: tuple[str, ...]  # of every value computed

    @property
    def tol(self) -> float:
        names = {v.dtype for v in self.inputs} | set(self.dtypes)
        return max(TOL.get(d, 0.0) for d in names)

    def source(self) -> str:
        args = ", ".join(v.name for v in self.inputs)
        body = "".join(f"    {line}\n" for line in self.lines)
        return f"def program({args}):\n{body}    return [{', '.join(self.outputs)}]\n"

    def arrays(self) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, self.shapes, 1])
        out = []
        for v in self.inputs:
            if v.dtype == "bool":
                out.append(rng.random(v.shape) < 0.5)
            elif v.dtype in _INTS:
                out.append(rng.integers(-6, 7, v.shape).astype(v.dtype))
            else:
                out.append((rng.integers(-4 * GRID, 4 * GRID + 1, v.shape) / GRID).astype(v.dtype))
        return out


_FLOAT = ("float32", "float64")
_INTS = ("int8", "uint8", "int16", "int32", "int64")


class _Gen:
    """Builds one `Program` from a seed: a few motifs (elementwise chains, reductions with a
    prologue and an epilogue, row patterns, matmuls with epilogues, int and bool chains)."""

    def __init__(self, seed: int, small: bool, shapes: int) -> None:
        self.r = np.random.default_rng(seed)
        #: shapes come from their own stream: one program's ops over other shapes (sharing
        #: most generated kernels, whose sources take shapes as arguments)
        self.rs = np.random.default_rng([shapes, 7])
        self.seed = seed
        self.shapes = shapes
        self.small = small
        self.inputs: list[Value] = []
        self.pool: list[Value] = []
        self.lines: list[str] = []
        self.made: list[Value] = []
        self.base = "float32" if self.r.random() < 0.75 else "float64"

    # -- helpers ----------------------------------------------------------------------------

    def pick(self, seq: Sequence[Any]) -> Any:
        return seq[int(self.r.integers(len(seq)))]

    def chance(self, p: float) -> bool:
        return bool(self.r.random() < p)

    def size(self, rows: bool) -> int:
        """An extent: 1, odd ones, and ones above the compilers' block sizes in the tests'
        configurations and opencl's work-group threshold (64 elements a row)."""
        if self.small:
            sizes = [1, 3, 5, 9] if rows else [1, 3, 8, 13, 20, 70]
        else:
            sizes = [1, 2, 7, 13, 33, 70, 130] if rows else [1, 5, 16, 67, 130]
        return int(sizes[int(self.rs.integers(len(sizes)))])

    def view_input(self, shape: tuple[int, ...]) -> Value:
        """``shape`` as a transposed, sliced or expanded view of an input."""
        kind = self.pick(["t", "slice", "expand"] if len(shape) == 2 else ["slice", "expand"])
        if kind == "t":
            x = self.inp(shape[::-1], self.base)
            self.pool.remove(x)
            return self.new(f"{x.name}.t()", shape, self.base, True)
        if kind == "slice":
            x = self.inp((*shape[:-1], shape[-1] + 3), self.base)
            self.pool.remove(x)
            return self.new(f"{x.name}[..., 1:-2]", shape, self.base, True)
        x = self.inp((1, *shape[1:]), self.base)
        return self.new(f"{x.name}.expand{shape}", shape, self.base, True)

    def inp(self, shape: tuple[int, ...], dtype: str) -> Value:
        v = Value(f"x{len(self.inputs)}", shape, dtype, True)
        self.inputs.append(v)
        self.pool.append(v)
        return v

    def new(self, expr: str, shape: tuple[int, ...], dtype: str, exact: bool) -> Value:
        v = Value(f"v{len(self.made)}", tuple(shape), dtype, exact)
        self.lines.append(f"{v.name} = {expr}")
        self.made.append(v)
        self.pool.append(v)
        return v

    def floats(self, rank: int = 0) -> list[Value]:
        return [v for v in self.pool if v.dtype in _FLOAT and len(v.shape) >= rank]

    def partner(self, a: Value, kinds: tuple[str, ...] = _FLOAT) -> Value | None:
        """A pool value of ``kinds`` that broadcasts with ``a`` to ``a``'s shape or wider."""
        ok = []
        for b in self.pool:
            if b is a or b.dtype not in kinds:
                continue
            try:
                s = np.broadcast_shapes(a.shape, b.shape)
            except ValueError:
                continue
            if math.prod(s) <= 4 * max(math.prod(a.shape), math.prod(b.shape), 1):
                ok.append(b)
        return self.pick(ok) if ok else None

    @staticmethod
    def promote(a: str, b: str) -> str:
        return str(np.promote_types(a, b))

    # -- elementwise ------------------------------------------------------------------------

    def unary(self, a: Value) -> Value:
        n, s, d = a.name, a.shape, a.dtype
        if d not in _FLOAT:
            return self.int_op(a)
        kind = self.pick(["neg", "abs", "relu", "scale", "shift", "exp", "tanh", "sigmoid",
                          "sqrt", "log", "square", "clamp", "clamp_lo", "clamp_hi", "cast",
                          "view"])
        if kind == "view":  # a view between groups: rows dropped, or an axis added and dropped
            if len(s) >= 1 and s[0] > 2 and self.chance(0.5):
                return self.new(f"{n}[1:]", (s[0] - 1, *s[1:]), d, a.exact)
            return self.new(f"{n}.unsqueeze(0).squeeze(0)", s, d, a.exact)
        exact = {"neg": f"-{n}", "abs": f"{n}.abs()", "relu": f"{n}.relu()",
                 "scale": f"{n} * {self.pick(['0.5', '2.0', '-0.25'])}",
                 "shift": f"{n} + {self.pick(['0.25', '-1.5'])}",
                 "clamp": f"{n}.clamp(-1.5, 2.0)", "clamp_lo": f"{n}.clamp(min=-0.75)",
                 "clamp_hi": f"{n}.clamp(max=0.5)"}
        if kind in exact:
            return self.new(exact[kind], s, d, a.exact)
        if kind == "cast":
            if self.chance(0.25):  # autocast's round trip through a 16-bit float
                low = self.pick(["float16", "bfloat16"])
                h = self.new(f"{n}.to(ember.{low})", s, low, False)
                self.pool.remove(h)  # (16-bit values stay inside the round trip)
                if self.chance(0.5) and s:
                    h = self.new(f"({h.name} * 0.5).sum(-1, keepdim=True)", (*s[:-1], 1), low,
                                 False)
                    self.pool.remove(h)
                return self.new(f"{h.name}.to(ember.{d})", h.shape, d, False)
            other = "float64" if d == "float32" else "float32"
            return self.new(f"{n}.to(ember.{other})", s, other, a.exact)
        inexact = {"exp": f"{n}.clamp(-8, 8).exp()", "tanh": f"{n}.tanh()",
                   "sigmoid": f"{n}.sigmoid()", "sqrt": f"({n}.abs() + 1).sqrt()",
                   "log": f"({n}.abs() + 1).log()", "square": f"({n} * {n}).clamp(max=64)"}
        return self.new(inexact[kind], s, d, False)

    def binary(self, a: Value) -> Value:
        b = self.partner(a)
        if b is None:
            return self.unary(a)
        s = tuple(np.broadcast_shapes(a.shape, b.shape))
        d = self.promote(a.dtype, b.dtype)
        x, y = a.name, b.name
        exact = a.exact and b.exact
        kind = self.pick(["add", "sub", "mul", "div", "maximum", "minimum", "where", "cmp",
                          "cmp", "where_scalar"])
        if kind in ("add", "sub"):
            return self.new(f"{x} {'+' if kind == 'add' else '-'} {y}", s, d, exact)
        if kind == "mul":
            return self.new(f"({x} * {y}).clamp(-64, 64)", s, d, False)
        if kind == "div":
            return self.new(f"{x} / ({y}.abs() + 0.5)", s, d, False)
        if kind in ("maximum", "minimum"):
            return self.new(f"ember.{kind}({x}, {y})", s, d, exact)
        if kind == "where":
            return self.new(f"ember.where({x} > {y}, {x}, {y} * 0.5)", s, d, exact)
        if kind == "where_scalar":
            return self.new(f"ember.where({x} < 0.25, {x}, 0.0)", a.shape, a.dtype, a.exact)
        if not exact:  # a comparison of rounded values may flip: compare with a rounding margin
            return self.new(f"ember.where({x} > {y} + 0.5, {x}, {y})", s, d, False)
        op = self.pick([">", "<=", "==", "!="])
        c = self.new(f"{x} {op} {y}", s, "bool", True)
        if self.chance(0.6):
            return self.new(f"ember.where({c.name}, {x}, {y})", s, d, exact)
        return c

    def int_op(self, a: Value) -> Value:
        n, s, d = a.name, a.shape, a.dtype
        if d == "bool":
            b = self.partner(a, ("bool",))
            kind = self.pick(["not", "and", "or", "count", "where"])
            if kind == "not" or (b is None and kind in ("and", "or")):
                return self.new(f"~{n}", s, d, True)
            if kind in ("and", "or"):
                assert b is not None
                op = "&" if kind == "and" else "|"
                return self.new(f"{n} {op} {b.name}", tuple(np.broadcast_shapes(s, b.shape)),
                                d, True)
            if kind == "count":
                return self.new(f"{n}.to(ember.{self.base}) * 0.5", s, self.base, True)
            f = self.partner(a)
            if f is None:
                return self.new(f"~{n}", s, d, True)
            return self.new(f"ember.where({n}, {f.name}, -{f.name})",
                            tuple(np.broadcast_shapes(s, f.shape)), f.dtype, f.exact)
        b = self.partner(a, _INTS)
        kind = self.pick(["add", "mul", "wrap", "abs", "neg", "max", "where", "clamp", "cmp",
                          "float"])
        if b is not None and kind in ("add", "max", "where"):
            s2 = tuple(np.broadcast_shapes(s, b.shape))
            d2 = self.promote(d, b.dtype)
            expr = {"add": f"{n} - {b.name}", "max": f"ember.maximum({n}, {b.name})",
                    "where": f"ember.where({n} > {b.name}, {n}, {b.name} * 2)"}[kind]
            return self.new(expr, s2, d2, True)
        low = "2" if d == "uint8" else "-2"  # (a Python int must fit the tensor's dtype)
        if kind == "cmp":
            return self.new(f"{n} > {self.pick(['0', '2', low])}", s, "bool", True)
        if kind == "float":
            return self.new(f"{n}.to(ember.{self.base}) * 0.25", s, self.base, True)
        expr = {"add": f"{n} + 3", "mul": f"{n} * {low}", "wrap": f"{n} * 45 + 7",
                "abs": f"{n}.abs()", "neg": f"-{n}",
                "max": f"ember.maximum({n}, 1)", "where": f"ember.where({n} < 1, {n} * 3, {n})",
                "clamp": f"{n}.clamp({low}, 4)"}[kind]
        return self.new(expr, s, d, True)

    def chain(self, a: Value, length: int) -> Value:
        for _ in range(length):
            if a.dtype not in _FLOAT:
                a = self.int_op(a)
            else:
                a = self.binary(a) if self.chance(0.45) else self.unary(a)
        return a

    # -- reductions -------------------------------------------------------------------------

    def reduce(self, x: Value) -> Value:
        """A reduction of ``x`` (after a prologue), often used again with ``x`` (epilogue)."""
        if self.chance(0.7):
            x = self.chain(x, int(self.r.integers(1, 4)))
        if x.dtype == "bool" or not x.shape:
            return x if x.dtype != "bool" else self.int_op(x)
        rank = len(x.shape)
        where = self.pick(["inner", "inner", "inner", "axis0", "axis0", "all", "mixed"])
        if where == "inner" and rank > 1:
            dims: Any = self.pick([-1, rank - 1] + ([1, (1, 2)] if rank > 2 else []))
        elif where == "all":
            dims = None
        elif where == "mixed" and rank > 1:
            dims = (0, -1)
        else:
            dims = 0
        keep = self.chance(0.5)
        axes = (tuple(range(rank)) if dims is None else
                tuple(sorted(d % rank for d in (dims if isinstance(dims, tuple) else (dims,)))))
        count = math.prod(x.shape[d] for d in axes)
        shape = tuple(1 if d in axes else e for d, e in enumerate(x.shape) if keep or d not in axes)
        if x.dtype in _INTS:
            kinds = ["sum", "amax", "amin", "argmax", "argmin"]
        else:
            kinds = ["sum", "sum", "mean", "amax", "amin", "var", "anyall"]
            if count <= 8:
                kinds.append("prod")
            if x.exact:
                kinds += ["argmax", "argmin"]
        kind = self.pick(kinds)
        if kind in ("argmax", "argmin") and isinstance(dims, tuple):
            dims = axes[-1]
            shape = tuple(1 if d == dims else e for d, e in enumerate(x.shape)
                          if keep or d != dims)
        dim_s = "" if dims is None else f"dim={dims}, "
        n = x.name
        if kind == "anyall":
            c = self.new(f"{n} > {self.pick(['0.5', '-0.25'])}", x.shape, "bool", True)
            fn = self.pick(["any", "all"])
            r = self.new(f"{c.name}.{fn}({dim_s}keepdim={keep})", shape, "bool", True)
            return self.epilogue(x, r) if self.chance(0.5) else r
        if kind in ("argmax", "argmin"):
            arg = "" if dims is None else f"dim={dims}, "
            r = self.new(f"{n}.{kind}({arg}keepdim={keep})", shape, "int64", True)
            if self.chance(0.3):
                r = self.new(f"{r.name} * 2 + 1", shape, "int64", True)
            elif self.chance(0.4):
                r = self.new(f"{r.name}.to(ember.{self.base}) * 0.5", shape, self.base, True)
            return r
        if kind == "var":
            corr = self.pick([0, 1])
            r = self.new(f"{n}.var({dim_s}keepdim={keep}, correction={corr})", shape, x.dtype,
                         False)
        else:
            dt = "int64" if x.dtype in _INTS and kind == "sum" else x.dtype
            r = self.new(f"{n}.{kind}({dim_s}keepdim={keep})", shape, dt,
                         x.exact and kind != "mean" and kind != "prod")
        if self.chance(0.7):
            return self.epilogue(x, r)
        return r

    def epilogue(self, x: Value, r: Value) -> Value:
        """``r`` (a reduction of ``x``) used again with ``x``: the normalisation pattern."""
        rn = r.name
        try:
            s = tuple(np.broadcast_shapes(x.shape, r.shape))
        except ValueError:
            s = ()
        if s != x.shape:
            if len(r.shape) == len(x.shape) - 1 and x.shape[:-1] == r.shape:
                r = self.new(f"{rn}.unsqueeze(-1)", (*r.shape, 1), r.dtype, r.exact)
                rn = r.name
            else:
                return self.chain(r, 1) if r.dtype != "bool" else self.int_op(r)
        n = x.name
        if r.dtype == "bool":
            if x.dtype == "bool":
                return self.new(f"{n} & {rn}", x.shape, "bool", True)
            return self.new(f"ember.where({rn}, {n}, {n} * 0.5)", x.shape, x.dtype, x.exact)
        d = self.promote(x.dtype, r.dtype)
        exact = x.exact and r.exact
        kind = self.pick(["sub", "subexp", "mul", "div", "where", "cmp"])
        if kind == "sub" or (kind == "cmp" and not exact):
            e = self.new(f"{n} - {rn}", x.shape, d, exact)
        elif kind == "subexp":
            e = self.new(f"({n} - {rn}).clamp(-30, 30).exp()", x.shape, d, False)
        elif kind == "mul":
            e = self.new(f"({n} * {rn}).clamp(-64, 64)", x.shape, d, False)
        elif kind == "div":
            e = self.new(f"{n} / ({rn}.abs() + 1)", x.shape, d, False)
        elif kind == "where":
            e = self.new(f"ember.where({n} > {rn}, {n}, {rn})", x.shape, d, exact)
        else:
            e = self.new(f"{n} >= {rn}", x.shape, "bool", True)
        if self.chance(0.4):
            e = self.unary(e) if e.dtype != "bool" else self.int_op(e)
        return e

    # -- row patterns and matmuls -----------------------------------------------------------

    def row(self, x: Value) -> Value:
        """softmax, log_softmax, layer_norm, rms_norm (with a residual add and a cast)."""
        n = x.name
        s, d = x.shape, x.dtype
        if self.chance(0.4):
            y = self.partner(x)
            if y is not None and np.broadcast_shapes(s, y.shape) == s:
                x = self.new(f"{n} + {y.name}", s, self.promote(d, y.dtype), False)
                n, d = x.name, x.dtype
        keep = (*s[:-1], 1)
        kind = self.pick(["softmax", "log_softmax", "layer_norm", "rms_norm", "lib"])
        if kind == "softmax":
            m = self.new(f"{n}.amax(-1, keepdim=True)", keep, d, False)
            e = self.new(f"({n} - {m.name}).exp()", s, d, False)
            out = self.new(f"{e.name} / {e.name}.sum(-1, keepdim=True)", s, d, False)
        elif kind == "log_softmax":
            m = self.new(f"{n} - {n}.amax(-1, keepdim=True)", s, d, False)
            out = self.new(f"{m.name} - {m.name}.exp().sum(-1, keepdim=True).log()", s, d,
                           False)
        elif kind in ("layer_norm", "rms_norm"):
            w = self.inp(s[-1:], d)
            if kind == "layer_norm":
                c = self.new(f"{n} - {n}.mean(-1, keepdim=True)", s, d, False)
            else:
                c = x
            v = self.new(f"({c.name} * {c.name}).mean(-1, keepdim=True)", keep, d, False)
            out = self.new(f"{c.name} * ({v.name} + 1e-5).rsqrt() * {w.name}", s, d, False)
            if kind == "layer_norm" and self.chance(0.5):
                b = self.inp(s[-1:], d)
                out = self.new(f"{out.name} + {b.name}", s, d, False)
        else:
            fn = self.pick([f"softmax({n}, -1)", f"log_softmax({n}, -1)",
                            f"layer_norm({n}, ({s[-1]},))"])
            out = self.new(f"ember.nn.functional.{fn}", s, d, False)
        if self.chance(0.3):
            other = "float64" if d == "float32" else "float32"
            out = self.new(f"{out.name}.to(ember.{other})", s, other, False)
        return out

    def matmul(self, a: Value) -> Value:
        """``a @ w`` (2-D) with an epilogue: bias, activation, residual, scale, cast, and maybe
        a row reduction or softmax of the result."""
        d = a.dtype
        rows, k = a.shape
        m = self.size(False)
        if self.chance(0.3):  # a linear layer's weight: (out, in), transposed
            w = self.inp((m, k), d)
            h = self.new(f"{a.name} @ {w.name}.t()", (rows, m), d, a.exact)
        else:
            w = self.inp((k, m), d)
            h = self.new(f"{a.name} @ {w.name}", (rows, m), d, a.exact)
        s = h.shape
        for _ in range(int(self.r.integers(1, 5))):
            kind = self.pick(["bias", "act", "residual", "scale", "cast", "gelu"])
            n = h.name
            if kind == "bias":
                b = self.inp((m,), h.dtype)
                h = self.new(f"{n} + {b.name}", s, h.dtype, h.exact)
            elif kind == "act":
                fn = self.pick(["relu()", "tanh()", "sigmoid()", "clamp(-2, 2)"])
                h = self.new(f"{n}.{fn}", s, h.dtype, h.exact and fn[0] in "rc")
            elif kind == "gelu":
                h = self.new(f"{n} * ({n} * 1.702).sigmoid()", s, h.dtype, False)
            elif kind == "residual":
                res = self.inp(s, h.dtype)
                h = self.new(f"{n} + {res.name}", s, h.dtype, h.exact)
            elif kind == "scale":
                h = self.new(f"{n} * 0.125", s, h.dtype, h.exact)
            else:
                other = "float64" if h.dtype == "float32" else "float32"
                h = self.new(f"{n}.to(ember.{other})", s, other, h.exact)
        if self.chance(0.35):
            h = self.row(h) if self.chance(0.5) else self.reduce(h)
        return h

    def sync(self, a: Value) -> Value:
        """A sync point inside the program: a host scalar read off a pending value, or an item
        assignment into a copy of one; then more ops on the result."""
        if not a.shape:
            return self.unary(a)
        if self.chance(0.5):
            v = self.new(f"{a.name} - float({a.name}.mean()) * 0.5", a.shape, a.dtype, False)
        else:
            v = self.new(f"{a.name}.clone()", a.shape, a.dtype, a.exact)
            self.lines.append(f"{v.name}[0] = 0.25")
        return self.reduce(v) if self.chance(0.5) else self.chain(v, 2)

    # -- a program --------------------------------------------------------------------------

    def build(self) -> Program:
        rows, inner = self.size(True), self.size(False)
        shape: tuple[int, ...] = (rows, inner)
        if self.chance(0.15):
            shape = (rows, int(self.rs.integers(2, 4)), inner)
        x = self.inp(shape, self.base)
        if self.chance(0.6):
            self.inp(shape, self.pick([self.base, self.base, "float32", "float64"]))
        if self.chance(0.4):
            self.inp(shape[-1:], self.base)
        if self.chance(0.3):
            self.inp((*shape[:-1], 1), self.base)
        if self.chance(0.2):
            self.inp((), self.base)
        if self.chance(0.2):  # a strided or broadcast view of an input
            self.view_input(shape)
        if self.chance(0.15):  # (8- and 16-bit ints wrap: a fused kernel must wrap as well)
            self.inp(shape, self.pick(["int32", "int64", "int32", "int8", "uint8", "int16"]))
        if self.chance(0.1):
            self.inp(shape, "bool")
        last = x
        for _ in range(int(self.r.integers(1, 3 if self.small else 5))):
            motif = self.pick(["chain", "reduce", "reduce", "reduce", "row", "matmul",
                               "matmul", "int", "sync"])
            if motif == "sync":
                last = self.sync(self.pick(self.floats(1)[-4:] or [x]))
                continue
            if motif == "int":
                ints = [v for v in self.pool if v.dtype not in _FLOAT and v.shape]
                if not ints:
                    f = self.pick([v for v in self.floats(1) if v.exact] or [x])
                    ints = [self.new(f"({f.name} * {GRID}).to(ember.int32)", f.shape, "int32",
                                     True)] if f.exact else [x]
                last = self.chain(self.pick(ints), int(self.r.integers(1, 4)))
                if self.chance(0.6) and last.shape:
                    last = self.reduce(last)
                continue
            cands = self.floats(2 if motif in ("row", "matmul") else 1)
            if motif == "matmul":
                cands = [v for v in cands if len(v.shape) == 2]
            a = self.pick(cands[-4:]) if cands else x
            if motif == "chain" or not cands:
                last = self.chain(a, int(self.r.integers(2, 6)))
            elif motif == "reduce":
                last = self.reduce(a)
            elif motif == "row":
                last = self.row(a)
            else:
                last = self.matmul(a)
        outs = [last.name]
        for v in self.made:
            if v.name not in outs and self.chance(0.15):
                outs.append(v.name)
        if not self.made:
            outs = [self.new(f"{x.name} * 2.0", x.shape, x.dtype, True).name]
        return Program(self.seed, self.shapes, self.small, self.inputs, self.lines, outs[:4],
                       tuple(v.dtype for v in self.made))


def layer_program(seed: int, small: bool = False, shapes: int | None = None) -> Program:
    """The random layer program of ``seed`` over the shapes of ``shapes`` (default: ``seed``);
    ``small``: small shapes (for the Triton interpreter)."""
    return _Gen(seed, small, seed if shapes is None else shapes).build()


def run_program(program: Program, device: str) -> list[np.ndarray]:
    """``program``'s outputs computed on ``device`` (its intermediates die before the flush)."""
    ns: dict[str, Any] = {"ember": ember}
    exec(compile(program.source(), f"<layer program {program.seed}>", "exec"), ns)
    outs = ns["program"](*[ember.tensor(a, device=device) for a in program.arrays()])
    return [o.numpy() for o in outs]


def check_program(seed: int, fused: str, plain: str, small: bool = False,
                  shapes: int | None = None, runs: int = 1,
                  between: Callable[[], object] | None = None) -> Program:
    """Run layer program ``seed`` (`layer_program`) on ``fused`` (``runs`` times, calling
    ``between`` between runs: a compiler may change paths on a kernel's later calls) and on
    ``plain``; raise AssertionError naming the seed, devices and source where an output
    differs (exactly for ints and bools, within `TOL` for floats).  The message says how to
    replay it."""
    p = layer_program(seed, small, shapes)
    where = (f"layer program {seed} (shapes {p.shapes}, small={small}) on {fused} vs {plain}; "
             f"replay with ember_fusion.testing.check_program({seed}, {fused!r}, {plain!r}, "
             f"{small}, {p.shapes}):\n{p.source()}")
    try:
        want = run_program(p, plain)
    except Exception as exc:  # the plain device refuses the program: the generator's bug
        raise AssertionError(f"{where}\nthe unfused run raised {exc!r}") from exc
    for run in range(runs):
        if run and between is not None:
            between()
        try:
            got = run_program(p, fused)
        except Exception as exc:
            raise AssertionError(f"{where}\nthe fused run {run + 1} raised {exc!r}") from exc
        _agree(p, got, want, f"{where}\nfused run {run + 1}")
    return p


def _agree(p: Program, got: list[np.ndarray], want: list[np.ndarray], where: str) -> None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        what = f"{where}, output {k} ({p.outputs[k]})"
        assert g.shape == w.shape and g.dtype == w.dtype, (
            f"{what}: {g.shape} {g.dtype} fused, {w.shape} {w.dtype} unfused")
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=what)
        else:
            finite = np.abs(w[np.isfinite(w)])
            scale = max(1.0, float(finite.max())) if finite.size else 1.0
            np.testing.assert_allclose(g, w, rtol=p.tol, atol=p.tol * scale, equal_nan=True,
                                       err_msg=what)


def census(device: str) -> dict[str, int]:
    """What ``device``'s fusion decorator compiled so far (its kernel cache): how many groups of
    each kind got a generated kernel, and how many ran unfused (op by op) although they hold
    several ops.  Kinds: ``prologue`` (a reduction reading an op of its group), ``epilogue``
    (an op reading a reduction of its group), ``cross`` (a reduction over axis 0), ``matmul``
    (a matmul head with an epilogue); ``groups`` counts every group of two or more ops;
    ``unfused`` those of three or more that ran op by op (the compilers run groups of two so),
    ``unfused_16bit`` such groups with a 16-bit float (the opencl compiler runs those so)."""
    from ._api import _backend

    counts = dict.fromkeys(("groups", "prologue", "epilogue", "cross", "matmul", "unfused",
                            "unfused_16bit"), 0)
    for key, kernel in list(_backend(device).kernel_cache.items()):
        nodes = key[0]
        if len(nodes) < 2:
            continue
        counts["groups"] += 1
        name = getattr(kernel, "__qualname__", type(kernel).__qualname__)
        if "op_by_op" in name or "_unfused" in name:
            low = any(d.name in ("float16", "bfloat16")
                      for d in [n.dtype for n in nodes] + [d for _, d in key[1]])
            counts["unfused_16bit" if low else "unfused"] += len(nodes) > 2  # (two: by design)
            continue
        red = {j for j, n in enumerate(nodes) if n.kind == "reduction"}
        if any(j in red and any(a >= 0 for a in n.args) for j, n in enumerate(nodes)):
            counts["prologue"] += 1
        if any(a in red for n in nodes for a in n.args):
            counts["epilogue"] += 1
        if key[5]:
            counts["cross"] += 1
        if nodes[0].kind == "matmul":
            counts["matmul"] += 1
    return counts


def check_census(devices: Sequence[str], least: dict[str, int]) -> None:
    """Every group of three or more ops the layer programs gave ``devices`` got a generated
    kernel, and at least ``least[kind]`` groups of each kind did (`census`): a test of fused
    programs cannot pass by running them op by op."""
    for device in devices:
        got = census(device)
        assert got["unfused"] == 0, got
        for kind, n in least.items():
            assert got[kind] >= n, (device, got)
