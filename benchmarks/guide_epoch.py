"""One training epoch of the guide CNN (digits, batch 32, AdamW) on ``autodiff<cpu>`` against
the same model in PyTorch on the CPU.  Prints the medians and the ratio; ``--write`` puts them
in ``docs/performance.md`` under ``## Guide``.

Run: ``.venv/bin/python benchmarks/guide_epoch.py [--rounds 7] [--write]``.

Both sides get the same weights (copied through ``state_dict``), the same batches in the same
order, and one BLAS/intra-op thread (``OPENBLAS_NUM_THREADS`` / ``torch.set_num_threads``;
``--threads`` changes both).  Rounds interleave ember and PyTorch, so a busy machine slows both
alike.  Three ember figures: the bare loop (what PyTorch runs), the bare loop on
``autodiff<fusion<cpu>>`` when the Fusion plugin is installed, and a `Learner` epoch (metrics,
progress bookkeeping and an end-of-epoch checkpoint included).  torch is used only as the peer.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

THREADS = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--threads"), "1")
os.environ["OPENBLAS_NUM_THREADS"] = THREADS  # before numpy is imported


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "guide"))
sys.path.insert(0, str(ROOT))

from data import loaders, splits  # noqa: E402  # after the path set-up
from model import GuideCNN  # noqa: E402

import ember  # noqa: E402
import ember_train  # noqa: E402
from benchmarks.models.guide import torch_guide_cnn  # noqa: E402  # the PyTorch mirror
from ember import optim  # noqa: E402
from ember.nn import functional as F  # noqa: E402

BATCH, LR, SEED = 32, 2e-3, 0


def ember_setup(device: str):
    ember.manual_seed(SEED)
    datasets = splits(None, SEED)
    train = loaders(datasets, BATCH, SEED)["train"]
    model = GuideCNN(8, generator=ember.Generator(SEED))
    state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    model.to(device)
    opt = optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-4)
    return model, opt, train, state


def ember_epoch(model, opt, train, device) -> float:
    t0 = time.perf_counter()
    for x, y in train:
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        opt.step(loss.backward())
        loss.item()
    return time.perf_counter() - t0


def torch_setup(state, train):
    import torch

    torch.manual_seed(SEED)
    torch.set_num_threads(int(THREADS))
    model = torch_guide_cnn()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-4)
    ds = train.dataset
    x_all = torch.from_numpy(ds.dataset.tensors[0].numpy()[ds.indices].copy())
    y_all = torch.from_numpy(ds.dataset.tensors[1].numpy()[ds.indices].copy())
    return model, opt, x_all, y_all


def torch_epoch(model, opt, x_all, y_all, train) -> float:
    import torch.nn.functional as TF

    t0 = time.perf_counter()
    for idx in train.batch_indices():
        x, y = x_all[idx], y_all[idx]
        opt.zero_grad()
        loss = TF.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
    return time.perf_counter() - t0


def learner_epoch(model, opt, train, device, folder) -> float:
    learner = ember_train.Learner(model, opt, loss_fn=F.cross_entropy, device=device,
                                  metrics=ember_train.default_metrics(num_classes=10),
                                  artifacts=folder, keep_last=1, renderer="none", plots=False)
    t0 = time.perf_counter()
    learner.fit(train, epochs=1)
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", default="1")
    p.add_argument("--write", action="store_true", help="update docs/performance.md")
    args = p.parse_args()

    import torch

    devices = ["autodiff<cpu>"]
    if any(d.name == "fusion<...>" and d.available for d in ember.devices()):
        devices.append("autodiff<fusion<cpu>>")
    runs = {d: ember_setup(d) for d in devices}
    _model, _opt, train, state = runs["autodiff<cpu>"]
    t_model, t_opt, x_all, y_all = torch_setup(state, train)
    l_model, l_opt, l_train, _ = ember_setup("autodiff<cpu>")
    times: dict[str, list[float]] = {k: [] for k in [*devices, "learner", "torch"]}
    with tempfile.TemporaryDirectory() as folder:
        for r in range(args.rounds + 1):  # round 0 warms up (allocations, kernel caches)
            for d in devices:
                m, o, tr, _ = runs[d]
                t = ember_epoch(m, o, tr, d)
                if r:
                    times[d].append(t)
            t = learner_epoch(l_model, l_opt, l_train, "autodiff<cpu>", folder)
            if r:
                times["learner"].append(t)
            t_model.train()
            t = torch_epoch(t_model, t_opt, x_all, y_all, train)
            if r:
                times["torch"].append(t)
    med = {k: statistics.median(v) for k, v in times.items()}
    steps = len(train)
    lines = [f"guide epoch: {steps} steps of batch {BATCH} (digits, 8x8), AdamW, "
             f"{args.threads} thread(s), median of {args.rounds} rounds"]
    for k in [*devices, "learner"]:
        label = f"ember {k}" if k != "learner" else "ember Learner epoch (autodiff<cpu>)"
        lines.append(f"  {label:<42} {med[k] * 1e3:8.1f} ms   {med[k] / med['torch']:.2f}x")
    lines.append(f"  {'PyTorch ' + torch.__version__ + ' (CPU)':<42} {med['torch'] * 1e3:8.1f} ms"
                 "   1.00x")
    print("\n".join(lines))
    if args.write:
        write_doc(med, devices, steps, args, torch.__version__)
    return 0


def write_doc(med, devices, steps, args, torch_version) -> None:
    path = ROOT / "docs" / "performance.md"
    text = path.read_text() if path.exists() else "# Performance\n\nMeasured numbers, with " \
        "the command that produced each.\n"
    rows = "\n".join(
        f"| ember, {'bare loop, ' + k if k != 'learner' else 'Learner epoch, autodiff<cpu>'} "
        f"| {med[k] * 1e3:.0f} | {med[k] / med['torch']:.2f}x |"
        for k in [*devices, "learner"])
    section = f"""## Guide

One training epoch of the guide CNN (`examples/guide`: conv 16, conv 32, max-pool, dropout,
linear 64, linear 10) on the digits training split: {steps} steps of batch 32, AdamW, the same
weights and batches on both sides, {args.threads} BLAS / intra-op thread(s), median of
{args.rounds} interleaved rounds (`.venv/bin/python benchmarks/guide_epoch.py --write`;
{platform.machine()}, {len(os.sched_getaffinity(0))} cores, measured {time.strftime('%Y-%m-%d')}).

| run | epoch (ms) | vs PyTorch |
|---|---:|---:|
{rows}
| PyTorch {torch_version}, CPU | {med['torch'] * 1e3:.0f} | 1.00x |

The bare loop is forward, `backward()`, `optimizer.step(grads)` and `loss.item()` per batch,
which is what the PyTorch loop does; the Learner epoch adds the metrics (loss, accuracy, macro
precision/recall/F1, lr, throughput, time, memory) and an end-of-epoch checkpoint.
"""
    if "## Guide" in text:
        text = re.sub(r"## Guide\n.*?(?=\n## |\Z)", section.rstrip() + "\n", text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
