"""Which tiles suit the `transpose` copy (what tf32 matmuls make of an N-major B)?  Times a
copy of the kernel over tile shapes, warp counts and with or without masks, for 4096² and
8192² float32 and 8192² float16, against CuPy's plain copy of the same bytes, in TB/s read
plus written.  A tuning benchmark: the tiles and warps of ``kernels/movement.py::transpose``
come from it, so run it again after a Triton upgrade or on a new GPU model:

    python benchmarks/gpu/transpose_tiles.py    # puts ember on the path itself (with_env.as_child)
"""

from __future__ import annotations

import sys
from pathlib import Path

import triton
import triton.language as tl

HERE = Path(__file__).resolve().parent


@triton.jit
def transpose_v(out, x, R, C, sr, sc, BR: tl.constexpr, BC: tl.constexpr,
                EVEN: tl.constexpr):
    rr = tl.program_id(0) * BR + tl.arange(0, BR)
    rc = tl.program_id(1) * BC + tl.arange(0, BC)
    if EVEN:
        v = tl.load(x + rr[:, None] * sr + rc[None, :] * sc)
        tl.store(out + rr[:, None] * C + rc[None, :], v)
    else:
        mask = (rr < R)[:, None] & (rc < C)[None, :]
        v = tl.load(x + rr[:, None] * sr + rc[None, :] * sc, mask=mask)
        tl.store(out + rr[:, None] * C + rc[None, :], v, mask=mask)


def child() -> None:
    import cupy as cp
    import numpy as np

    import ember

    d = ember.device("cuda:0")
    be = d.backend
    timer = be.memory.timer
    tiles = [(64, 64), (128, 64), (64, 128), (128, 128), (32, 128), (128, 32), (32, 64),
             (64, 32)]
    for n, dtype in [(4096, ember.float32), (8192, ember.float32), (8192, ember.float16)]:
        x = ember.randn((n, n), dtype=dtype, device=d)
        want = x.numpy().T
        xt = x._data.transpose((1, 0))  # rows of stride 1: the copy is a transpose
        out = be.empty((n, n), x._data.dtype)
        nbytes = 2 * x._data.size * x._data.dtype.itemsize
        cx = cp.asarray(x.numpy())
        plain = timer(lambda cx=cx: cx.copy())
        print(f"{n} {dtype.name}: cupy plain copy {plain * 1e3:7.1f} us "
              f"{nbytes / plain / 1e9:5.2f} TB/s", flush=True)
        rows = []
        for br, bc in tiles:
            for warps in (4, 8):
                for even in (False, True):
                    def run(br=br, bc=bc, warps=warps, even=even, xt=xt, out=out,
                            n=n) -> None:
                        be.launch(transpose_v, (n // br, n // bc), out, xt, n, n, 1, n, BR=br,
                                  BC=bc, EVEN=even, num_warps=warps)

                    run()
                    assert np.array_equal(be.to_numpy(out, None), want), (br, bc, warps, even)
                    ms = timer(run)
                    rows.append((ms, f"{br}x{bc} warps {warps} {'even' if even else 'masked'}"))
        rows.sort()
        for ms, name in rows:
            print(f"  {name:28} {ms * 1e3:7.1f} us {nbytes / ms / 1e9:5.2f} TB/s "
                  f"({plain / ms:.3f} of plain copy)")
        del x, xt, out, cx


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
