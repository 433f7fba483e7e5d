"""``python -m ember.onnx [--write PAGE]``: print the supported-op tables, or write them into
a Markdown page between its ``onnx-ops`` markers."""

from __future__ import annotations

import sys
from pathlib import Path

from ._doc import tables, write

if len(sys.argv) == 3 and sys.argv[1] == "--write":
    write(Path(sys.argv[2]))
elif len(sys.argv) == 1:
    print(tables(), end="")
else:
    sys.exit("usage: python -m ember.onnx [--write PAGE]")
