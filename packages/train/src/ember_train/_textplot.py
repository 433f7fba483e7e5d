"""Curves drawn with text: sparklines and a braille line plot (in the manner of plotext)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

__all__ = ["braille_plot", "sparkline"]

_BARS = "▁▂▃▄▅▆▇█"
# Braille dot bits by (x, y) inside a 2x4 cell.
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def sparkline(values: Sequence[float | None], width: int = 40) -> str:
    """One line of block characters, newest value rightmost; the last ``width`` values.

    Examples
    --------
    >>> sparkline([1, 2, 3, 4, 5, 6, 7, 8])
    '▁▂▃▄▅▆▇█'
    """
    vals = list(values)[-width:]
    fin = _finite(vals)
    if not fin:
        return ""
    lo, hi = min(fin), max(fin)
    span = hi - lo
    out = []
    for v in vals:
        if v is None or not math.isfinite(v):
            out.append(" ")
        else:
            i = 0 if span == 0 else round((v - lo) / span * (len(_BARS) - 1))
            out.append(_BARS[i])
    return "".join(out)


def braille_plot(series: Mapping[str, Sequence[float | None]], width: int = 40, height: int = 6,
                 ) -> tuple[list[list[tuple[str, str | None]]], float, float]:
    """Draw series (one y per epoch) as connected lines on a ``width`` x ``height`` cell grid.

    Returns the grid as rows of ``(character, series name or None)`` cells, so a caller can
    colour each series, and the ``(low, high)`` of the y axis.
    """
    fin = [v for s in series.values() for v in _finite(s)]
    lo, hi = (min(fin), max(fin)) if fin else (0.0, 1.0)
    if hi == lo:  # a flat curve sits mid-height on an axis of +-10% around it
        pad = abs(lo) * 0.1 or 0.5
        lo, hi = lo - pad, hi + pad
    w, h = width * 2, height * 4
    bits = [[0] * width for _ in range(height)]
    owner: list[list[str | None]] = [[None] * width for _ in range(height)]
    n = max((len(s) for s in series.values()), default=0)

    def dot(x: int, y: int, name: str) -> None:
        if 0 <= x < w and 0 <= y < h:
            row, col = (h - 1 - y) // 4, x // 2
            bits[row][col] |= _DOTS[x % 2][(h - 1 - y) % 4]
            owner[row][col] = name

    for name, values in series.items():
        pts = []
        for i, v in enumerate(values):
            if v is not None and math.isfinite(v):
                x = 0 if n <= 1 else round(i * (w - 1) / (n - 1))
                pts.append((x, round((v - lo) / (hi - lo) * (h - 1))))
        for (x0, y0), (x1, y1) in itertools.pairwise(pts):
            steps = max(abs(x1 - x0), abs(y1 - y0), 1)
            for t in range(steps + 1):
                dot(x0 + round((x1 - x0) * t / steps), y0 + round((y1 - y0) * t / steps), name)
        for x, y in pts[:1]:
            dot(x, y, name)
    grid = [[(chr(0x2800 + bits[r][c]) if bits[r][c] else " ", owner[r][c])
             for c in range(width)] for r in range(height)]
    return grid, lo, hi
