"""conv2d as an implicit GEMM: the receptive fields are gathered inside the matmul's tile loads.

A convolution of ``x[NB, C, H, W]`` with ``w[O, C/G, kh, kw]`` in ``G`` groups is, per group
``g``, the product ``out_g[M, N] = W_g[M, K] @ B_g[K, N]`` with ``M = O/G`` output channels,
``K = C/G * kh * kw`` and ``B_g[(c, ky, kx), (nb, oy, ox)] = x[nb, g*C/G + c,
oy*sh - ph + ky*dh, ox*sw - pw + kx*dw]`` (zero outside the image).  No ``B`` is ever
stored: the kernels here compute each element's address as they load it, so the im2col
matrix (``K * N`` elements, ``kh * kw`` times the input for a stride-1 conv) that `nn`'s
fallback writes and reads back is never materialised.

The batch is folded into the GEMM's N dimension (``N = NB * OH * OW``, column ``j`` is
``(nb, oy, ox)``), and each group is one ``z`` row of work-groups: a late layer's small image
(7x7) still fills tiles across the batch, and the weight gradient that autodiff computes as
a convolution (of the input, batch and channels swapped, with the output's gradient as the
kernel: ``C/G`` "images" whose result is only ``kh x kw`` each) gets ``C/G * kh * kw``
columns instead of ``kh * kw``.  A column's
decomposition ``(nb, oy, ox)`` and its base address are computed once per invocation,
before the K loop; per K step each invocation decomposes its row ``k`` into ``(c, ky, kx)``
(two integer divisions) and masks each load by ``0 <= iy < H``, ``0 <= ix < W`` (one
unsigned comparison each; columns past N start at a row far outside the image, so the same
comparison masks them).

Three kernels, chosen by `path` like `ember_wgpu.linalg`'s:

- ``tile128`` / ``tile64`` (outputs at least 128 / `NARROW` wide both ways): a 16x16
  work-group computes a 128x128 (64x64) output tile, each invocation an 8x8 (4x4) block in
  ``vec4<f32>`` registers; K goes by steps of 8 (16) through two workgroup-memory tiles of
  ``vec4`` (weights as ``[k][m]``, receptive fields as ``[k][n]``), every invocation
  filling one ``vec4`` of each, loaded while the previous step's products run.  Generated
  unrolled, as `linalg`'s ``tile128``.
- ``direct``: one invocation per output element walking its receptive field, for outputs
  narrower than `NARROW` (depthwise convolutions have M = 1).

Weights are read dense (``contiguous``: a copy only for a strided weight, as conv_transpose2d's
flipped one); ``x`` through its strides, so a permuted or sliced input costs no copy.  16-bit
floats load into f32 and accumulate there; the result is rounded once as it is stored.

``im2col`` (`ember_wgpu.nn`'s gather + `linalg.matmul`) remains the fallback, for grids
past the adapter's work-group limit only.  Software adapters take the implicit kernels too:
on lavapipe (the 2-core CI machine, 2026-12-06) they were the faster ones for every shape
timed, e.g. a 3x3 conv of 8x64x32x32 float32 in 113-115 ms against 360-373 ms by im2col,
a depthwise one in 18 ms (``direct``) against 123-164 ms (docs/webgpu.md has the rest;
``wgpu_bench.py --quick --no-torch --only conv32 conv16`` times a 3x3 conv both ways).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .linalg import k_loop
from .render import const
from .runtime import Runtime, WGArray
from .strided import contiguous, header, is_float, load, store, wgsl_storage

__all__ = ["NARROW", "PATHS", "conv2d", "path", "prefer"]

Pair = tuple[int, int]

#: outputs narrower than this (output channels per group, or NB * OH * OW) take ``direct``
NARROW = 32
#: the kernels, by name; ``im2col`` is `ember_wgpu.nn`'s fallback
PATHS = ("tile128", "tile64", "direct", "im2col")
#: a path every conv2d takes where it can (one of `PATHS`), for benchmarks and tests
#: comparing them; None: `path` chooses
prefer: str | None = None

# parameter words (both kernels)
_WORDS = ("M", "N", "K", "G", "OHW", "OW", "KHW", "KW", "SH", "SW", "PH", "PW", "DH", "DW",
          "H", "W", "XO", "XS0", "XS1", "XS2", "XS3", "WO", "O", "CG", "TOTAL")
_P = {name: i for i, name in enumerate(_WORDS)}


def _lets(*names: str) -> str:
    return " ".join(f"let {n} = P[{_P[n]}];" for n in names)


def path(rt: Runtime, m: int, n: int, k: int, dtype: np.dtype[Any], groups: int = 1) -> str:
    """The kernel a conv2d whose GEMM is ``m x k @ k x n`` per group (``m`` output channels
    per group, ``n = NB * OH * OW``, ``k = C/G * kh * kw``) runs on ``rt``: ``direct`` below
    `NARROW`, ``tile128`` for both sides at least 128, else ``tile64``; ``im2col`` where the
    tiles' grid would pass the adapter's work-group limit, or for a non-float dtype."""
    del k  # every K takes the same kernels
    if not is_float(dtype):
        return "im2col"
    if prefer is not None:
        return prefer
    if min(m, n) < NARROW:
        return "direct"
    kind = "tile128" if min(m, n) >= 128 else "tile64"
    tile = 128 if kind == "tile128" else 64
    cols = -(-n // tile)
    split = -(-cols // min(cols, rt.max_groups))
    if -(-m // tile) > rt.max_groups or groups * split > rt.max_groups:
        return "im2col"
    return kind


def _tiled_source(x_dt: np.dtype[Any], w_dt: np.dtype[Any], out_dt: np.dtype[Any],
                  blocks: int) -> str:
    """The ``tile64`` (``blocks`` 1) or ``tile128`` (``blocks`` 2) kernel: each invocation
    holds ``4 * blocks`` rows by ``4 * blocks`` columns (see the module docstring)."""
    tile = 64 * blocks
    step = 1024 // tile  # K step: each invocation loads one vec4 of each operand a step
    q = tile // 4  # vec4 columns of a tile row
    lines = [header([wgsl_storage(x_dt), wgsl_storage(w_dt), wgsl_storage(out_dt)], 2), "",
             f"var<workgroup> As: array<vec4<f32>, {step * q}>;",
             f"var<workgroup> Bs: array<vec4<f32>, {step * q}>;", "",
             "@compute @workgroup_size(16, 16)",
             "fn main(@builtin(workgroup_id) wg: vec3<u32>, "
             "@builtin(local_invocation_id) lid: vec3<u32>, "
             "@builtin(num_workgroups) nwg: vec3<u32>) {",
             "    " + _lets("M", "N", "K", "G", "OHW", "OW", "KHW", "KW"),
             "    " + _lets("SH", "SW", "PH", "PW", "DH", "DW", "H", "W"),
             "    " + _lets("XS0", "XS1", "XS2", "XS3", "O", "CG"),
             # a grid wider than the adapter's limit continues in further z rows
             "    let g = i32(wg.z) % G;",
             f"    let n0 = (i32(wg.x) + (i32(wg.z) / G) * i32(nwg.x)) * {tile};",
             "    if (n0 >= N) { return; }",
             f"    let m0 = i32(wg.y) * {tile};",
             f"    let xo = P[{_P['XO']}] + g * CG * XS1;",
             f"    let wo = P[{_P['WO']}] + g * M * K;",
             "    let tx = i32(lid.x); let ty = i32(lid.y); let t = ty * 16 + tx;",
             # the element each invocation loads: weights by k fastest (a row's k are
             # adjacent), receptive fields by column fastest (adjacent ox, adjacent x)
             f"    let lak = t % {step}; let lam = (t / {step}) * 4;",
             f"    let lbk = t / {q}; let lbn = (t % {q}) * 4;"]
    # the four columns this invocation loads: top-left corner of each receptive field and
    # its address; a column past N starts far above the image, so every row of it is masked
    for j in range(4):
        lines += [f"    var iy{j} = -1073741824; var ix{j} = 0; var xb{j} = 0;",
                  f"    {{ let col = n0 + lbn + {j};",
                  "      if (col < N) {",
                  "        let nb = col / OHW; let p = col - nb * OHW;",
                  "        let oy = p / OW; let ox = p - oy * OW;",
                  f"        iy{j} = oy * SH - PH; ix{j} = ox * SW - PW;",
                  f"        xb{j} = xo + nb * XS0 + iy{j} * XS2 + ix{j} * XS3;",
                  "      } }"]
    lines += [f"    var c{r}_{h} = vec4<f32>(0.0);"
              for r in range(4 * blocks) for h in range(blocks)]

    def fetch(k0: str, pad: str) -> list[str]:
        """Load the invocation's ``vec4`` of weights and of receptive fields for the K step
        at ``k0`` (zeros beyond the edges and in the padding)."""
        out = [f"{pad}av = vec4<f32>(0.0); bv = vec4<f32>(0.0);",
               f"{pad}{{ let ak = {k0} + lak; let bk = {k0} + lbk;"]
        for i in range(4):
            out.append(f"{pad}if (m0 + lam + {i} < M && ak < K) {{ av.{'xyzw'[i]} = "
                       f"{load(w_dt, f'b1[wo + (m0 + lam + {i}) * K + ak]')}; }}")
        out += [f"{pad}if (bk < K) {{",
                f"{pad}    let c = bk / KHW; let r = bk - c * KHW;",
                f"{pad}    let ky = r / KW; let kx = r - ky * KW;",
                f"{pad}    let dy = ky * DH; let dx = kx * DW;",
                f"{pad}    let ko = c * XS1 + dy * XS2 + dx * XS3;"]
        for j in range(4):
            out.append(f"{pad}    if (u32(iy{j} + dy) < u32(H) && u32(ix{j} + dx) < u32(W)) "
                       f"{{ bv.{'xyzw'[j]} = {load(x_dt, f'b0[xb{j} + ko]')}; }}")
        return [*out, f"{pad}}} }}"]

    lines += k_loop(fetch, step, q, blocks)
    # out[nb, g*M + gm, oy, ox]: each column's part of the address once, then each row's
    for h in range(blocks):
        for j in range(4):
            lines += [f"    var oc{h}_{j} = -1;",
                      f"    {{ let col = n0 + {64 * h} + tx * 4 + {j};",
                      "      if (col < N) { let nb = col / OHW;",
                      f"        oc{h}_{j} = (nb * O + g * M) * OHW + col - nb * OHW; }} }}"]
    for r in range(4 * blocks):
        lines += [f"    {{ let gm = m0 + {64 * (r // 4)} + ty * 4 + {r % 4};",
                  "      if (gm < M) {"]
        for h in range(blocks):
            for j in range(4):
                value = store(out_dt, f"c{r}_{h}.{'xyzw'[j]}")
                lines.append(f"        if (oc{h}_{j} >= 0) {{ b2[oc{h}_{j} + gm * OHW] = "
                             f"{value}; }}")
        lines.append("      } }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _direct_source(x_dt: np.dtype[Any], w_dt: np.dtype[Any], out_dt: np.dtype[Any]) -> str:
    """One invocation per output element ``(nb, o, oy, ox)`` walking its receptive field:
    no workgroup memory, no barriers (for narrow outputs: depthwise convolutions)."""
    zero = const(0, "float32")
    return header([wgsl_storage(x_dt), wgsl_storage(w_dt), wgsl_storage(out_dt)], 2) + f"""
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = i32(gid.x + gid.y * nwg.x * 64u);
    if (i >= P[{_P['TOTAL']}]) {{ return; }}
    {_lets("M", "K", "OHW", "OW", "KHW", "KW", "SH", "SW", "PH", "PW", "DH", "DW")}
    {_lets("H", "W", "XS0", "XS1", "XS2", "XS3", "O", "CG")}
    let p = i % OHW; let no = i / OHW; let o = no % O; let nb = no / O;
    let oy = p / OW; let ox = p - oy * OW;
    let iy0 = oy * SH - PH; let ix0 = ox * SW - PW;
    let kh = KHW / KW;
    let xo = P[{_P['XO']}] + nb * XS0 + (o / M) * CG * XS1;
    var wp = P[{_P['WO']}] + o * K;
    var acc = {zero};
    for (var c = 0; c < CG; c = c + 1) {{
        let xc = xo + c * XS1;
        for (var ky = 0; ky < kh; ky = ky + 1) {{
            let iy = iy0 + ky * DH;
            if (u32(iy) < u32(H)) {{
                let xr = xc + iy * XS2;
                for (var kx = 0; kx < KW; kx = kx + 1) {{
                    let ix = ix0 + kx * DW;
                    if (u32(ix) < u32(W)) {{
                        acc = fma({load(x_dt, "b0[xr + ix * XS3]")}, {load(w_dt, "b1[wp + kx]")},
                                  acc);
                    }}
                }}
            }}
            wp = wp + KW;
        }}
    }}
    b2[i] = {store(out_dt, "acc")};
}}
"""


_SOURCES: dict[tuple[Any, ...], str] = {}


def conv2d(rt: Runtime, x: WGArray, w: WGArray, stride: Pair, padding: Pair, dilation: Pair,
           groups: int, kind: str) -> WGArray:
    """``x[NB, C, H, W]`` convolved with ``w[O, C/groups, kh, kw]`` by the implicit kernel
    ``kind`` (``tile128``, ``tile64`` or ``direct``; see `path`)."""
    nb, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = rt.empty((nb, o, oh, ow), x.dtype)
    if out.size == 0:
        return out
    m, n, k = o // groups, nb * oh * ow, cg * kh * kw
    if k == 0:
        from .strided import run_map

        return run_map(rt, "s0", [], out=out, scalars=[("float32", 0)])
    wc = contiguous(rt, w)
    words = [m, n, k, groups, oh * ow, ow, kh * kw, kw, *stride, *padding, *dilation, h, wd,
             x.offset, *x.strides, wc.offset, o, cg, out.size]
    key = (x.dtype, wc.dtype, out.dtype, kind)
    src = _SOURCES.get(key)
    if src is None:
        if kind == "direct":
            src = _direct_source(x.dtype, wc.dtype, out.dtype)
        else:
            src = _tiled_source(x.dtype, wc.dtype, out.dtype, 2 if kind == "tile128" else 1)
        src = _SOURCES[key] = src
    if kind == "direct":
        rt.dispatch(src, [x, wc], [out], words, out.size)
        return out
    tile = 128 if kind == "tile128" else 64
    cols = -(-n // tile)
    gx = min(cols, rt.max_groups)
    rt.record(src, [x, wc], [out], words, (gx, -(-m // tile), groups * -(-cols // gx)))
    return out
