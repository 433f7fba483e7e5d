"""Does cuBLAS run tf32 faster when both operands are K-major? (``python
benchmarks/gpu/tf32_layouts.py``, torch only.)

32-bit wgmma reads shared-memory operands only K-major, so for ``C = A @ B`` with a row-major
``B`` (N contiguous) cuBLAS's kernel must transpose B's tiles itself.  This times torch's
``a @ b`` for 4096³ and 8192³ in tf32 with B row-major ("NN") and with B given as the
transpose of a contiguous ``N x K`` array ("NT", both operands K-major), and the copy that
turns one into the other (``b.t().contiguous()``), in rotated rounds with CUDA events.  If NT
beats NN by more than the copy costs, copying B and calling cuBLAS on K-major operands is a
kernel-selection candidate worth having.
"""

from __future__ import annotations

import statistics

import torch


def timed(fn, reps: int) -> float:  # type: ignore[no-untyped-def]
    s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s0.record()
    for _ in range(reps):
        fn()
    s1.record()
    s1.synchronize()
    return s0.elapsed_time(s1) / reps


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for n in (4096, 8192):
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        bt = b.t().contiguous()  # N x K, K contiguous
        at = a.t().contiguous()  # K x M, M contiguous
        cases = {"NN a @ b": lambda a=a, b=b: a @ b,
                 "NT a @ bt.t()": lambda a=a, bt=bt: a @ bt.t(),
                 "copy b.t().contiguous()": lambda b=b: b.t().contiguous(),
                 "TT at.t() @ bt.t()": lambda at=at, bt=bt: at.t() @ bt.t()}
        for fn in cases.values():
            fn()
        for _ in range(30 if n == 4096 else 8):  # heat the GPU to its sustained clock
            a @ b
        ms: dict[str, list[float]] = {k: [] for k in cases}
        order = list(cases.items())
        for r in range(8):
            for k, fn in order[r % len(order):] + order[:r % len(order)]:
                ms[k].append(timed(fn, 20 if n == 4096 else 6))
        for k, ts in ms.items():
            ratio = statistics.median(x / t for x, t in zip(ms["NN a @ b"], ts, strict=True))
            tf = 2 * n ** 3 / min(ts) / 1e9 if "copy" not in k else float("nan")
            print(f"{n}^3 {k:26} best {min(ts) * 1e3:9.1f} us  median "
                  f"{statistics.median(ts) * 1e3:9.1f} us  {tf:7.1f} TFLOP/s  NN/this {ratio:6.3f}")


if __name__ == "__main__":
    main()
