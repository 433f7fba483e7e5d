"""One training epoch of the guide CNN on the GPU: ember (``autodiff<cuda:0>``, eagerly and as a
replayed CUDA graph) against PyTorch eager, same batches, same model shape, in one process.

    python benchmarks/gpu/guide_epoch.py [--epochs 7]

The data is the guide's (scikit-learn's 8x8 digits, 70% for training, batch 32, AdamW).  Each
side trains from its own initial weights on the same shuffled batches held on the host; an
epoch is timed from the first batch's upload to the end of the last step on the device; the
three runs take turns for ``--epochs`` rounds after a warm-up epoch each (`_rounds`), and each
keeps its best (the median of the per-round ratios is reported too).  Dropout is left out
of the timed model on every side (a recorded graph would replay one dropout mask).  Runs from
a checkout with no install.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _batches(seed: int = 0) -> list[tuple[Any, Any]]:
    import numpy as np

    from ember.data import load_digits

    data = load_digits()
    xs = np.stack([np.asarray(data[i][0], np.float32) for i in range(len(data))])
    ys = np.asarray([int(data[i][1]) for i in range(len(data))], np.int64)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(xs))[: int(0.7 * len(xs))]
    xs = xs.reshape(len(xs), 1, 8, 8)
    return [(xs[order[i:i + 32]], ys[order[i:i + 32]]) for i in range(0, len(order) - 31, 32)]


def child(epochs: int) -> dict[str, Any]:
    import torch

    import ember
    import ember_cuda

    sys.path.insert(0, str(ROOT / "examples" / "guide"))
    sys.path.insert(0, str(HERE))
    from _rounds import interleaved, summary
    from model import GuideCNN

    batches = _batches()
    dev = ember.device("autodiff<cuda:0>")
    F = ember.nn.functional
    res: dict[str, Any] = {"batches": len(batches), "batch_size": 32}

    def ember_epoch_fn(capturable: bool) -> tuple[Any, Any]:
        model = GuideCNN(8, dropout=0.0, generator=ember.Generator(0)).to(dev)
        opt = ember.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4,
                                capturable=capturable)
        return model, opt

    model, opt = ember_epoch_fn(False)

    def ember_epoch() -> None:
        for xb, yb in batches:
            loss = F.cross_entropy(model(ember.tensor(xb, device=dev)),
                                   ember.tensor(yb, device=dev))
            opt.step(loss.backward())
        dev.synchronize()


    gmodel, gopt = ember_epoch_fn(True)
    x = ember.tensor(batches[0][0], device=dev)
    y = ember.tensor(batches[0][1], device=dev)

    def step() -> Any:
        loss = F.cross_entropy(gmodel(x), y)
        gopt.step(loss.backward())
        return loss

    try:
        recorded = ember_cuda.graph(step, device=dev, warmup=3)

        def graph_epoch() -> None:
            for xb, yb in batches:
                recorded.load(x, xb)
                recorded.load(y, yb)
                recorded.replay()
            dev.synchronize()

    except Exception as exc:  # reported, not fatal
        res["graph_error"] = f"{type(exc).__name__}: {exc}"[:1500]
        graph_epoch = None

    tm = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 4 * 4, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 10)).cuda()
    topt = torch.optim.AdamW(tm.parameters(), lr=1e-3, weight_decay=1e-4)

    def torch_epoch() -> None:
        for xb, yb in batches:
            topt.zero_grad()
            loss = torch.nn.functional.cross_entropy(
                tm(torch.from_numpy(xb).cuda()), torch.from_numpy(yb).cuda())
            loss.backward()
            topt.step()
        torch.cuda.synchronize()

    # the three epochs in turn, round by round (`_rounds.interleaved`); best of each
    fns = {"ember_eager": ember_epoch, "torch_eager": torch_epoch}
    if graph_epoch is not None:
        fns["ember_graph"] = graph_epoch
    times = interleaved(fns, dict.fromkeys(fns, lambda: None), epochs, 1)
    for name, ts in times.items():
        res[f"{name}_ms"] = round(min(ts), 2)
    res["eager_ratio"] = round(res["ember_eager_ms"] / res["torch_eager_ms"], 3)
    res["eager_ratio_median"] = summary(times, "ember_eager", "torch_eager")["median_ratio"]
    if "ember_graph_ms" in res:
        res["graph_ratio"] = round(res["ember_graph_ms"] / res["torch_eager_ms"], 3)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=7)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.epochs)))
        return 0
    sys.path.insert(0, str(HERE))
    from check import child_result

    r = child_result(__file__, ["--child", "--epochs", str(args.epochs)], "RESULT")
    if r is None:
        return 1
    print(json.dumps(r))
    print(f"guide CNN epoch ({r['batches']} batches of 32): ember eager {r['ember_eager_ms']} ms, "
          f"ember graph {r.get('ember_graph_ms')} ms, torch eager {r['torch_eager_ms']} ms; "
          f"ratios {r['eager_ratio']}x / {r.get('graph_ratio')}x (median of rounds, eager: "
          f"{r['eager_ratio_median']}x) {r.get('graph_error', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
