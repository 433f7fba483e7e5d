"""Inference from the guide's artifacts, in a process of its own.

    python examples/guide/infer.py                      # artifacts/guide, on cpu
    python examples/guide/infer.py --device "fusion<cpu>" --show 20

Rebuilds the model from ``config.json``, loads ``model.safetensors`` (the best checkpoint's
weights), and prints predictions beside labels for the test split, then the accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see train.py

from data import splits
from model import GuideCNN

import ember  # after the path set-up above
from ember.data import DataLoader

SHADES = " .:-=+*#%@"


def inference_device(training_device: str) -> str:
    """The training device without its autodiff decorator(s): inference needs no tape."""
    d = ember.device(training_device)
    while d.name == "autodiff" and d.inner is not None:
        d = d.inner
    return str(d)


def thumbnail(image: ember.Tensor) -> str:
    """An 8x8 (or downsampled) image as one line of shade characters per row, rows joined by
    '|' so it fits beside the prediction."""
    a = image.numpy().reshape(image.shape[-2], image.shape[-1])
    step = max(a.shape[0] // 8, 1)
    a = a[::step, ::step]
    return "|".join("".join(SHADES[min(int(v * len(SHADES)), len(SHADES) - 1)] for v in row)
                    for row in a)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--artifacts", default="artifacts/guide")
    p.add_argument("--device", default=None,
                   help="any device string (default: the training device without autodiff)")
    p.add_argument("--data", default=None, help="MNIST IDX folder (default: as in training)")
    p.add_argument("--show", type=int, default=12, help="predictions to print")
    p.add_argument("--min-accuracy", type=float, default=None,
                   help="exit 1 when the test accuracy is lower")
    args = p.parse_args(argv)

    root = Path(args.artifacts)
    saved = json.loads((root / "config.json").read_text())["config"]
    device = args.device or inference_device(saved["device"])
    model = GuideCNN.from_config(saved["model"])
    ember.record.load(model, root / "model.safetensors")
    model.to(device).eval()

    test = splits(args.data if args.data is not None else saved["data"], saved["seed"])["test"]
    t0 = time.perf_counter()
    hits, n, shown = 0, 0, 0
    print(f"inference on {device} with {root / 'model.safetensors'}")
    print(f"{'#':>4}  {'label':>5}  {'pred':>4}  {'p':>5}  image")
    with ember.no_grad():
        for x, y in DataLoader(test, batch_size=256):
            probs = model(x.to(device)).softmax(dim=-1)
            conf, pred = probs.max(dim=-1)
            pred_l, y_l, conf_l = pred.tolist(), y.tolist(), conf.tolist()
            for i, (yp, yt, c) in enumerate(zip(pred_l, y_l, conf_l, strict=True)):
                if shown < args.show:
                    mark = "" if yp == yt else "  <- wrong"
                    print(f"{n + i:>4}  {yt:>5}  {yp:>4}  {c:5.3f}  {thumbnail(x[i])}{mark}")
                    shown += 1
            hits += sum(int(a == b) for a, b in zip(pred_l, y_l, strict=True))
            n += len(y_l)
    accuracy = hits / n
    elapsed = time.perf_counter() - t0
    print(f"test accuracy {accuracy:.4f} ({hits}/{n}) in {elapsed:.2f} s on {device}")
    if args.min_accuracy is not None and accuracy < args.min_accuracy:
        print(f"accuracy below the required {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
