"""Sparklines and the braille plot of the dashboard."""

from __future__ import annotations

from ember_train._textplot import braille_plot, sparkline


def test_sparkline_spans_lowest_to_highest_block():
    s = sparkline([3.0, 1.0, 2.0, 5.0])
    assert s[1] == "▁" and s[3] == "█" and len(s) == 4


def test_sparkline_keeps_the_newest_values_and_marks_gaps():
    s = sparkline([float(i) for i in range(100)], width=10)
    assert len(s) == 10 and s[-1] == "█"
    assert sparkline([1.0, None, float("nan"), 2.0]) == "▁  █"
    assert sparkline([]) == ""


def test_braille_plot_draws_each_series_in_its_cells():
    grid, lo, hi = braille_plot({"train": [1.0, 0.5, 0.25], "valid": [0.8, 0.75, 0.7]},
                                width=20, height=4)
    assert (lo, hi) == (0.25, 1.0)
    assert len(grid) == 4 and all(len(row) == 20 for row in grid)
    owners = {o for row in grid for _, o in row}
    assert owners == {None, "train", "valid"}
    # train starts at the top-left (its highest value) and ends bottom-right (its lowest)
    assert grid[0][0][1] == "train" and grid[-1][-1][1] == "train"
    assert all("\u2800" <= ch <= "\u28ff" or ch == " " for row in grid for ch, _ in row)


def test_braille_plot_of_a_constant_series_stays_in_range():
    grid, lo, hi = braille_plot({"train": [2.0, 2.0]}, width=5, height=2)
    assert lo < 2.0 < hi
    assert any(o == "train" for row in grid for _, o in row)
