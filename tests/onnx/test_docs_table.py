"""docs/onnx.md's supported-op tables are the ones the code generates."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("onnx")

from ember.onnx._doc import BEGIN, END, tables

PAGE = Path(__file__).resolve().parents[2] / "docs" / "onnx.md"


def test_the_page_lists_the_supported_ops_of_the_code() -> None:
    text = PAGE.read_text()
    assert f"{BEGIN}\n{tables()}{END}" in text, (
        "docs/onnx.md is out of date: run python -m ember.onnx --write docs/onnx.md")
