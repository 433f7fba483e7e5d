"""The guide's CNN trained by ember_train's Learner, on one process or on N MPI ranks.

    python dp_worker.py OUT --global-batch 32                 # one process
    mpirun -n 2 python dp_worker.py OUT --global-batch 32     # 2 ranks of 16 each
    ... --kill-at 3 / --stop-at 3                             # rank 1 dies / hangs at step 3

Writes ``OUT/weights-rank<r>.npz`` (every parameter after training) and
``OUT/history-rank<r>.json`` (the Learner's metric history).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import numpy as np

import ember
import ember.distributed as dist
import ember_train
from ember import optim
from ember.data import DataLoader, DistributedSampler, Subset, load_digits
from ember.nn import functional as F

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "examples" / "guide"))
from model import GuideCNN  # noqa: E402  # the guide's own model, after the path set-up


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--global-batch", type=int, default=32)
    p.add_argument("--samples", type=int, default=128)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--kill-at", type=int, default=None)
    p.add_argument("--stop-at", type=int, default=None)
    args = p.parse_args()
    out = Path(args.out)

    comm = dist.init()
    rank, world = comm.rank, comm.world_size
    # Each rank builds its model from its own seed: the Learner's broadcast must make them equal.
    # No dropout: its masks would depend on how the batch is split over ranks.
    model = GuideCNN(8, dropout=0.0, generator=ember.Generator(rank))
    model.to("autodiff<cpu>")
    opt = optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    data = Subset(load_digits(), list(range(args.samples)))
    if world == 1:
        train = DataLoader(data, batch_size=args.global_batch, shuffle=True, seed=0)
    else:
        train = DataLoader(data, batch_size=args.global_batch // world,
                           sampler=DistributedSampler(data, seed=0))

    class Faults:
        def on_step_end(self, learner: ember_train.Learner, split: str, step: int) -> None:
            if rank == 1 and learner.global_step == args.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if rank == 1 and learner.global_step == args.stop_at:
                os.kill(os.getpid(), signal.SIGSTOP)

    learner = ember_train.Learner(model, opt, loss_fn=F.cross_entropy, device="autodiff<cpu>",
                                  artifacts=out / "run", renderer="none", plots=False,
                                  callbacks=[Faults()])
    learner.fit(train, epochs=args.epochs)
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    np.savez(out / f"weights-rank{rank}.npz", **weights)
    (out / f"history-rank{rank}.json").write_text(json.dumps(learner.history))
    return 0


if __name__ == "__main__":
    sys.exit(main())
