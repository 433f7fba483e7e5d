"""The summary table and the plain log are readable on an 80-column terminal: nothing is cut
short with an ellipsis, every value appears in full, no line is wider than the terminal."""

from __future__ import annotations

import io

from rich.console import Console

from ember_train._render import PlainRenderer, RunView, epoch_line, summary_table

# what a run with default_metrics, top-3 accuracy and the process figures reports
METRICS = ["loss", "accuracy", "top3_accuracy", "macro_f1", "macro_precision", "macro_recall",
           "ece", "epoch_time_s", "items_per_s", "memory_mib"]
SPLITS = ["train", "valid", "test"]


def _values(split: str) -> dict[str, str]:
    return {m: f"0.{i}{len(split)}{i * 7 % 10}4312" for i, m in enumerate(METRICS)}


TABLE = {s: _values(s) for s in SPLITS}
LINES = [("stopped", "finished"), ("epochs", "25"), ("time", "1:02 (62.4 s)"),
         ("best", "valid/accuracy 0.9712 at epoch 21"),
         ("checkpoint", "/a/rather/long/folder/of/runs/guide-cnn-digits/checkpoints/epoch-021/"
                        "model.safetensors")]


def test_summary_table_at_80_columns_shows_every_value_in_full() -> None:
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(summary_table(LINES, TABLE))
    text = console.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    rows = {line.split("│")[1].strip(): line for line in text.splitlines()
            if line.count("│") == len(SPLITS) + 2}
    for metric in ["loss", "accuracy", "macro_precision", "items/s", "mem"]:
        values = rows[metric].split("│")[2:-1]
        key = {"items/s": "items_per_s", "mem": "memory_mib"}.get(metric, metric)
        assert [v.strip() for v in values] == [TABLE[s][key] for s in SPLITS]
    # the long checkpoint path folds over lines instead of being cut
    assert "".join(text.split()).count("model.safetensors") == 1
    assert LINES[-1][1] in "".join(line.strip() for line in text.splitlines())


def test_plain_summary_and_epoch_lines_fit_80_columns() -> None:
    view = RunView(epochs=25)
    out = io.StringIO()
    PlainRenderer(view, out).summary(LINES[:4], TABLE)
    results = {s: {m: 0.123456 + i for i, m in enumerate(METRICS)} for s in SPLITS}
    line = epoch_line(view, 3, results, best=True)
    text = out.getvalue() + line + "\n"
    assert max(len(ln) for ln in text.splitlines()) <= 80
    for split in SPLITS:
        assert all(v in out.getvalue() for v in TABLE[split].values())
    # the epoch's block starts with its number, each split on a line of its own, and no
    # metric is parted from its value
    lines = line.splitlines()
    assert lines[0].startswith("epoch  3/25 | train loss 0.1235")
    assert [ln.split("| ")[1].split()[0] for ln in lines if "|   " not in ln] == SPLITS
    joined = " ".join(ln.split("| ", 1)[1] for ln in lines)
    assert "macro_precision 4.123" in joined and "items/s 8.123" in joined
    assert line.endswith("*best*")


def test_live_dashboard_at_80_columns_cuts_nothing() -> None:
    from ember_train._dashboard import Dashboard

    view = RunView(name="guide", device="autodiff<fusion<cpu>>", epochs=25, epoch=3,
                   split="train", step=10, steps=40, running_loss=0.31,
                   step_losses=[1.0, 0.8, 0.6, 0.5], epoch_times=[1.2, 1.1])
    view.history = {s: [{"loss": 1 / (i + 1), "accuracy": 0.5 + i / 20, "macro_precision": 0.25,
                         "epoch_time_s": 1.2, "items_per_s": 1234.5, "memory_mib": 310.0}
                        for i in range(3)] for s in ("train", "valid")}
    console = Console(width=80, height=40, record=True, file=io.StringIO(), color_system=None)
    console.print(Dashboard(view, console=console).render())
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    assert "device autodiff<fusion<cpu>>  epoch 3/25" in text
    assert "10/40 loss 0.3100" in text and "mem 310" in text
    assert "─ macro_precision ─" in text and "train 0.3333 valid 0.3333" in text
