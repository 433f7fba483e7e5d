"""Sorting along one axis: a rank sort for short lines, a bitonic sort for long ones.

Both are stable and order as numpy's and PyTorch's stable sorts do: nan is the largest value
(last ascending, first descending), ``-0.0`` equals ``0.0``, and equal values keep the order of
their indices, descending too.  Values are gathered from the input by the sorted indices, so
a ``-0.0`` or a nan's payload comes out as it went in.

*Rank sort* (lines of at most `RANK_MAX` elements): one dispatch, one invocation per element,
which counts the elements of its line that go before it and writes itself there; O(n^2)
comparisons per line, all in parallel and free of barriers.

*Bitonic sort* (longer lines): each element becomes a key whose integer order is the sort's
order (`_key`: a float's bits with the sign folded, every nan one largest key and both zeros
one key; an integer's with its sign bit flipped; complemented for descending), paired with its
index in the line.  Pairs compare by key, then index: a strict total order, so the network's
result is the stable order although a bitonic network is not stable by itself.  Lines are
padded to ``N``, a power of two, with pairs of the largest key and indices ``n..N-1`` (they go
last) and laid end to end, lines shorter than a tile sharing one.  One dispatch sorts every
`TILE` consecutive pairs in workgroup memory (blocks of ``min(N, TILE)``: each line on its
own, `_tile_source`); then each merge stage ``k = 2 TILE .. N`` runs its steps of stride
``TILE`` or more as global passes of up to three steps (`_global_source`) and the rest in one
dispatch in workgroup memory again.  An invocation holds eight pairs in registers and does
three steps of the network on them between two visits to memory, so 2^20 elements take
1 + 22 + 10 dispatches for the network's 210 steps.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ember.backend.movement import first_k

from .render import prelude
from .runtime import GROUP, MAXD, Runtime, WGArray
from .strided import collapse, header, is_float, wgsl_storage

__all__ = ["RANK_MAX", "TILE", "rank_max", "sort", "topk"]

#: lines of at most this many elements take the rank sort, by adapter type (`rank_max`);
#: the figures behind them are in docs/webgpu.md (``benchmarks/gpu/wgpu_sort_bench.py``)
RANK_MAX = {"CPU": 256, "GPU": 64}
#: pairs a work-group sorts in workgroup memory (8 KiB of 32-bit keys and indices, 12 KiB
#: with int64 keys: within WebGPU's 16 KiB default), eight an invocation
TILE = 1024

# -- the rank sort ------------------------------------------------------------------------------

_RANK = """
@compute @workgroup_size(GROUP)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = i32(gid.x + gid.y * nwg.x * GROUPu);
    let n = P[1];
    if (g >= P[0] * n) { return; }
    let line = g / n; let j = g % n;
    var base = P[2];
    { var q = line; for (var d = P[3] - 1; d >= 0; d = d - 1) {
        let m = P[5 + d]; base = base + (q % m) * P[5 + MAXD + d]; q = q / m; } }
    let s = P[4];
    let v = KEY(b0[base + j * s]);
    var rank = 0;
    for (var k = 0; k < n; k = k + 1) {
        let w = KEY(b0[base + k * s]);
        if (BEFORE) { rank = rank + 1; }
    }
    let at = line * n + rank;
    b1[at] = b0[base + j * s];
    b2[at] = i64(j);
}
"""


def _rank_source(dtype: np.dtype[Any], descending: bool) -> str:
    if is_float(dtype):
        lt = "(w < v || (isnan_(v) && !isnan_(w)))"
        gt = "(w > v || (isnan_(w) && !isnan_(v)))"
        eq = "(w == v || (isnan_(w) && isnan_(v)))"
    else:
        lt, gt, eq = "(w < v)", "(w > v)", "(w == v)"
    before = f"({gt if descending else lt} || ({eq} && k < j))"
    body = (_RANK.replace("GROUP", str(GROUP)).replace("MAXD", str(MAXD))
            .replace("KEY", "f32" if is_float(dtype) else "").replace("BEFORE", before))
    st = wgsl_storage(dtype)
    return header([st, st, "i64"], 1) + "\n" + prelude(body) + body


# -- the bitonic sort -----------------------------------------------------------------------------

# parameter words of the tile kernel (the line walk's as the rank sort's, from word 3)
_LINES, _N, _LOGN, _OFF, _ND, _STRIDE, _DIMS = 0, 1, 2, 3, 4, 5, 6
_K0 = _DIMS + 2 * MAXD
_K1, _FROM, _TO, _DESC = _K0 + 1, _K0 + 2, _K0 + 3, _K0 + 4


def _key(dtype: np.dtype[Any], raw: str) -> str:
    """The sort key of the stored element ``raw``: ``u32`` (``i64`` for int64) whose integer
    order is the values' (nan largest, one key for ``-0.0`` and ``0.0``)."""
    if is_float(dtype):
        return f"fkey_(f32({raw}))"
    if wgsl_storage(dtype) == "i32":  # int32 and the emulated int8/int16
        return f"(bitcast<u32>({raw}) ^ 0x80000000u)"
    return raw  # int64; uint32, uint8 and bool (stored as u32)


