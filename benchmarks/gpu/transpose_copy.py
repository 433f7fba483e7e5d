"""How fast is a transposed copy (``x.T.contiguous()``, what tf32 matmuls make of an N-major
B)?  Times ember's tiled `transpose` kernel and the elementwise copy it replaced, and CuPy's
copy of the same bytes, in TB/s read plus written (``python
benchmarks/gpu/transpose_copy.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child() -> None:
    import cupy as cp
    import numpy as np

    import ember
    from ember_triton._codegen import elementwise

    d = ember.device("cuda:0")
    be = d.backend
    timer = be.memory.timer
    print(f"{'copy':42} {'µs':>9} {'TB/s':>6}")
    for n, dtype in [(4096, np.float32), (8192, np.float32), (8192, np.float16)]:
        x = ember.tensor(np.random.default_rng(0).standard_normal((n, n)).astype(dtype),
                         device=d)
        xt = x._data.transpose((1, 0))
        got = be.to_numpy(be.contiguous(xt), None)
        assert np.array_equal(got, x.numpy().T)
        cx = cp.asarray(x.numpy())
        plain = timer(lambda cx=cx: cx.copy())
        tiled = timer(lambda xt=xt: be.contiguous(xt))
        flat = timer(lambda xt=xt: elementwise(be, "r = x0", [xt], xt.dtype, widen=False))
        for name, ms in [("cupy plain copy", plain), ("ember transpose (tiled)", tiled),
                         ("ember elementwise gather", flat)]:
            tbs = 2 * x.numel() * np.dtype(dtype).itemsize / ms / 1e9
            print(f"{n} {np.dtype(dtype).name:8} {name:28} {ms * 1e3:9.1f} {tbs:6.2f}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
