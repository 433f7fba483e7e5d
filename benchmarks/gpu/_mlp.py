"""The MLP training step the GPU benchmarks time: 784-1024-1024-10, batch 512, Adam, fp32, on
``autodiff<cuda:0>`` (issue 8's figure; PyTorch eager's is in FACTS.md)."""

from __future__ import annotations

from collections.abc import Callable
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
