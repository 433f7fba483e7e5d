"""GELU, attention and LSTM / GRU forward + backward on ``autodiff<cpu>``, with the fused CPU
kernels (`ember.ops.composite` gelu, scaled_dot_product_attention, lstm_cell, gru_cell and
their backwards) and without them (core's decompositions: what ran before), beside PyTorch.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/fused_nn.py [--rounds 15]``.
Rounds interleave the three variants, so a busy machine slows all of them alike.  PyTorch runs
on one thread; torch is used here only as the peer being compared with.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import torch

import ember
from ember import nn, ops

FUSED = ("gelu", "gelu_backward", "scaled_dot_product_attention",
         "scaled_dot_product_attention_backward", "lstm_cell", "lstm_cell_backward",
         "gru_cell", "gru_cell_backward")


def cases(d: ember.Device) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    rng = np.random.default_rng(0)

    def arr(*s: int) -> np.ndarray:
        return rng.standard_normal(s).astype(np.float32)

    out: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {}
    x, gx = arr(512, 256), arr(512, 256)
    ex, eg = ember.tensor(x, device=d, requires_grad=True), ember.tensor(gx, device=d)
    tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(gx)
    for ap in ("none", "tanh"):
        out[f"gelu {ap} [512, 256]"] = (
            lambda ap=ap: nn.functional.gelu(ex, approximate=ap).backward(eg)[ex].numpy(),
            lambda ap=ap: torch.nn.functional.gelu(tx, approximate=ap).backward(tg))
    qkv = [arr(16, 4, 32, 16) for _ in range(3)]
    go = arr(16, 4, 32, 16)
    eq = [ember.tensor(a, device=d, requires_grad=True) for a in qkv]
    ego = ember.tensor(go, device=d)
    tq = [torch.tensor(a, requires_grad=True) for a in qkv]
    tgo = torch.tensor(go)
    out["sdpa causal 16x4x32x16"] = (
        lambda: nn.functional.scaled_dot_product_attention(
            *eq, is_causal=True).backward(ego)[eq[0]].numpy(),
        lambda: torch.nn.functional.scaled_dot_product_attention(
            *tq, is_causal=True).backward(tgo))
    for kind in ("LSTM", "GRU"):
        m = getattr(nn, kind)(128, 128, generator=ember.Generator(0)).to(d)
        tm = getattr(torch.nn, kind)(128, 128)
        tm.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in m.state_dict().items()})
        xs, gl = arr(32, 16, 128), arr(32, 16, 128)
        ex2, eg2 = ember.tensor(xs, device=d, requires_grad=True), ember.tensor(gl, device=d)
        tx2, tg2 = torch.tensor(xs, requires_grad=True), torch.tensor(gl)
        out[f"{kind.lower()} 128 x 32 steps, batch 16"] = (
            lambda m=m, ex2=ex2, eg2=eg2: m(ex2)[0].backward(eg2)[ex2].numpy(),
            lambda tm=tm, tx2=tx2, tg2=tg2: tm(tx2)[0].backward(tg2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    d = ember.device("autodiff<cpu>")
    table = ember.device("cpu").backend.kernels
    saved = {getattr(ops.composite, n): table[getattr(ops.composite, n)] for n in FUSED}
    runs = cases(d)
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds + 2):  # two warm-up rounds
        for variant in ("fused", "decomposed", "torch"):
            if variant == "decomposed":
                for op in saved:
                    del table[op]
            for name, (ember_fn, torch_fn) in runs.items():
                fn = torch_fn if variant == "torch" else ember_fn
                start = time.perf_counter()
                fn()
                if r >= 2:
                    times.setdefault((name, variant), []).append(time.perf_counter() - start)
            table.update(saved)
    print(f"{'case':34s} {'fused':>10s} {'decomposed':>11s} {'torch':>10s}   (median us)")
    for name in runs:
        med = [statistics.median(times[(name, v)]) * 1e6 for v in
               ("fused", "decomposed", "torch")]
        print(f"{name:34s} {med[0]:10.0f} {med[1]:11.0f} {med[2]:10.0f}")


if __name__ == "__main__":
    main()
