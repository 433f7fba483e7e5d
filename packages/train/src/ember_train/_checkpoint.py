"""Checkpoints: one directory per checkpoint, made complete before it gets its name.

A checkpoint is written into ``checkpoints/.tmp-<name>-<pid>/`` (each file fsynced), the
directory is fsynced and renamed to ``checkpoints/<name>`` in one step.  A directory with a
checkpoint's name is therefore always complete: a crash, ``kill -9`` or a second Ctrl-C in the
middle of a write leaves only a ``.tmp-`` directory, which is ignored and cleaned up by the next
run.  Names sort by progress: ``epoch-0003`` is the end of epoch 3, ``epoch-0003-step-000045``
is 45 steps into epoch 4.  ``best.json`` names the best checkpoint by a metric; pruning
(keep-last-N) never removes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._state import atomic_write_text, fsync_dir, load_state, save_state

__all__ = ["CheckpointInfo", "Checkpointer", "checkpoint_name"]

_NAME = re.compile(r"^epoch-(\d{4,})(?:-step-(\d{6,}))?$")


def checkpoint_name(epochs_done: int, step: int = 0) -> str:
    return f"epoch-{epochs_done:04d}" + (f"-step-{step:06d}" if step else "")


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint on disk: where it is and how far training had come."""

    path: Path
    epochs_done: int
    step: int  # steps into epoch ``epochs_done + 1``; 0 at an epoch boundary

    @property
    def name(self) -> str:
        return self.path.name


class Checkpointer:
    """Writes, lists, prunes and loads the checkpoints of one artifacts folder.

    Parameters
    ----------
    directory
        The ``checkpoints`` folder (created when missing).
    keep_last
        How many of the newest checkpoints to keep (``None``: all).  The best one is kept too.
    """

    def __init__(self, directory: str | os.PathLike[str], keep_last: int | None = 3) -> None:
        if keep_last is not None and keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, got {keep_last}")
        self.directory = Path(directory)
        self.keep_last = keep_last
        # Tests replace this to stop a write half-way; it sees each file as it is written.
        self.on_file_written: Any = None

    # -- listing ----------------------------------------------------------------------------

    def list(self) -> list[CheckpointInfo]:
        """Complete checkpoints, oldest first."""
        if not self.directory.is_dir():
            return []
        out = []
        for p in self.directory.iterdir():
            m = _NAME.match(p.name)
            if m and p.is_dir():
                out.append(CheckpointInfo(p, int(m[1]), int(m[2] or 0)))
        return sorted(out, key=lambda c: (c.epochs_done, c.step))

    def latest(self) -> CheckpointInfo | None:
        found = self.list()
        return found[-1] if found else None

    def best(self) -> CheckpointInfo | None:
        """The checkpoint ``best.json`` names, if it still exists."""
        try:
            name = json.loads((self.directory / "best.json").read_text())["name"]
        except (OSError, ValueError, KeyError):
            return None
        return next((c for c in self.list() if c.name == name), None)

    def resolve(self, which: str | os.PathLike[str]) -> CheckpointInfo:
        """``"latest"``, ``"best"``, a checkpoint name, or a checkpoint directory path."""
        if which in ("latest", "best"):
            found = self.latest() if which == "latest" else self.best()
            if found is None:
                raise FileNotFoundError(f"no {which} checkpoint in {self.directory}")
            return found
        path = Path(which)
        if not path.is_dir():
            path = self.directory / str(which)
        m = _NAME.match(path.name)
        if not (m and path.is_dir()):
            raise FileNotFoundError(f"not a checkpoint: {which}")
        return CheckpointInfo(path, int(m[1]), int(m[2] or 0))

    # -- writing ----------------------------------------------------------------------------

    def clean(self) -> None:
        """Remove what interrupted writes and deletions left behind."""
        if self.directory.is_dir():
            for p in self.directory.iterdir():
                if p.name.startswith((".tmp-", ".trash-")):
                    shutil.rmtree(p, ignore_errors=True)

    def clear(self) -> int:
        """Remove every checkpoint and ``best.json``; how many checkpoints there were."""
        found = self.list()
        for c in found:
            self._remove(c.path)
        (self.directory / "best.json").unlink(missing_ok=True)
        return len(found)

    def save(self, name: str, parts: dict[str, Any], learner_state: dict[str, Any]) -> Path:
        """Write ``parts`` (name -> nested state, one safetensors file each) and
        ``learner.json`` as the complete checkpoint ``name``; return its path."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / name
        tmp = self.directory / f".tmp-{name}-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        for part, state in parts.items():
            save_state(tmp / f"{part}.safetensors", state)
            self._written(tmp / f"{part}.safetensors")
        with open(tmp / "learner.json", "w") as f:
            json.dump(learner_state, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        self._written(tmp / "learner.json")
        fsync_dir(tmp)
        if final.exists():  # rewriting a name (resumed from an older checkpoint)
            self._remove(final)
        os.rename(tmp, final)
        fsync_dir(self.directory)
        return final

    def _written(self, path: Path) -> None:
        if self.on_file_written is not None:
            self.on_file_written(path)

    def mark_best(self, name: str, metric: str, value: float, epoch: int) -> None:
        atomic_write_text(self.directory / "best.json", json.dumps(
            {"name": name, "metric": metric, "value": value, "epoch": epoch}, indent=1))

    def prune(self) -> None:
        """Keep the newest ``keep_last`` checkpoints and the best one."""
        if self.keep_last is None:
            return
        found = self.list()
        best = self.best()
        for c in found[:-self.keep_last]:
            if best is None or c.path != best.path:
                self._remove(c.path)

    def _remove(self, path: Path) -> None:
        # Renamed first, so a half-deleted directory never carries a checkpoint's name.
        trash = self.directory / f".trash-{path.name}-{os.getpid()}"
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)

    # -- loading ----------------------------------------------------------------------------

    @staticmethod
    def read(info: CheckpointInfo, parts: tuple[str, ...]) -> tuple[dict[str, Any],
                                                                     dict[str, Any]]:
        """The parts' states and the learner state of one checkpoint."""
        learner = json.loads((info.path / "learner.json").read_text())
        states = {p: load_state(info.path / f"{p}.safetensors") for p in parts
                  if (info.path / f"{p}.safetensors").exists()}
        return states, learner

    def read_latest(self, parts: tuple[str, ...]) -> tuple[CheckpointInfo, dict[str, Any],
                                                           dict[str, Any]] | None:
        """The newest checkpoint that loads; unreadable ones are skipped with a warning."""
        for info in reversed(self.list()):
            try:
                states, learner = self.read(info, parts)
            except Exception as e:  # any damage (truncation, bad JSON) means "try the previous"
                warnings.warn(f"skipping unreadable checkpoint {info.path}: {e}", stacklevel=2)
                continue
            return info, states, learner
        return None
