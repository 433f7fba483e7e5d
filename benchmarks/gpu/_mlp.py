"""The training steps the GPU benchmarks time (``perf.py``, ``compile_steps.py``) and
``benchmarks/host_overhead.py`` runs: the MLP (784-1024-1024-10, batch 512, Adam, fp32, on
``autodiff<cuda:0>``) with its PyTorch mirror, and the guide CNN's step (AdamW, each batch
uploaded from the host as the guide does).  A helper module: nothing to run."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def mlp_step(ember: Any, device: str = "autodiff<cuda:0>",
             capturable: bool = False) -> Callable[[], Any]:
    """A closure running one training step (forward, backward, Adam) on one fixed batch."""
    ad = ember.device(device)
    g = ember.Generator(0)
    nn = ember.nn
    model = nn.Sequential(nn.Linear(784, 1024, generator=g), nn.ReLU(),
                          nn.Linear(1024, 1024, generator=g), nn.ReLU(),
                          nn.Linear(1024, 10, generator=g)).to(ad)
    opt = ember.optim.Adam(model.parameters(), lr=1e-3, capturable=capturable)
    xb = ember.randn((512, 784), device=ad, generator=g)
    yb = ember.randint(0, 10, (512,), device=ad, generator=g)

    def step() -> Any:
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.step(loss.backward())
        return loss
    return step


def torch_mlp_step(torch: Any) -> Callable[[], Any]:
    """PyTorch's side of `mlp_step`: the same MLP, Adam and a fixed batch, on ``cuda``."""
    tm = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                             torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                             torch.nn.Linear(1024, 10)).cuda()
    topt = torch.optim.Adam(tm.parameters(), lr=1e-3)
    txb = torch.randn((512, 784), device="cuda")
    tyb = torch.randint(0, 10, (512,), device="cuda")

    def tstep() -> None:
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tm(txb), tyb).backward()
        topt.step()
    return tstep


def guide_step(ember: Any, device: str = "autodiff<cuda:0>", batch: int = 32) -> Callable[[], Any]:
    """A closure running one training step of the guide CNN (8x8 inputs, no dropout, AdamW)
    on one fixed random batch held on the host."""
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "guide"))
    from model import GuideCNN

    dev = ember.device(device)
    f = ember.nn.functional
    model = GuideCNN(8, dropout=0.0, generator=ember.Generator(0)).to(dev)
    opt = ember.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((batch, 1, 8, 8)).astype(np.float32)
    yb = rng.integers(0, 10, batch)

    def step() -> Any:
        loss = f.cross_entropy(model(ember.tensor(xb, device=dev)), ember.tensor(yb, device=dev))
        opt.step(loss.backward())
        return loss
    return step
