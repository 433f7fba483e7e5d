"""Train a small MLP whose activation is the custom Triton ``swish`` kernel.

    python examples/custom-triton-kernel/train.py                  # autodiff<triton-interpret>
    python examples/custom-triton-kernel/train.py --device "autodiff<cuda:0>" --steps 400

The data are two interleaved spirals (generated here, no download); the script checks the
custom gradient against ember's composite ``x * sigmoid(x)`` before training and prints the
final accuracy.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from swish import install, swish

import ember  # after the path set-up
from ember import nn, optim
from ember.nn import functional as F


class SwishMLP(nn.Module):
    def __init__(self, hidden: int = 64, *, generator: ember.Generator | None = None) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, hidden, generator=generator)
        self.fc2 = nn.Linear(hidden, hidden, generator=generator)
        self.fc3 = nn.Linear(hidden, 2, generator=generator)

    def forward(self, x: ember.Tensor) -> ember.Tensor:
        return self.fc3(swish(self.fc2(swish(self.fc1(x)))))


def spirals(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.25, 3.0 * np.pi, n)
    label = rng.integers(0, 2, n)
    r = t / (3.0 * np.pi)
    angle = t + np.pi * label
    xy = np.stack([r * np.cos(angle), r * np.sin(angle)], 1) + rng.normal(0, 0.02, (n, 2))
    return xy.astype(np.float32), label.astype(np.int64)


def check_gradient(device: ember.Device) -> float:
    """Largest difference between the custom VJP and autodiff through ember's composite."""
    x0 = np.linspace(-4, 4, 33, dtype=np.float32)
    a = ember.tensor(x0, device=device, requires_grad=True)
    ga = swish(a).sum().backward()[a].numpy()
    b = ember.tensor(x0, device=device, requires_grad=True)
    gb = (b * b.sigmoid()).sum().backward()[b].numpy()
    return float(np.abs(ga - gb).max())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="autodiff<triton-interpret>")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    device = ember.device(args.device)
    install(device)
    print(f"custom gradient vs composite: max |diff| = {check_gradient(device):.2e}")

    x_train, y_train = spirals(1024, args.seed)
    x_test, y_test = spirals(512, args.seed + 1)
    model = SwishMLP(generator=ember.Generator(args.seed))
    model.to(device)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    xt = ember.tensor(x_train, device=device)
    yt = ember.tensor(y_train, device=device)
    for step in range(args.steps):
        loss = F.cross_entropy(model(xt), yt)
        grads = loss.backward()
        opt.step(grads)
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    with ember.no_grad():
        pred = model(ember.tensor(x_test, device=device)).argmax(dim=1).numpy()
    acc = float((pred == y_test).mean())
    print(f"test accuracy {acc:.3f}")
    return 0 if acc > 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
