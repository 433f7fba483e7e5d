"""The artifacts folder of a run: config, metric logs, checkpoints, plots, final model.

::

    artifacts/
      config.json                the run's configuration (user config + learner settings)
      metrics/train.jsonl        one JSON object per epoch: {"epoch": 1, "loss": ..., ...}
      metrics/valid.jsonl
      checkpoints/epoch-0003/    model, optimizer, scheduler (safetensors) + learner.json
      checkpoints/best.json      which checkpoint is best by the chosen metric
      plots/<metric>.png         curves per split, written at the end of fit
      model.safetensors          the weights to serve (best if tracked, else last)
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ._state import atomic_write_text

__all__ = ["Artifacts"]


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if x is None or isinstance(x, bool | int | float | str):
        return x
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    return str(x)


class Artifacts:
    """Paths and writers of one artifacts folder (created on first write)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def model_path(self) -> Path:
        return self.root / "model.safetensors"

    def metrics_path(self, split: str) -> Path:
        return self.root / "metrics" / f"{split}.jsonl"

    def write_config(self, config: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.config_path, json.dumps(_jsonable(config), indent=2) + "\n")

    def read_config(self) -> dict[str, Any]:
        return dict(json.loads(self.config_path.read_text()))

    def append_metrics(self, split: str, row: dict[str, Any]) -> None:
        path = self.metrics_path(split)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(json.dumps(_jsonable(row)) + "\n")
            f.flush()

    def rewrite_metrics(self, history: dict[str, list[dict[str, Any]]]) -> None:
        """Make the logs say exactly ``history`` (on resume: drop epochs after the checkpoint)."""
        folder = self.root / "metrics"
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.jsonl"):
            if old.stem not in history:
                old.unlink()
        for split, rows in history.items():
            atomic_write_text(self.metrics_path(split),
                              "".join(json.dumps(_jsonable(r)) + "\n" for r in rows))

    def read_metrics(self, split: str) -> list[dict[str, Any]]:
        path = self.metrics_path(split)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def write_plots(self, history: dict[str, list[dict[str, Any]]]) -> list[Path]:
        """One PNG per metric with a curve per split; returns the files written."""
        import matplotlib

        matplotlib.use("Agg", force=True)  # files only; never needs a display
        import matplotlib.pyplot as plt

        folder = self.root / "plots"
        folder.mkdir(parents=True, exist_ok=True)
        names: list[str] = []
        for rows in history.values():
            for r in rows:
                names += [k for k, v in r.items() if k != "epoch" and k not in names
                          and isinstance(v, int | float)]
        written = []
        for name in names:
            fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
            for split, rows in history.items():
                pts = [(r["epoch"], r[name]) for r in rows
                       if isinstance(r.get(name), int | float)]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(xs, ys, marker="o", markersize=3, label=split)
            ax.set_xlabel("epoch")
            ax.set_ylabel(name)
            ax.set_title(name)
            ax.grid(alpha=0.3)
            ax.legend()
            fig.tight_layout()
            path = folder / f"{name}.png"
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.png")
            fig.savefig(tmp)
            plt.close(fig)
            os.replace(tmp, path)
            written.append(path)
        return written
