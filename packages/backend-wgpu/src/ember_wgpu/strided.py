"""Generated strided kernels: one invocation per element of an N-d iteration space.

`run_map` evaluates WGSL expressions over inputs broadcast to a shape and stores them into
fresh contiguous arrays or into given (strided) views.  Axes that every operand walks
contiguously are merged first; sizes, strides and offsets are parameter words, so one pipeline
serves every shape and layout of the same expressions and dtypes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.backend.strided import broadcast_view, collapse, is_float, walk

from .render import WGSL_TYPES, prelude, wrap
from .runtime import GROUP, MAXD, STORAGE, Runtime, WGArray, storage_dtype

__all__ = ["broadcast_view", "collapse", "contiguous", "copy_into", "header", "is_float", "load",
           "run_indexed", "run_map", "scalar_words", "shared_get", "shared_put",
           "shared_type", "store", "wgsl_compute", "wgsl_storage"]


def wgsl_storage(dtype: np.dtype[Any]) -> str:
    return STORAGE[np.dtype(dtype).name][0]


def wgsl_compute(dtype: np.dtype[Any]) -> str:
    """The WGSL type values of ``dtype`` compute in (float16 in f32, bool as bool)."""
    name = np.dtype(dtype).name
    return "bool" if name == "bool" else ("f32" if name == "float16" else STORAGE[name][0])


def ir_name(dtype: np.dtype[Any]) -> str:
    return np.dtype(dtype).name


#: how a stored element is read as its compute type, and a computed value stored, where that
#: is not the value itself (`store` wraps the narrow integers, `ember_wgpu.render.wrap`)
_LOAD = {"bool": "({} != 0u)", "float16": "f32({})"}
_STORE = {"bool": "select(0u, 1u, {})", "float16": "f16({})", "bfloat16": "bf16_({})"}


def load(dtype: np.dtype[Any], ref: str) -> str:
    """WGSL converting the stored element ``ref`` of ``dtype`` to its compute type."""
    return _LOAD.get(np.dtype(dtype).name, "{}").format(ref)


def store(dtype: np.dtype[Any], value: str) -> str:
    """WGSL converting ``value`` (of the compute type) to the storage of ``dtype``."""
    name = np.dtype(dtype).name
    spelling = _STORE.get(name)
    return wrap(value, name) if spelling is None else spelling.format(value)


def shared_type(compute: str) -> str:
    """The element type of a work-group array holding values that compute in ``compute``:
    bools as ``u32`` (a ``bool`` there may be one byte, and NVIDIA's driver races neighbouring
    lanes' byte writes: wrong ``any``/``all``)."""
    return "u32" if compute == "bool" else compute


def shared_put(compute: str, value: str) -> str:
    """``value`` as stored in a `shared_type` work-group array."""
    return f"select(0u, 1u, {value})" if compute == "bool" else value


def shared_get(compute: str, ref: str) -> str:
    """The element ``ref`` of a `shared_type` work-group array, as a value of ``compute``."""
    return f"({ref} != 0u)" if compute == "bool" else ref


def scalar_words(dtype: str, value: Any) -> list[int]:
    """The 32-bit parameter words of a scalar of IR compute ``dtype``."""
    if dtype == "float32":
        return [struct.unpack("<i", struct.pack("<f", float(value)))[0]]
    if dtype in ("int64", "uint64"):
        v = int(value) % (1 << 64)
        lo, hi = v & 0xFFFFFFFF, v >> 32
        return [lo - (1 << 32) if lo >= 1 << 31 else lo, hi - (1 << 32) if hi >= 1 << 31 else hi]
    v = int(bool(value)) if dtype == "bool" else int(value) % (1 << 32)
    return [v - (1 << 32) if v >= 1 << 31 else v]


def _scalar_decl(j: int, dtype: str, at: int) -> tuple[str, int]:
    if dtype == "float32":
        return f"let s{j} = bitcast<f32>(P[{at}]);", 1
    if dtype == "int64":
        return f"let s{j} = i64(bitcast<u32>(P[{at}])) | (i64(P[{at + 1}]) << 32u);", 2
    if dtype == "bool":
        return f"let s{j} = P[{at}] != 0;", 1
    if dtype in ("int32", "int8", "int16"):
        return f"let s{j} = P[{at}];", 1
    if dtype in ("uint32", "uint8"):
        return f"let s{j} = bitcast<u32>(P[{at}]);", 1
    raise NotImplementedError(f"wgpu: a scalar of {dtype}")


def header(storage: Sequence[str], n_read: int) -> str:
    """Bindings ``b0..``: ``n_read`` read-only arrays, then written ones, then ``P``."""
    out = ["enable f16;"] if "f16" in storage else []
    for k, t in enumerate(storage):
        access = "read" if k < n_read else "read_write"
        out.append(f"@group(0) @binding({k}) var<storage, {access}> b{k}: array<{t}>;")
    out.append(f"@group(0) @binding({len(storage)}) var<storage, read> P: array<i32>;")
    return "\n".join(out)


ENTRY = (f"@compute @workgroup_size({GROUP})\n"
         "fn main(@builtin(global_invocation_id) gid: vec3<u32>, "
         "@builtin(num_workgroups) nwg: vec3<u32>) {\n"
         f"    let i = i32(gid.x + gid.y * nwg.x * {GROUP}u);\n")


#: work-group size of the elementwise maps (`map_into`), and the elements each invocation
#: takes (``PER`` of them, ``WIDE`` apart: every round of loads of a work-group is one dense
#: run, and an invocation has ``PER`` loads in flight).  See docs/webgpu.md for the timings
#: that chose them.
WIDE = 256
PER = 1
#: dense 32-bit operands of a flat map read and written as ``vec4`` (`_vec_source`)
VEC = True


def _map_main(body: Sequence[str], hoisted: Sequence[str], i: str = "i") -> str:
    """The entry point of an elementwise map: ``hoisted`` statements once, then ``body``
    (which starts by returning past the last element) for each of the invocation's
    `PER` indices ``i`` (named ``i``)."""
    head = (f"@compute @workgroup_size({WIDE})\n"
            "fn main(@builtin(workgroup_id) wid: vec3<u32>, "
            "@builtin(local_invocation_id) lid: vec3<u32>, "
            "@builtin(num_workgroups) nwg: vec3<u32>) {\n")
    first = f"i32((wid.x + wid.y * nwg.x) * {WIDE * PER}u + lid.x)"
    if PER == 1:
        return head + "\n".join([*hoisted, f"    let {i} = {first};", *body]) + "\n}\n"
    return head + "\n".join([
        *hoisted, f"    let first = {first};",
        f"    for (var u = 0; u < {PER}; u = u + 1) {{", f"    let {i} = first + u * {WIDE};",
        *body, "    }"]) + "\n}\n"


_SOURCES: dict[tuple[Any, ...], str] = {}


def _walk(n_ops: int, flat: tuple[int, ...] | None) -> list[str]:
    """WGSL setting each operand's offset ``o{k}`` for the linear index ``i``.

    Operand k's words: its offset at ``base + k * (MAXD + 1)``, its strides after it (inputs
    first).  ``flat``: the walk has one axis and each operand's stride over it (0 or 1), so an
    offset is its first element's, plus ``i`` where the stride is 1 (lanes then read
    neighbouring elements in a way the compiler sees).  Otherwise the inner axes are peeled
    off with a division each, and what is left of the index is the outermost axis's
    coordinate (no division for it).
    """
    base = 2 + MAXD
    if flat is not None:
        return [f"    let o{k} = P[{base + k * (MAXD + 1)}]{' + i' if step else ''};"
                for k, step in enumerate(flat)]
    body = ["    var r = i;"]
    body += [f"    var o{k} = P[{base + k * (MAXD + 1)}];" for k in range(n_ops)]
    walk = "".join(f" o{k} = o{k} + q * P[{base + k * (MAXD + 1) + 1} + d];"
                   for k in range(n_ops))
    body += ["    for (var d = P[1] - 1; d >= 1; d = d - 1) {",
             "        let n = P[2 + d];",
             f"        let t = r / n; let q = r - t * n; r = t;{walk}", "    }"]
    # a 0-d walk (P[1] == 0) has the one index 0, so the outer term adds nothing there
    body += ["".join(f" o{k} = o{k} + r * P[{base + k * (MAXD + 1) + 1}];"
                     for k in range(n_ops)).replace(" ", "    ", 1)]
    return body


def flat_steps(template: Sequence[int], at: Sequence[int]) -> tuple[int, ...] | None:
    """Each operand's stride (0 or 1) where a walk's words (`_layout`'s) have at most one
    axis and no other strides; else None (the general walk)."""
    if template[1] > 1:
        return None
    steps = tuple(template[k + 1] for k in at)
    return steps if all(s in (0, 1) for s in steps) else None


def _source(lines: Sequence[str], outs: Sequence[tuple[str, np.dtype[Any]]],
            in_dtypes: Sequence[np.dtype[Any]], names: Sequence[str],
            scalar_types: Sequence[str], raw: bool, body_text: str | None = None,
            flat: tuple[int, ...] | None = None) -> str:
    n_ops = len(outs) + len(in_dtypes)
    storage = [wgsl_storage(d) for d in in_dtypes] + [wgsl_storage(d) for _, d in outs]
    base = 2 + MAXD
    body = ["    if (i >= P[0]) { return; }", *_walk(n_ops, flat)]
    at = base + n_ops * (MAXD + 1)
    decls = []
    for j, t in enumerate(scalar_types):
        decl, used = _scalar_decl(j, t, at)
        decls.append(f"    {decl}")
        at += used
    if body_text is not None:  # a kernel of its own over the walked offsets (`run_indexed`)
        body += decls
        body.append(f"    let X = {at};")
        body += [f"    {line}" for line in body_text.splitlines()]
        main = ENTRY + "\n".join(body) + "\n}\n"
        return header(storage, len(in_dtypes)) + "\n" + prelude(main) + main
    for k, (dt, name) in enumerate(zip(in_dtypes, names, strict=False)):
        ref = f"b{k}[o{k}]"
        body.append(f"    let {name} = {ref if raw else load(dt, ref)};")
    body += [f"    {line}" for line in lines]
    for m, (expr, dt) in enumerate(outs):
        k = len(in_dtypes) + m
        body.append(f"    b{k}[o{k}] = {expr if raw else store(dt, expr)};")
    main = _map_main(body, decls)
    return header(storage, len(in_dtypes)) + "\n" + prelude(main) + main


def _vec_source(lines: Sequence[str], outs: Sequence[tuple[str, np.dtype[Any]]],
                in_dtypes: Sequence[np.dtype[Any]], names: Sequence[str],
                scalar_types: Sequence[str], raw: bool, steps: tuple[int, ...]) -> str:
    """A flat map whose dense operands (step 1, 32-bit storage, first elements at multiples
    of 4, a length a multiple of 4) are bound as ``vec4`` arrays: an invocation loads four
    elements of each at once and evaluates the expressions for each component in a block of
    its own (names do not clash), so it has a 16-byte load of each input in flight; the
    broadcast operands (step 0) stay scalar."""
    n_in = len(in_dtypes)
    dts = [*in_dtypes, *(d for _, d in outs)]
    base = 2 + MAXD
    storage = [f"vec4<{wgsl_storage(d)}>" if st else wgsl_storage(d)
               for st, d in zip(steps, dts, strict=True)]
    at = base + len(dts) * (MAXD + 1)
    hoisted = []
    for j, t in enumerate(scalar_types):
        decl, used = _scalar_decl(j, t, at)
        hoisted.append(f"    {decl}")
        at += used
    off = [f"P[{base + k * (MAXD + 1)}]" for k in range(len(dts))]
    body = ["    if (q * 4 >= P[0]) { return; }"]
    for k in range(n_in):
        body.append(f"    let V{k} = b{k}[{off[k]} / 4 + q];" if steps[k]
                    else f"    let V{k} = b{k}[{off[k]}];")
    for m, (_, dt) in enumerate(outs):
        body.append(f"    var R{m}: vec4<{wgsl_storage(dt)}>;")
    for c in "xyzw":
        body.append("    {")
        body.append(f"    let i = q * 4 + {'xyzw'.index(c)};")
        for k, (dt, name) in enumerate(zip(in_dtypes, names, strict=False)):
            ref = f"V{k}.{c}" if steps[k] else f"V{k}"
            body.append(f"    let {name} = {ref if raw else load(dt, ref)};")
        body += [f"    {line}" for line in lines]
        for m, (expr, dt) in enumerate(outs):
            body.append(f"    R{m}.{c} = {expr if raw else store(dt, expr)};")
        body.append("    }")
    for m in range(len(outs)):
        k = n_in + m
        body.append(f"    b{k}[{off[k]} / 4 + q] = R{m};")
    main = _map_main(body, hoisted, "q")
    return header(storage, n_in) + "\n" + prelude(main) + main


def _vec_ok(steps: tuple[int, ...] | None, operands: Sequence[WGArray], total: int) -> bool:
    """Whether a flat map can take `_vec_source`."""
    return (VEC and steps is not None and total % 4 == 0 and any(steps)
            and all(storage_dtype(x.dtype).itemsize == 4 and (not st or x.offset % 4 == 0)
                    for st, x in zip(steps, operands, strict=True)))


NAMES = ("a", "b", "c", "d")


def run_map(rt: Runtime, expr: str, inputs: Sequence[WGArray], *,
            out: WGArray | None = None, shape: Sequence[int] | None = None,
            dtype: np.dtype[Any] | None = None, scalars: Sequence[tuple[str, Any]] = (),
            lines: Sequence[str] = ()) -> WGArray:
    """Evaluate ``expr`` (inputs named ``a b c d``, scalars ``s0 s1`` of IR dtypes, linear
    index ``i``, after the ``let`` statements ``lines``) into a new array or into ``out``."""
    if out is None:
        if shape is None:
            shape = np.broadcast_shapes(*(x.shape for x in inputs))
        out = rt.empty(tuple(shape), inputs[0].dtype if dtype is None else np.dtype(dtype))
    map_into(rt, list(lines), [(expr, out)], inputs, NAMES, scalars)
    return out


#: per layout (the output's shape, each operand's shape and strides): the merged axes and
#: each operand's strides over them, as parameter words with the offsets left 0
_LAYOUTS: dict[tuple[Any, ...], tuple[list[int], list[int]]] = {}


def _layout(shape: tuple[int, ...], inputs: Sequence[WGArray], outs: Sequence[WGArray]
            ) -> tuple[list[int], list[int]]:
    """The parameter words of a walk over ``shape`` (inputs broadcast to it): the words with
    every operand's offset 0, and where each offset goes.  Cached per layout: a chain of
    small ops repeats a handful of them."""
    key = (shape, *((x.shape, x.strides) for x in inputs), *(o.strides for o in outs))
    got = _LAYOUTS.get(key)
    if got is not None:
        return got
    dims, sts = walk(shape, inputs, outs, MAXD, "wgpu: elementwise kernels")
    words = [math.prod(shape), len(dims), *dims, *([0] * (MAXD - len(dims)))]
    at = []
    for s in sts:
        at.append(len(words))
        words += [0, *s, *([0] * (MAXD - len(s)))]
    if len(_LAYOUTS) > 4096:
        _LAYOUTS.clear()
    got = _LAYOUTS[key] = (words, at)
    return got


def map_into(rt: Runtime, lines: list[str], outs: Sequence[tuple[str, WGArray]],
             inputs: Sequence[WGArray], names: Sequence[str],
             scalars: Sequence[tuple[str, Any]] = ()) -> None:
    """Store each ``(expression, view)`` of ``outs`` (views of one shape) for every element."""
    shape = outs[0][1].shape
    total = math.prod(shape)
    if total == 0:
        return
    out_views = [o for _, o in outs]
    template, at = _layout(shape, inputs, out_views)
    raw = (len(outs) == 1 and outs[0][0] == names[0] and len(inputs) == 1
           and inputs[0].dtype == outs[0][1].dtype and not lines)
    flat = flat_steps(template, at)
    vec = flat is not None and _vec_ok(flat, [*inputs, *out_views], total)
    key = (tuple(lines), tuple((e, o.dtype) for e, o in outs), tuple(x.dtype for x in inputs),
           tuple(names[:len(inputs)]), tuple(t for t, _ in scalars), raw, flat, vec, WIDE,
           PER)
    src = _SOURCES.get(key)
    if src is None:
        parts = (lines, [(e, o.dtype) for e, o in outs], [x.dtype for x in inputs], names,
                 [t for t, _ in scalars], raw)
        src = _SOURCES[key] = (_vec_source(*parts, flat) if vec and flat is not None
                               else _source(*parts, flat=flat))
    words = template.copy()
    for k, v in zip(at, [*inputs, *out_views], strict=True):
        words[k] = v.offset
    for t, val in scalars:
        words += scalar_words(t, val)
    per = PER * 4 if vec else PER
    rt.dispatch(src, list(inputs), out_views, words, -(-total // per), group=WIDE)


def run_indexed(rt: Runtime, body: str, inputs: Sequence[WGArray], outs: Sequence[WGArray],
                extra: Sequence[int] = ()) -> None:
    """Run WGSL statements ``body`` once per element of the views ``outs`` (one shape; the
    ``inputs`` broadcast to it): operand ``k`` (inputs first, then outputs) is the array
    ``b{k}`` at the walked offset ``o{k}``, ``i`` the linear index, and ``extra`` the
    parameter words ``P[X]``, ``P[X + 1]``, ...  Loads and stores are the body's own (raw
    storage values)."""
    shape = outs[0].shape
    total = math.prod(shape)
    if total == 0:
        return
    dims, sts = walk(shape, inputs, outs, MAXD, "wgpu: indexed kernels")
    words = [total, len(dims), *dims, *([0] * (MAXD - len(dims)))]
    at = []
    for v, s in zip([*inputs, *outs], sts, strict=True):
        at.append(len(words))
        words += [v.offset, *s, *([0] * (MAXD - len(s)))]
    flat = flat_steps(words, at)
    key = ("indexed", body, tuple(x.dtype for x in inputs), tuple(o.dtype for o in outs), flat)
    src = _SOURCES.get(key)
    if src is None:
        src = _SOURCES[key] = _source([], [("", o.dtype) for o in outs],
                                      [x.dtype for x in inputs], (), (), True, body, flat)
    rt.dispatch(src, list(inputs), list(outs), [*words, *extra], total)


def copy_into(rt: Runtime, dst: WGArray, src: WGArray) -> WGArray:
    """Copy ``src`` (broadcast) into the view ``dst``."""
    return run_map(rt, "a", [src], out=dst)


def contiguous(rt: Runtime, x: WGArray) -> WGArray:
    """``x`` itself when dense, else a dense copy."""
    return x if x.is_contiguous() else run_map(rt, "a", [x])


WGSL = WGSL_TYPES
