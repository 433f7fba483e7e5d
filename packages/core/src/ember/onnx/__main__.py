"""``python -m ember.onnx [--write PAGE]``: print the supported-op tables, or write them into
a Markdown page between its ``onnx-ops`` markers."""

from __future__ import annotations

import sys
from pathlib import Path

from ._doc import tables, write


def main(argv: list[str]) -> None:
    if len(argv) == 2 and argv[0] == "--write":
        write(Path(argv[1]))
    elif not argv:
        print(tables(), end="")
    else:
        sys.exit("usage: python -m ember.onnx [--write PAGE]")


if __name__ == "__main__":
    main(sys.argv[1:])
