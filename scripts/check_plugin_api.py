"""Plugins take core's machinery from ``ember.backend`` only: no module outside core imports
``ember._*`` (``import ember._x``, ``from ember._x import ...``, ``from ember import _x``).

    python scripts/check_plugin_api.py [PATH ...]

checks every ``.py`` file under the given paths (default: each package's sources but core's,
and the examples, which third parties copy), prints one line per private import with the
public name to use, and exits 1 if there is any.  ``nox -s lint`` runs it.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def default_paths() -> list[Path]:
    return [p / "src" for p in sorted((ROOT / "packages").iterdir())
            if p.name != "core" and (p / "src").is_dir()] + [ROOT / "examples"]


def private_imports(source: str, filename: str = "<source>") -> Iterator[tuple[int, str]]:
    """``(line, module)`` for each import of a private core module in ``source``."""
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("ember._"):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("ember._"):
                yield node.lineno, node.module
            elif node.module == "ember":
                for alias in node.names:
                    if alias.name.startswith("_"):
                        yield node.lineno, f"ember.{alias.name}"


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or default_paths()
    bad = 0
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for f in files:
            for line, module in private_imports(f.read_text(), str(f)):
                bad += 1
                try:
                    shown = f.resolve().relative_to(ROOT)
                except ValueError:
                    shown = f
                print(f"{shown}:{line}: imports {module}, a private module of core: "
                      "take the name from ember.backend (the plugin contract) or ember")
    if bad:
        print(f"{bad} private import(s) of core outside core")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
