"""`ember.compile` on the GPU: training steps compiled (a CUDA graph per program, cuBLASLt
inside) against eager ember, `ember_cuda.graph` and PyTorch eager, interleaved in one process.

    python benchmarks/gpu/compile_steps.py [--quick] [--with-graph]

Steps: the MLP (784-1024-1024-10, batch 512, Adam, fp32), the guide CNN (batch 32, AdamW, the
batch uploaded from the host before each step), and one transformer block (embedding 512, 8
heads, sequence 256, batch 16, fp32, AdamW; pre-LayerNorm attention and a GELU MLP).  Before
timing, each compiled step's parameters are checked against an eager copy trained on the same
batches.  Prints a table of milliseconds per step and ratios to PyTorch eager.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _block(lib: Any, nn: Any, F: Any, d: int = 512, heads: int = 8) -> Any:
    """One pre-LayerNorm transformer block, written once for both frameworks."""

    class Block(nn.Module):  # type: ignore[misc,name-defined]  # nn is torch.nn or ember.nn
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, heads, d // heads).permute(
                2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.permute(0, 2, 1, 3).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))
    return Block()


def child(quick: bool) -> dict[str, Any]:
    import numpy as np
    import torch
    from _mlp import mlp_step, torch_mlp_step
    from _rounds import interleaved, summary

    import ember
    import ember_cuda

    dev = ember.device("autodiff<cuda:0>")
    base = ember.device("cuda:0")

    def sync() -> None:
        base.synchronize()

    def tsync() -> None:
        torch.cuda.synchronize()

    res: dict[str, Any] = {}
    rounds, reps = (3, 10) if quick else (7, 30)

    # -- correctness: compiled against eager on the same batches ------------------------------
    def mlp_model(seed: int) -> tuple[Any, Any]:
        g = ember.Generator(seed)
        nn = ember.nn
        m = nn.Sequential(nn.Linear(784, 1024, generator=g), nn.ReLU(),
                          nn.Linear(1024, 1024, generator=g), nn.ReLU(),
                          nn.Linear(1024, 10, generator=g)).to(dev)
        return m, ember.optim.Adam(m.parameters(), lr=1e-3)

    rng = np.random.default_rng(0)
    xs = [ember.tensor(rng.standard_normal((512, 784)).astype(np.float32), device=dev)
          for _ in range(4)]
    ys = [ember.tensor(rng.integers(0, 10, 512), device=dev) for _ in range(4)]
    (m1, o1), (m2, o2) = mlp_model(0), mlp_model(0)

    def eager_step(x: Any, y: Any) -> Any:
        loss = ember.nn.functional.cross_entropy(m1(x), y)
        o1.step(loss.backward())
        return loss

    @ember.compile
    def compiled_step(x: Any, y: Any) -> Any:
        loss = ember.nn.functional.cross_entropy(m2(x), y)
        o2.step(loss.backward())
        return loss

    losses = []
    for i in range(8):
        a, b = eager_step(xs[i % 4], ys[i % 4]), compiled_step(xs[i % 4], ys[i % 4])
        losses.append((a.item(), b.item()))
    worst = max(float(np.abs(p.numpy() - q.numpy()).max() / (np.abs(p.numpy()).max() + 1e-12))
                for p, q in zip(m1.parameters(), m2.parameters(), strict=True))
    prog = next(compiled_step.programs())
    res["check"] = {"max_rel_param_diff": worst, "losses": losses[-2:],
                    "stats": str(compiled_step.stats),
                    "runner": type(prog.runner).__name__,
                    "graph_records": getattr(prog.runner, "records", None)}

    # -- MLP step -----------------------------------------------------------------------------
    step = mlp_step(ember)
    tstep = torch_mlp_step(torch)

    cstep = ember.compile(mlp_step(ember))
    fns: dict[str, Any] = {"torch": tstep, "ember": step, "compiled": cstep}
    if "--with-graph" in sys.argv:  # ember_cuda.graph's own recording, for comparison
        fns["graph"] = ember_cuda.graph(mlp_step(ember, capturable=True),
                                        device="autodiff<cuda:0>", warmup=3).replay
    syncs = {k: (tsync if k == "torch" else sync) for k in fns}
    res["mlp"] = _ratios(interleaved(fns, syncs, rounds, reps), summary)
    print("mlp", res["check"], res["mlp"], flush=True)

    # -- guide step ---------------------------------------------------------------------------
    sys.path.insert(0, str(HERE.parents[1] / "examples" / "guide"))
    from model import GuideCNN

    def guide(seed: int) -> tuple[Any, Any]:
        m = GuideCNN(8, dropout=0.0, generator=ember.Generator(seed)).to(dev)
        return m, ember.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-4)

    gxb = rng.standard_normal((32, 1, 8, 8)).astype(np.float32)
    gyb = rng.integers(0, 10, 32)
    gm, go = guide(0)

    def gtrain(x: Any, y: Any) -> Any:
        loss = ember.nn.functional.cross_entropy(gm(x), y)
        go.step(loss.backward())
        return loss
    gcomp = ember.compile(gtrain)
    gm2, go2 = guide(0)

    def gtrain_eager() -> Any:
        x, y = ember.tensor(gxb, device=dev), ember.tensor(gyb, device=dev)
        loss = ember.nn.functional.cross_entropy(gm2(x), y)
        go2.step(loss.backward())
        return loss

    from torch import nn as tnn

    class TGuide(tnn.Module):  # GuideCNN's layers on 8x8 inputs (one pooling)
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = tnn.Conv2d(1, 16, 3, padding=1), tnn.Conv2d(16, 32, 3, padding=1)
            self.fc1, self.fc2 = tnn.Linear(32 * 4 * 4, 64), tnn.Linear(64, 10)

        def forward(self, x: Any) -> Any:
            x = torch.max_pool2d(torch.relu(self.c2(torch.relu(self.c1(x)))), 2)
            return self.fc2(torch.relu(self.fc1(x.flatten(1))))
    tg = TGuide().cuda()
    tgo = torch.optim.AdamW(tg.parameters(), lr=1e-3, weight_decay=1e-4)

    def tguide() -> None:
        tgo.zero_grad()
        x, y = torch.from_numpy(gxb).cuda(), torch.from_numpy(gyb).cuda()
        torch.nn.functional.cross_entropy(tg(x), y).backward()
        tgo.step()

    gx, gy = ember.tensor(gxb, device=dev), ember.tensor(gyb, device=dev)
    fns = {"torch": tguide, "ember": gtrain_eager,
           "compiled": lambda: gcomp(ember.tensor(gxb, device=dev), ember.tensor(gyb, device=dev)),
           # the batch already on the device (what ember_cuda.graph's recording replays)
           "compiled_resident": lambda: gcomp(gx, gy)}
    if "--with-graph" in sys.argv:
        from _mlp import guide_step

        fns["graph"] = ember_cuda.graph(guide_step(ember), device="autodiff<cuda:0>",
                                        warmup=3).replay
    syncs = {k: (tsync if k == "torch" else sync) for k in fns}
    res["guide"] = _ratios(interleaved(fns, syncs, rounds, reps), summary)
    print("guide", res["guide"], flush=True)

    # -- transformer block ------------------------------------------------------------------------
    eb = _block(ember, ember.nn, ember.nn.functional).to(dev)
    eopt = ember.optim.AdamW(eb.parameters(), lr=1e-4)
    tb = _block(torch, torch.nn, torch.nn.functional).cuda()
    topt2 = torch.optim.AdamW(tb.parameters(), lr=1e-4)
    xb = rng.standard_normal((16, 256, 512)).astype(np.float32)
    ex = ember.tensor(xb, device=dev)
    tx = torch.from_numpy(xb).cuda()

    def bstep(x: Any) -> Any:
        loss = (eb(x) ** 2).mean()
        eopt.step(loss.backward())
        return loss
    bcomp = ember.compile(bstep)

    def tbstep() -> None:
        topt2.zero_grad()
        (tb(tx) ** 2).mean().backward()
        topt2.step()
    fns = {"torch": tbstep, "ember": lambda: bstep(ex), "compiled": lambda: bcomp(ex)}
    syncs = {k: (tsync if k == "torch" else sync) for k in fns}
    res["block"] = _ratios(interleaved(fns, syncs, rounds, max(reps // 3, 3)), summary)
    res["block_runner"] = type(next(bcomp.programs()).runner).__name__
    return res


def _ratios(times: dict[str, list[float]], summary: Any) -> dict[str, Any]:
    out = summary(times, "compiled", "torch")
    for k in list(times):
        if k != "torch":
            out[f"{k}_ratio"] = round(out[k] / out["torch"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    res = child("--quick" in argv)
    print(json.dumps(res, indent=1))
    print("\nstep            torch ms   eager x   graph x   compiled x")
    for k in ("mlp", "guide", "block"):
        r = res.get(k, {})
        print(f"{k:<14}{r.get('torch', float('nan')):>10.3f}{r.get('ember_ratio', '-'):>10}"
              f"{r.get('graph_ratio', '-'):>10}{r.get('compiled_ratio', '-'):>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
