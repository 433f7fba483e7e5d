"""The supported-op tables of ``docs/onnx.md``, generated from the rule tables.

``python -m ember.onnx`` prints them; ``python -m ember.onnx --write docs/onnx.md`` puts them
between the page's ``<!-- onnx-ops:begin -->`` and ``<!-- onnx-ops:end -->`` markers (a test
checks that the page matches).
"""

from __future__ import annotations

from pathlib import Path

from . import _load  # noqa: F401  # registers the op rules
from ._export import EXPORT_OPSET, RULES
from ._registry import OPS, OPSET_MAX, OPSET_MIN

BEGIN, END = "<!-- onnx-ops:begin -->", "<!-- onnx-ops:end -->"


def tables() -> str:
    """Markdown: the operators `load` reads, then the ember ops `export` writes."""
    rows = [f"Import: {len(OPS) + 1} operators of the default domain, opsets "
            f"{OPSET_MIN}-{OPSET_MAX} (*host*: also computed on the host when every input is "
            "known there, as shape arithmetic is).", "",
            "| ONNX operator | host | notes |", "|---|---|---|",
            "| Constant | yes | value, value_float(s), value_int(s) |"]
    for name in sorted(OPS):
        rule = OPS[name]
        rows.append(f"| {name} | {'yes' if rule.host is not None else ''} | {rule.note} |")
    rows += ["", f"Export: {len(RULES)} ember ops, written at opset {EXPORT_OPSET}: "
             + ", ".join(f"`{n}`" for n in sorted(RULES)) + "."]
    return "\n".join(rows) + "\n"


def write(page: Path) -> None:
    text = page.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    page.write_text(f"{head}{BEGIN}\n{tables()}{END}{tail}")
