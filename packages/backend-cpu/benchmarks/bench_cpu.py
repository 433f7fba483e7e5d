"""Per-op cost of the cpu backend beside numpy (and PyTorch CPU when installed), as ratios.

Run: ``python packages/backend-cpu/benchmarks/bench_cpu.py``.  Medians of repeated timings.
"""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable

import ember
import numpy as np
from ember import ops

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # PyTorch is only a peer here, never a dependency
    torch = None


def median_us(fn: Callable[[], object], number: int) -> float:
    fn()
    return statistics.median(timeit.repeat(fn, number=number, repeat=9)) / number * 1e6


def row(name: str, ember_us: float, numpy_us: float, torch_us: float | None) -> None:
    peer = f"torch {torch_us:10.1f} us  ember/torch {ember_us / torch_us:5.2f}" if torch_us else ""
    print(f"{name:<34} ember {ember_us:10.1f} us  numpy {numpy_us:10.1f} us  "
          f"ember/numpy {ember_us / numpy_us:5.2f}  {peer}")


def main() -> None:
    for shape, number in (((8, 8), 100000), ((1000, 1000), 200)):
        a, b = ember.rand(*shape), ember.rand(*shape)
        na, nb = a.numpy(), b.numpy()
        t = (torch.from_numpy(na), torch.from_numpy(nb)) if torch is not None else None
        row(f"add {shape}", median_us(lambda: a + b, number),
            median_us(lambda: np.add(na, nb), number),
            median_us(lambda: t[0] + t[1], number) if t else None)
    m = ember.rand(512, 512)
    nm = m.numpy()
    tm = torch.from_numpy(nm) if torch is not None else None
    row("matmul 512^3", median_us(lambda: m @ m, 20), median_us(lambda: nm @ nm, 20),
        median_us(lambda: tm @ tm, 20) if tm is not None else None)
    kernel = ember.device("cpu").backend.kernels[ops.conv2d]
    for n, c, h, o, k, g in ((32, 64, 32, 64, 3, 1), (8, 3, 224, 64, 7, 1), (32, 64, 16, 64, 3, 4)):
        s, p = (2 if h == 224 else 1), k // 2
        x = np.random.rand(n, c, h, h).astype(np.float32)
        w = np.random.rand(o, c // g, k, k).astype(np.float32)
        e = median_us(lambda: kernel(x, w, stride=(s, s), padding=(p, p), dilation=(1, 1),
                                     groups=g), 3)
        tx, tw = (torch.from_numpy(x), torch.from_numpy(w)) if torch is not None else (None, None)
        tt = (median_us(lambda: F.conv2d(tx, tw, stride=s, padding=p, groups=g), 3)
              if tx is not None else None)
        oh = (h + 2 * p - k) // s + 1
        gflop = 2 * n * o * oh * oh * (c // g) * k * k / 1e9
        peer = f"torch {tt / 1e3:8.1f} ms ({gflop / tt * 1e6:5.0f} GFLOP/s)" if tt else ""
        print(f"conv2d {(n, c, h, h)} w{(o, c // g, k, k)} g={g}: "
              f"ember {e / 1e3:8.1f} ms ({gflop / e * 1e6:5.0f} GFLOP/s)  {peer}")


if __name__ == "__main__":
    main()
