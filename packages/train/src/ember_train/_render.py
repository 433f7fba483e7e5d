"""What a training run shows while it runs: plain lines, rich progress bars, or a dashboard.

All renderers read one `RunView` that the learner keeps up to date.  `PlainRenderer` writes one
line per epoch and nothing else (no escape codes, for CI logs and pipes); `ProgressRenderer`
shows rich progress bars on a terminal; `ember_train._dashboard.Dashboard` a live dashboard.
"""

from __future__ import annotations

import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = ["PlainRenderer", "ProgressRenderer", "Renderer", "RunView", "make_renderer"]


@dataclass
class RunView:
    """The state of a run as renderers see it."""

    name: str = "run"
    device: str = ""
    epochs: int = 0
    epoch: int = 0  # the epoch in progress (1-based); 0 before the first
    start_epoch: int = 1
    split: str = ""
    step: int = 0
    steps: int | None = None
    running_loss: float | None = None
    step_losses: list[float] = field(default_factory=list)  # of the epoch in progress
    history: dict[str, list[dict[str, float | None]]] = field(default_factory=dict)
    formats: dict[str, Any] = field(default_factory=dict)  # metric name -> Metric (for format)
    best: tuple[str, float, int] | None = None  # (metric, value, epoch)
    started: float = field(default_factory=time.perf_counter)
    epoch_times: list[float] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def fmt(self, metric: str, value: float | None) -> str:
        m = self.formats.get(metric)
        if m is None:
            return "-" if value is None else f"{value:.4g}"
        return str(m.format(value))

    def eta(self) -> float | None:
        """Seconds left for the whole run, from the mean epoch time so far."""
        if not self.epoch_times:
            return None
        mean = sum(self.epoch_times) / len(self.epoch_times)
        done = self.epoch - self.start_epoch + 1 if self.epoch else 0
        left = max(self.epochs - self.start_epoch + 1 - done, 0) * mean
        if self.steps and self.split == "train":
            left += mean * (1 - self.step / self.steps)
        return left


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-:--"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


SHORT = {"items_per_s": "items/s", "epoch_time_s": "time", "memory_mib": "mem"}
PROCESS_WIDE = {"memory_mib"}


LINE_WIDTH = 80  # plain logs and the summary stay readable on an 80-column terminal


def epoch_line(view: RunView, epoch: int, results: dict[str, dict[str, float | None]],
               best: bool = False) -> str:
    """``epoch 3/25 | train loss 0.31 ...``, one line per split (the later ones indented
    under the first), each wrapped at `LINE_WIDTH` between a metric's name and value pairs."""
    width = len(str(view.epochs))
    head = f"epoch {epoch:>{width}}/{view.epochs}"
    pad = " " * len(head)
    lines: list[str] = []
    for i, (split, values) in enumerate(results.items()):
        # process-wide figures are shown once, with the training split; a no-break space
        # keeps each name with its value when the line is wrapped
        items = [f"{SHORT.get(k, k)}\N{NO-BREAK SPACE}{view.fmt(k, v)}"
                 for k, v in values.items()
                 if v is not None and (split == "train" or k not in PROCESS_WIDE)]
        lines += textwrap.wrap(" ".join([split, *items]), width=LINE_WIDTH,
                               initial_indent=f"{head if i == 0 else pad} | ",
                               subsequent_indent=f"{pad} |   ", break_long_words=False,
                               break_on_hyphens=False)
    text = "\n".join(lines).replace("\N{NO-BREAK SPACE}", " ") or head
    return text + ("  *best*" if best else "")


def summary_rows(table: dict[str, dict[str, str]]) -> tuple[list[str], list[list[str]]]:
    """The final metrics as ``(header, rows)``: a row per metric, a column per split, so the
    table stays as narrow as its splits however many metrics there are."""
    metrics = list(dict.fromkeys(m for values in table.values() for m in values))
    header = ["metric", *table]
    rows = [[SHORT.get(m, m), *(values.get(m, "") for values in table.values())]
            for m in metrics]
    return header, rows


