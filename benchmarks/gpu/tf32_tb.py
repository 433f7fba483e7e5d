"""tf32 ``a @ b`` with B N-major, Triton alone: B's K-major copy as a pass of its own before
`matmul_tma` (what ember ran before) against `matmul_tma_tb` (the matmul's programs write the
copy as they go) in each of its configs, and torch (cuBLAS), at 4096³ and 8192³
(``python benchmarks/gpu/tf32_tb.py``).

Correctness first: `matmul_tma_tb` with 128x256x32 tiles must equal `matmul_tma` with the same
tiles bit for bit (the same products in the same order; only who copies B differs), on every
one of ``REPEATS`` launches (a race on the copy would show as a changed bit), and every config
must match torch's tf32 product.  Then six interleaved rounds of CUDA-event timings; prints a
table of TFLOP/s and ratios to torch (best round, and the median of the rounds' ratios)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPEATS = 20
#: `matmul_tma`'s tf32 config that `matmul_tma_tb`'s first shares its tiles with
COPY_CFG = (128, 256, 32, 8, 8, 3, 0)


def measure(n: int) -> list[tuple[int, str, float, float, float]]:
    """Check, then time, every case at ``n``³; rows ``(n, case, TFLOP/s, best, median)``."""
    import cupy as cp
    import torch

    import ember
    from ember_triton import linalg as lin

    d = ember.device("cuda:0")
    be = d.backend
    timer = be.memory.timer
    a = ember.randn((n, n), dtype=ember.float32, device=d)
    b = ember.randn((n, n), dtype=ember.float32, device=d)
    ad, bd = a._data, b._data
    args = (n, n, n, 1, 0, 0, *ad.strides, 0, 0, *bd.strides)
    assert lin.tma_fits(ad, bd, args, "tf32") and lin.tma_transposes(args, "tf32")
    out = be.empty((n, n), ad.dtype)
    ta = torch.from_dlpack(cp.asarray(a.numpy()))
    tb = torch.from_dlpack(cp.asarray(b.numpy()))
    ref = ta @ tb

    def as_torch(x):  # type: ignore[no-untyped-def]
        return torch.from_dlpack(cp.asarray(be.to_numpy(x, ember.float32)))

    lin._tma_matmul(be, COPY_CFG, out, ad, bd, args, "tf32")
    want = as_torch(out).clone()
    cases = {"copy+tma": lambda: lin._tma_matmul(be, COPY_CFG, out, ad, bd, args, "tf32")}
    real_empty = be.empty

    def poisoned(shape, dtype):  # type: ignore[no-untyped-def]
        # B's copy starts as NaN (all bits set), not as the last launch's copy left in the
        # pool's block: a tile that read its panel before it was written would show
        x = real_empty(shape, dtype)
        cp.cuda.runtime.memsetAsync(x.ptr, 0xFF, x.size * x.dtype.itemsize, be.memory.stream())
        return x

    for cfg in lin._TMA_TB_CONFIGS:
        def run(cfg=cfg):  # type: ignore[no-untyped-def]
            lin._tma_tb_matmul(be, cfg, out, ad, bd, args)
        same_tiles = cfg[:3] == COPY_CFG[:3]
        changed = 0
        be.empty = poisoned
        try:
            for _ in range(REPEATS):
                run()
                got = as_torch(out)
                changed += int(same_tiles and not torch.equal(got, want))
        finally:
            be.empty = real_empty
        err = float(((got - ref).abs().max() / ref.abs().max()).item())
        print(f"{n}³ tb{cfg}: max rel err vs torch {err:.1e}, launches differing from copy+tma: "
              + (f"{changed}/{REPEATS}" if same_tiles else "(other tiles, not compared)"),
              flush=True)
        assert err < 5e-3 and changed == 0, (n, cfg, err, changed)
        cases[f"tb{cfg}"] = run
    cases["torch"] = lambda: ta @ tb
    per: dict[str, list[float]] = {k: [] for k in cases}
    order = list(cases.items())
    for r in range(6):
        for k, fn in order[r % len(order):] + order[:r % len(order)]:
            per[k].append(timer(fn))
    flop = 2 * n ** 3
    return [(n, k, flop / min(per[k]) / 1e9, min(per["torch"]) / min(per[k]),
             statistics.median(t / x for t, x in zip(per["torch"], per[k], strict=True)))
            for k in cases]


def child() -> None:
    import torch

    import ember

    be = ember.device("cuda:0").backend
    be.matmul_precision = "tf32"
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"GPU: {be.memory.device_id()}, torch {torch.__version__}")
    rows = [row for n in (4096, 8192) for row in measure(n)]
    print("\n| n | case | TFLOP/s | torch/case best | median |\n|---|---|---|---|---|")
    for n, k, tf, best, med in rows:
        print(f"| {n}³ | {k} | {tf:.1f} | {best:.3f} | {med:.3f} |")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
