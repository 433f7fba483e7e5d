"""tf32 matmul with Triton alone: does B's layout decide the speed?  Times ``a @ b`` with B
row-major (N contiguous) and with B K-major (a transposed view of a contiguous ``B^T``), 4096³
and 8192³, against cuBLAS through torch (``python benchmarks/gpu/tf32_layout.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child() -> None:
    import torch

    import ember

    d = ember.device("cuda:0")
    be = d.backend
    be.matmul_precision = "tf32"
    be.use_cublas = False
    torch.backends.cuda.matmul.allow_tf32 = True
    timer = be.memory.timer
    for n in (4096, 8192):
        a = ember.randn((n, n), device=d)
        b = ember.randn((n, n), device=d)
        bt = b.T.contiguous()
        flop = 2 * n ** 3
        row = timer(lambda a=a, b=b: a @ b)
        kmaj = timer(lambda a=a, bt=bt: a @ bt.T)
        ta = torch.randn((n, n), device="cuda")
        tb = torch.randn((n, n), device="cuda")
        tt = timer(lambda ta=ta, tb=tb: ta @ tb)
        diff = float(((a @ b) - (a @ bt.T)).abs().max().item())
        print(f"{n}^3 tf32: B row-major {flop / row / 1e9:.1f} TFLOP/s, B K-major "
              f"{flop / kmaj / 1e9:.1f}, cuBLAS {flop / tt / 1e9:.1f}; max diff {diff:.2e}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from with_env import as_child

    as_child(__file__, child)