class Renderer:
    """Hooks the learner calls; the base class ignores them all."""

    def __init__(self, view: RunView) -> None:
        self.view = view

    def start(self) -> None: ...
    def split_start(self) -> None: ...
    def step(self) -> None: ...
    def epoch_end(self, epoch: int, results: dict[str, dict[str, float | None]],
                  best: bool) -> None: ...
    def message(self, text: str) -> None: ...
    def summary(self, lines: list[tuple[str, str]], table: dict[str, dict[str, str]]) -> None: ...
    def close(self) -> None: ...


class PlainRenderer(Renderer):
    """One line per epoch, messages and a summary, as plain text."""

    def __init__(self, view: RunView, stream: TextIO | None = None) -> None:
        super().__init__(view)
        self.stream = stream or sys.stdout

    def _print(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def epoch_end(self, epoch: int, results: dict[str, dict[str, float | None]],
                  best: bool) -> None:
        self._print(epoch_line(self.view, epoch, results, best))

    def message(self, text: str) -> None:
        self._print(text)

    def summary(self, lines: list[tuple[str, str]], table: dict[str, dict[str, str]]) -> None:
        self._print("summary")
        for k, v in lines:
            self._print(f"  {k}: {v}")
        header, rows = summary_rows(table)
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for r in [header, *rows]:
            cells = [c.ljust(w) if i == 0 else c.rjust(w)
                     for i, (c, w) in enumerate(zip(r, widths, strict=True))]
            self._print(("  " + "  ".join(cells)).rstrip())


class ProgressRenderer(Renderer):
    """rich progress bars: one for the run's epochs, one for the split in progress."""

    def __init__(self, view: RunView, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        super().__init__(view)
        self.console = console or Console()
        self.progress = Progress(
            TextColumn("[bold]{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"), console=self.console, transient=False)
        self._epochs: Any = None
        self._split: Any = None

    def start(self) -> None:
        v = self.view
        self.progress.start()
        self._epochs = self.progress.add_task("epochs", total=v.epochs,
                                              completed=v.start_epoch - 1, info="")

    def split_start(self) -> None:
        v = self.view
        desc = f"{v.split} {v.epoch}"
        if self._split is None:
            self._split = self.progress.add_task(desc, total=v.steps, info="")
        self.progress.reset(self._split, total=v.steps, completed=v.step, description=desc,
                            info="")

    def step(self) -> None:
        v = self.view
        info = "" if v.running_loss is None else f"loss {v.running_loss:.4f}"
        self.progress.update(self._split, completed=v.step, info=info)

    def epoch_end(self, epoch: int, results: dict[str, dict[str, float | None]],
                  best: bool) -> None:
        self.progress.update(self._epochs, completed=epoch)
        self.console.print(epoch_line(self.view, epoch, results, best), highlight=False,
                           markup=False)

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    def summary(self, lines: list[tuple[str, str]], table: dict[str, dict[str, str]]) -> None:
        self.close()
        self.console.print(summary_table(lines, table))

    def close(self) -> None:
        self.progress.stop()


def summary_table(lines: list[tuple[str, str]], table: dict[str, dict[str, str]]) -> Any:
    from rich.console import Group
    from rich.table import Table

    head = Table.grid(padding=(0, 2))
    head.add_column(no_wrap=True)
    head.add_column(overflow="fold")  # a long path folds onto the next line, never cut
    for k, v in lines:
        head.add_row(f"[bold]{k}", v)
    header, rows = summary_rows(table)
    t = Table(title="final metrics", title_justify="left")
    for i, name in enumerate(header):
        t.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        t.add_row(*row)
    return Group(head, t)


def make_renderer(view: RunView, mode: str = "auto", stream: TextIO | None = None) -> Renderer:
    """``"auto"``: progress bars on a terminal, plain lines elsewhere; ``"dashboard"`` falls back
    to plain lines when stdout is not a terminal; ``"plain"``, ``"progress"``, ``"none"``."""
    stream = stream or sys.stdout
    tty = stream.isatty()
    if mode == "auto":
        mode = "progress" if tty else "plain"
    if mode == "dashboard":
        if not tty:
            mode = "plain"
        else:
            from ._dashboard import Dashboard

            return Dashboard(view)
    if mode == "progress":
        return ProgressRenderer(view)
    if mode == "plain":
        return PlainRenderer(view, stream)
    if mode == "none":
        return Renderer(view)
    raise ValueError(f"unknown renderer {mode!r}: auto, plain, progress, dashboard or none")
