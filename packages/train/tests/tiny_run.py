"""A tiny training run for the subprocess tests (signals, kill -9, resume, output modes).

Handshakes instead of sleeps: ``--block-at-step N`` prints ``BLOCKED`` after train step N and
waits for a line on stdin; ``--block-in-checkpoint K`` prints ``WRITING`` once the first file of
the K-th checkpoint is written and waits the same way.  The test sends its signal in between.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import ember
import ember_train
from ember import nn, optim
from ember.data import DataLoader, TensorDataset
from ember.nn import functional as F


def build(seed: int = 0):
    ember.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(96, 6)).astype(np.float32)
    y = ((x[:, 0] - x[:, 1] + 0.3 * x[:, 2]) > 0).astype(np.int64) + (x[:, 3] > 1.0)
    g = ember.Generator(seed + 1)
    model = nn.Sequential(nn.Linear(6, 12, generator=g), nn.ReLU(),
                          nn.Dropout(0.3, generator=g), nn.Linear(12, 3, generator=g))
    model.to("autodiff<cpu>")
    opt = optim.Adam(model.parameters(), lr=0.02)
    sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    # shuffled by a generator (not a seed): its state must travel with the checkpoint
    train = DataLoader(TensorDataset(ember.tensor(x[:80]), ember.tensor(y[:80])),
                       batch_size=16, shuffle=True, generator=ember.Generator(seed + 2))
    valid = DataLoader(TensorDataset(ember.tensor(x[80:]), ember.tensor(y[80:])),
                       batch_size=8)
    return model, opt, sched, train, valid


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--artifacts", required=True)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--renderer", default="auto")
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--block-at-step", type=int, default=None)
    p.add_argument("--block-in-checkpoint", type=int, default=None)
    p.add_argument("--block-at-valid-step", type=int, default=None)
    p.add_argument("--weights-out", default=None)
    p.add_argument("--plots", action="store_true")
    args = p.parse_args()

    model, opt, sched, train, valid = build()
    steps = [0, 0]

    class Handshake:
        def on_step_end(self, learner, split, step):
            i = 0 if split == "train" else 1
            steps[i] += 1
            if steps[i] == (args.block_at_step, args.block_at_valid_step)[i]:
                print("BLOCKED", flush=True)
                sys.stdin.readline()

    learner = ember_train.Learner(
        model, opt, loss_fn=F.cross_entropy, scheduler=sched, device="autodiff<cpu>",
        metrics=ember_train.default_metrics(num_classes=3), artifacts=args.artifacts,
        keep_last=2, best_metric="valid/accuracy", accumulate=args.accumulate,
        renderer=args.renderer, callbacks=[Handshake()], name="tiny", plots=args.plots)
    writes = [0]
    if args.block_in_checkpoint is not None:
        def on_file(path):
            if path.name == "model.safetensors":
                writes[0] += 1
                if writes[0] == args.block_in_checkpoint:
                    print(f"WRITING {path.parent}", flush=True)
                    sys.stdin.readline()
        learner.checkpointer.on_file_written = on_file
    result = learner.fit(train, valid, epochs=args.epochs, resume=args.resume)
    print(f"RESULT {result.stop_reason} epochs={result.epochs_done}", flush=True)
    if args.weights_out and not result.interrupted:
        ember.record.save(model, args.weights_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