_FKEY = """fn fkey_(x: f32) -> u32 {
    let u = bitcast<u32>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return 0xffffffffu; }
    if ((u & 0x7fffffffu) == 0u) { return 0x80000000u; }
    return select(u | 0x80000000u, ~u, (u & 0x80000000u) != 0u);
}
"""


def _exchange(x: int, y: int, up: str) -> str:
    """Registers ``x < y`` put in order (``up``) or in reverse order."""
    return (f"{{ let s = (k{y} < k{x} || (k{y} == k{x} && i{y} < i{x})) == {up}; "
            f"let kx = k{x}; let ix = i{x}; k{x} = select(kx, k{y}, s); "
            f"i{x} = select(ix, i{y}, s); k{y} = select(k{y}, kx, s); "
            f"i{y} = select(i{y}, ix, s); }}")


def _steps(up: Any, guards: tuple[str, str, str]) -> str:
    """Three steps of the network over eight registers, register bit ``b`` for the round's
    ``b``-th lowest stride: bit 2 first, each where its guard holds (``""``: always).
    ``up(x)`` is the direction of the pair whose lower register is ``x``."""
    out = []
    for b, guard in zip((2, 1, 0), guards, strict=True):
        pairs = " ".join(_exchange(x, x | 1 << b, up(x)) for x in range(8) if not x >> b & 1)
        out.append(f"if ({guard}) {{ {pairs} }}" if guard else pairs)
    return "\n".join(out)


def _load(keys: str, idx: str, at: Any) -> str:
    """Registers ``k0..k7``, ``i0..i7`` from the arrays ``keys`` and ``idx`` at ``at(t)``."""
    return " ".join(f"k{t} = {keys}[{at(t)}]; i{t} = {idx}[{at(t)}];" for t in range(8))


def _store(keys: str, idx: str, at: Any) -> str:
    return " ".join(f"{keys}[{at(t)}] = k{t}; {idx}[{at(t)}] = i{t};" for t in range(8))


#: the registers of eight pairs, declared in a kernel's body
_REGISTERS = ("var k0: KT; var k1: KT; var k2: KT; var k3: KT; var k4: KT; var k5: KT;\n"
              "    var k6: KT; var k7: KT;\n"
              "    var i0: u32; var i1: u32; var i2: u32; var i3: u32; var i4: u32; var i5: u32;\n"
              "    var i6: u32; var i7: u32;")

