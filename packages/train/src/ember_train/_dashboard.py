"""A live terminal dashboard (rich Live): progress, ETA, and a curve per metric and split."""

from __future__ import annotations

import time
from typing import Any

from ._render import SHORT, Renderer, RunView, format_duration, summary_table
from ._textplot import braille_plot, sparkline

__all__ = ["Dashboard"]

COLOURS = {"train": "cyan", "valid": "magenta", "test": "green"}
# Shown as curves; the rest (time, memory, throughput) go in the header as numbers.
CURVE_SKIP = {"epoch", "epoch_time_s", "memory_mib", "items_per_s"}


class Dashboard(Renderer):
    """Redrawn a few times a second from the `RunView` while the run goes on."""

    def __init__(self, view: RunView, console: Any = None, refresh_per_second: float = 4) -> None:
        from rich.console import Console
        from rich.live import Live

        super().__init__(view)
        self.console = console or Console()
        self.live = Live(console=self.console, refresh_per_second=refresh_per_second,
                         get_renderable=self.render, transient=False, redirect_stdout=False,
                         redirect_stderr=False)

    # -- Renderer hooks ---------------------------------------------------------------------

    def start(self) -> None:
        self.live.start()

    def epoch_end(self, epoch: int, results: dict[str, dict[str, float | None]],
                  best: bool) -> None:
        self.live.refresh()

    def message(self, text: str) -> None:
        self.view.messages.append(text)
        self.live.refresh()

    def summary(self, lines: list[tuple[str, str]], table: dict[str, dict[str, str]]) -> None:
        self.close()
        self.console.print(summary_table(lines, table))

    def close(self) -> None:
        if self.live.is_started:
            self.live.stop()

    # -- drawing ----------------------------------------------------------------------------

    def render(self) -> Any:
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table

        width = max(self.console.width, 40)
        return Group(self._header(), self._progress(width),
                     *self._curves(width, Table, Panel), *self._footer())

    def _header(self) -> Any:
        from rich.text import Text

        v = self.view
        elapsed = time.perf_counter() - v.started
        t = Text()
        t.append(f" {v.name} ", style="bold reverse")
        t.append(f"  device {v.device}  epoch {v.epoch}/{v.epochs}  ")
        t.append(f"elapsed {format_duration(elapsed)}  eta {format_duration(v.eta())}")
        last = v.history.get("train", [])
        if last:
            for k in ("items_per_s", "epoch_time_s", "memory_mib"):
                if last[-1].get(k) is not None:
                    t.append(f"  {SHORT[k]} {v.fmt(k, last[-1][k])}")
        return t

    def _progress(self, width: int) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        v = self.view
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=12)
        grid.add_column(ratio=1)
        grid.add_column()
        total = v.steps or 0
        bar = ProgressBar(total=total or None, completed=v.step, width=max(width - 50, 10))
        loss = "" if v.running_loss is None else f"loss {v.running_loss:.4f}"
        grid.add_row(f"{v.split or 'start'} {v.epoch}", bar,
                     f"{v.step}/{total or '?'} {loss}")
        spark = sparkline(v.step_losses, width=max(width - 30, 10))
        if spark:
            grid.add_row("step loss", spark, "")
        return grid

    def _curves(self, width: int, table_cls: Any, panel_cls: Any) -> list[Any]:
        from rich.text import Text

        v = self.view
        names: list[str] = []
        for rows in v.history.values():
            for row in rows:
                names += [k for k, val in row.items() if k not in CURVE_SKIP
                          and k not in names and val is not None]
        if not names:
            return [Text("curves appear after the first epoch", style="dim")]
        cols = 3 if width >= 150 else 2 if width >= 90 else 1
        cols = min(cols, len(names))
        # fit the terminal: shrink the plots first, then show fewer metrics (the first ones:
        # loss and accuracy come first)
        free = max(self.console.height - 6, 5)
        plot_h = 5
        while plot_h > 2 and -(-len(names) // cols) * (plot_h + 3) > free:
            plot_h -= 1
        names = names[:max(free // (plot_h + 3), 1) * cols]
        plot_w = max((width // cols) - 16, 12)
        panels = []
        for name in names:
            series = {s: [r.get(name) for r in rows] for s, rows in v.history.items()
                      if any(r.get(name) is not None for r in rows)}
            grid, lo, hi = braille_plot(series, width=plot_w, height=plot_h)
            body = Text()
            for i, cells in enumerate(grid):
                label = v.fmt(name, hi) if i == 0 else v.fmt(name, lo) if i == len(grid) - 1 \
                    else ""
                body.append(f"{label:>9} ")
                for ch, owner in cells:
                    body.append(ch, style=COLOURS.get(owner or "", "white"))
                body.append("\n")
            for s, vals in series.items():
                last = next((x for x in reversed(vals) if x is not None), None)
                body.append(f" {s} ", style=COLOURS.get(s, "white"))
                body.append(v.fmt(name, last))
            panels.append(panel_cls(body, title=name, title_align="left", padding=(0, 1)))
        grid_t = table_cls.grid(expand=True)
        for _ in range(cols):
            grid_t.add_column(ratio=1)
        for i in range(0, len(panels), cols):
            grid_t.add_row(*panels[i:i + cols])
        return [grid_t]

    def _footer(self) -> list[Any]:
        from rich.text import Text

        return [Text(m, style="yellow") for m in self.view.messages[-3:]]
