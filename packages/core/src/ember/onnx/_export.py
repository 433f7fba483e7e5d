"""`export`: placeholder replaced below."""

from __future__ import annotations

from typing import Any


def export(module: Any, example_inputs: Any, path: Any) -> None:
    raise NotImplementedError