_TILE_MAIN = """
var<workgroup> sk: array<KT, TILE>;
var<workgroup> si: array<u32, TILE>;

fn line_base(line: i32) -> i32 {
    var base = P[OFF];
    var q = line;
    for (var d = P[ND] - 1; d >= 0; d = d - 1) {
        let m = P[DIMS + d]; base = base + (q % m) * P[DIMS + MAXD + d]; q = q / m;
    }
    return base;
}

@compute @workgroup_size(LANES)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let t0 = i32(wg.x + wg.y * nwg.x) * TILE;
    let n = P[N_]; let lg = u32(P[LOGN]);
    let mask = (1 << lg) - 1;
    let total = P[LINES] << lg;
    for (var r = 0u; r < 8u; r = r + 1u) {
        let e = lid + r * LANESu;
        let q = t0 + i32(e);
        var key = PAD;
        var ix = u32(q & mask);
        if (q < total) {
            if (P[FROM] == 0) {
                if ((q & mask) < n) {
                    key = KEY;
                    if (P[DESC] != 0) { key = ~key; }
                }
            } else {
                key = b1[q]; ix = b2[q];
            }
        }
        sk[e] = key; si[e] = ix;
    }
    workgroupBarrier();
    REGISTERS
    let t0u = u32(t0);
    for (var k = u32(P[K0]); k <= u32(P[K1]); k = k << 1u) {
        let top = i32(firstTrailingBit(min(k, TILEu))) - 1;
        let kd = k & u32(mask);
        for (var m = top; m >= 3; m = m - 3) {
            let lo = u32(m - 2);
            let a = ((lid >> lo) << (lo + 3u)) | (lid & ((1u << lo) - 1u));
            let e1 = 1u << lo; let e2 = e1 << 1u; let e4 = e1 << 2u;
            XLOAD
            let up = ((t0u + a) & kd) == 0u;
            XSTEPS
            XSTORE
            workgroupBarrier();
        }
        let a = lid * 8u;
        CLOAD
        CSTEPS
        CSTORE
        workgroupBarrier();
    }
    for (var r = 0u; r < 8u; r = r + 1u) {
        let e = lid + r * LANESu;
        let q = t0 + i32(e);
        if (q < total) {
            if (P[TO] == 0) {
                b1[q] = sk[e]; b2[q] = si[e];
            } else if ((q & mask) < n) {
                let at = (q >> lg) * n + (q & mask);
                b3[at] = b0[line_base(q >> lg) + i32(si[e]) * P[STRIDE]];
                b4[at] = i64(si[e]);
            }
        }
    }
}
"""

# the register ``t`` of a round whose lowest register is at ``a`` and bits at e1, e2, e4
_SPREAD = ("a", "a | e1", "a | e2", "a | e2 | e1", "a | e4", "a | e4 | e1", "a | e4 | e2",
           "a | e4 | e2 | e1")


def _tile_source(dtype: np.dtype[Any]) -> str:
    """The kernel sorting (or finishing a merge of) `TILE` pairs in workgroup memory: it reads
    the input (``P[FROM] == 0``) or the pairs of the global passes, and writes pairs back or
    (``P[TO] != 0``) the sorted values and indices.  Each stage ``k`` runs in rounds of up to
    three steps over eight pairs an invocation holds in registers, a barrier after each:
    strides 2^m, 2^(m-1), 2^(m-2) down to 8, then 4, 2, 1 over eight neighbours."""
    st = wgsl_storage(dtype)
    kt = "i64" if np.dtype(dtype).name == "int64" else "u32"
    pad = "9223372036854775807li" if kt == "i64" else "0xffffffffu"
    def spread(t: int) -> str:
        return f"({_SPREAD[t]})"

    def near(t: int) -> str:
        return f"a + {t}u"

    rounds = {  # the strides 2^m .. 2^(m-2) (the last two where at least 8), then 4, 2, 1
        "REGISTERS": _REGISTERS,
        "XLOAD": _load("sk", "si", spread), "XSTORE": _store("sk", "si", spread),
        "XSTEPS": _steps(lambda x: "up", ("", "m >= 4", "m >= 5")),
        "CLOAD": _load("sk", "si", near), "CSTORE": _store("sk", "si", near),
        "CSTEPS": _steps(lambda x: f"(((t0u + a + {x}u) & kd) == 0u)",
                         ("top >= 2", "top >= 1", "")),
    }
    names = {"OFF": _OFF, "ND": _ND, "DIMS": _DIMS, "N_": _N, "LOGN": _LOGN,
             "LINES": _LINES, "STRIDE": _STRIDE, "K0": _K0, "K1": _K1, "FROM": _FROM,
             "TO": _TO, "DESC": _DESC, "MAXD": MAXD, "LANES": TILE // 8, "TILE": TILE,
             "KT": kt, "PAD": pad}
    main = _TILE_MAIN.replace("KEY", _key(dtype, "b0[line_base(q >> lg) + (q & mask) * "
                                                 "P[STRIDE]]"))
    for name, code in rounds.items():
        main = main.replace(name, code)
    # a name, or a number's name with WGSL's unsigned suffix (``TILEu``)
    main = re.sub(r"\b([A-Z][A-Z0-9_]*?)(u?)\b",
                  lambda m: f"{names[m[1]]}{m[2]}" if m[1] in names else m[0], main)
    return (header([st, kt, "u32", st, "i64"], 1) + "\n"
            + (_FKEY if "fkey_(" in main else "") + main)


