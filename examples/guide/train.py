"""Train the guide CNN with ember_train's Learner and save everything inference needs.

    python examples/guide/train.py                      # digits, autodiff<cpu>
    python examples/guide/train.py --device "autodiff<fusion<cpu>>" --dashboard
    python examples/guide/train.py --data ~/mnist       # MNIST IDX files
    python examples/guide/train.py --resume             # continue after Ctrl-C
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Small matrices (batch 32, 8x8 images) run fastest on one BLAS thread: OpenBLAS's threads
# cost more to wake than they save here, and much more on a busy machine.  Set before numpy
# is imported; an explicit setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from data import describe, image_size, loaders, splits
from model import GuideCNN

import ember  # after the path set-up above
import ember_train
from ember import optim
from ember.nn import functional as F

BEST = "valid/loss"  # finer than accuracy on 180 validation images, where epochs often tie


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="autodiff<cpu>",
                   help="any device string; training needs an autodiff device (default "
                        "%(default)s)")
    p.add_argument("--data", default=None, help="a folder of MNIST IDX files (default: digits)")
    p.add_argument("--artifacts", default="artifacts/guide", help="output folder")
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-compile", dest="compile", action="store_false",
                   help="run every step op by op instead of through ember.compile")
    p.add_argument("--patience", type=int, default=6,
                   help="early stopping on valid/loss, the metric that picks the best epoch")
    p.add_argument("--keep-last", type=int, default=2, help="checkpoints kept")
    p.add_argument("--dashboard", action="store_true", help="live terminal dashboard")
    p.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    p.add_argument("--resume-command", default=None, help=argparse.SUPPRESS)  # from main.py
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ember.manual_seed(args.seed)
    device = ember.device(args.device)
    datasets = splits(args.data, args.seed)
    print(describe(args.data, datasets), flush=True)
    data = loaders(datasets, args.batch_size, args.seed)

    model = GuideCNN(image_size(datasets["train"]), generator=ember.Generator(args.seed))
    model.to(device)  # before the optimizer, which holds the parameters
    optimizer = optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)

    learner = ember_train.Learner(
        model, optimizer, loss_fn=F.cross_entropy, scheduler=scheduler, device=device,
        metrics=[*ember_train.default_metrics(num_classes=10), ember_train.TopKAccuracy(3)],
        # one metric stops the run and picks the best epoch (the weights served); without
        # best_metric the Learner would use early stopping's anyway
        artifacts=args.artifacts, keep_last=args.keep_last, best_metric=BEST,
        early_stopping=ember_train.EarlyStopping(BEST, patience=args.patience),
        renderer="dashboard" if args.dashboard else "plain" if args.plain else "auto",
        name="guide", resume_command=args.resume_command, compile=args.compile,
        config={"model": model.config(), "data": args.data, "seed": args.seed,
                "batch_size": args.batch_size, "lr": args.lr, "device": str(device),
                "compile": args.compile})
    done = Path(args.artifacts, "test_metrics.json")
    done.unlink(missing_ok=True)  # written again only when this run completes
    result = learner.fit(data["train"], data["valid"], epochs=args.epochs, resume=args.resume)
    if result.interrupted:
        return 0  # the Learner printed how to resume

    # the test split, with the weights inference will use (the best checkpoint's)
    ember.record.load(model, Path(args.artifacts) / "model.safetensors")
    test = learner.validate(data["test"], split="test")
    done.write_text(json.dumps(test, indent=1) + "\n")
    print(f"test accuracy {test['accuracy']:.4f} (best checkpoint, "
          f"{len(datasets['test'])} images)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