_GLOBAL_MAIN = """
@compute @workgroup_size(GROUP)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.x + gid.y * nwg.x * GROUPu;
    if (g >= u32(P[0])) { return; }
    let m = u32(P[1]); let lo = m - 2u;
    let a = ((g >> lo) << (lo + 3u)) | (g & ((1u << lo) - 1u));
    let e1 = 1u << lo; let e2 = e1 << 1u; let e4 = e1 << 2u;
    REGISTERS
    LOAD
    let up = (a & u32(P[3]) & u32(P[4])) == 0u;
    STEPS
    STORE
}
"""


def _global_source(key_type: str) -> str:
    """One round of up to three steps of strides ``2^P[1]`` down to ``2^P[2]`` (at least
    `TILE`) over pairs in memory, eight an invocation (``P[3]``: the stage ``k``, ``P[4]``:
    ``N - 1``, for the direction)."""
    def spread(t: int) -> str:
        return f"({_SPREAD[t]})"

    main = (_GLOBAL_MAIN.replace("REGISTERS", _REGISTERS)
            .replace("LOAD", _load("b0", "b1", spread))
            .replace("STEPS", _steps(lambda x: "up", ("", "m - 1u >= u32(P[2])",
                                                      "lo >= u32(P[2])")))
            .replace("STORE", _store("b0", "b1", spread))
            .replace("GROUP", str(GROUP)).replace("KT", key_type))
    return header([key_type, "u32"], 0) + main


_SOURCES: dict[tuple[Any, ...], str] = {}


def _cached(key: tuple[Any, ...], make: Any) -> str:
    src = _SOURCES.get(key)
    if src is None:
        src = _SOURCES[key] = make()
    return src


def _pairs(rt: Runtime, kt: str, size: int) -> tuple[WGArray, WGArray]:
    """Buffers of ``size`` keys (of WGSL type ``kt``) and indices."""
    keys = rt.empty((size,), np.dtype(np.int64 if kt == "i64" else np.uint32))
    return keys, rt.empty((size,), np.dtype(np.uint32))


def _bitonic(rt: Runtime, x: WGArray, dim: int, descending: bool, lines: int,
             line_dims: list[int], line_strides: list[int], vals: WGArray,
             idx: WGArray) -> None:
    n = x.shape[dim]
    lg = (n - 1).bit_length()
    N = 1 << lg
    if lines * N >= 1 << 31:  # the kernels index pairs with i32
        raise NotImplementedError(f"wgpu: sort of {lines} lines padded to {N}: more than "
                                  "2^31 elements")
    kt = "i64" if x.dtype.name == "int64" else "u32"
    tile_src = _cached(("tile", x.dtype), lambda: _tile_source(x.dtype))
    tiles = -(-lines * N // TILE)
    gx, gy = tiles, 1
    if tiles > rt.max_groups:
        gy = -(-tiles // rt.max_groups)
        gx = -(-tiles // gy)
    pad = [0] * (MAXD - len(line_dims))
    head = [lines, n, lg, x.offset, len(line_dims), x.strides[dim], *line_dims, *pad,
            *line_strides, *pad]
    if N <= TILE:  # one dispatch: every line within a tile
        rt.record(tile_src, [x], [*_pairs(rt, kt, 1), vals, idx],
                  [*head, 2, N, 0, 1, int(descending)], (gx, gy, 1))
        return
    keys, pos = _pairs(rt, kt, lines * N)
    outs = [keys, pos, vals, idx]
    rt.record(tile_src, [x], outs, [*head, 2, TILE, 0, 0, int(descending)], (gx, gy, 1))
    step = _cached(("global", kt), lambda: _global_source(kt))
    t = TILE.bit_length() - 1
    for K in range(t + 1, lg + 1):  # the stage k = 2^K
        for m in range(K - 1, t - 1, -3):
            rt.dispatch(step, [], [keys, pos], [lines * N // 8, m, max(m - 2, t), 1 << K,
                                                 N - 1], lines * N // 8)
        rt.record(tile_src, [x], outs, [*head, 1 << K, 1 << K, 1, int(K == lg),
                                        int(descending)], (gx, gy, 1))


# -- the op -------------------------------------------------------------------------------------

def rank_max(rt: Runtime) -> int:
    """The longest line the rank sort takes on ``rt``'s adapter (`RANK_MAX`)."""
    return RANK_MAX["CPU" if rt.software else "GPU"]


def sort(rt: Runtime, x: WGArray, dim: int, descending: bool) -> tuple[WGArray, WGArray]:
    """Values and int64 indices of ``x`` sorted stably along ``dim`` (see the module's text
    for the two kernels and when each runs)."""
    n = x.shape[dim] if x.ndim else 1
    others = [d for d in range(x.ndim) if d != dim]
    lines = x.size // max(n, 1)
    perm = (*others, dim) if x.ndim else ()
    oshape = tuple(x.shape[d] for d in perm)
    vals, idx = rt.empty(oshape, x.dtype), rt.empty(oshape, np.dtype(np.int64))
    if x.size:
        dims, sts = collapse([x.shape[d] for d in others], [[x.strides[d] for d in others]])
        if len(dims) > MAXD:
            raise NotImplementedError(f"wgpu: sort walks at most {MAXD} axes besides its own")
        if n > rank_max(rt):
            _bitonic(rt, x, dim, descending, lines, dims, sts[0], vals, idx)
        else:
            src = _cached(("rank", x.dtype, descending), lambda: _rank_source(x.dtype,
                                                                                descending))
            pad = [0] * (MAXD - len(dims))
            words = [lines, n, x.offset, len(dims), x.strides[dim] if x.ndim else 0,
                     *dims, *pad, *sts[0], *pad]
            rt.dispatch(src, [x], [vals, idx], words, lines * n)
    if not x.ndim:
        return vals, idx
    inv = [0] * x.ndim
    for k, d in enumerate(perm):
        inv[d] = k

    def back(a: WGArray) -> WGArray:
        return a.view(x.shape, [a.strides[inv[d]] for d in range(x.ndim)], a.offset)

    return back(vals), back(idx)


def topk(rt: Runtime, x: WGArray, k: int, dim: int, largest: bool) -> tuple[WGArray, WGArray]:
    """The first ``k`` of the sorted line (the whole line is sorted)."""
    if x.ndim == 0:
        return sort(rt, x, 0, largest)
    vals, idx = sort(rt, x, dim, largest)
    return first_k(vals, k, dim), first_k(idx, k, dim)
