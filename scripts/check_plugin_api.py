"""Plugins take core's machinery from ``ember.backend`` only: no module outside core imports
``ember._*`` (``import ember._x``, ``from ember._x import ...``, ``from ember import _x``), and
none reads a tensor's private attributes (``t._data``, ``t._device``, ``t._dtype``,
``T._make``): the decorator contract is ``t.payload``, ``t.device``, ``t.dtype`` and
``tensor_type.from_payload(payload, device, dtype)`` (docs/writing-a-decorator.md).

    python scripts/check_plugin_api.py [PATH ...]

checks every ``.py`` file under the given paths (default: each package's sources but core's
for private imports; each package's sources and tests but core's for tensor attributes; the
examples, which third parties copy, for both), prints one line per finding with the public
name to use, and exits 1 if there is any.  ``nox -s lint`` runs it.

The attribute check goes by name, as a linter must: ``x._data`` is flagged whatever ``x`` is,
so a plugin names its own attributes otherwise; an assignment ``self._dtype = ...`` (a
plugin's own class) and ``self._make`` are not flagged.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


#: Tensor's private attributes and the public name of each
TENSOR_PRIVATE = {"_data": "payload", "_device": "device", "_dtype": "dtype",
                  "_make": "from_payload"}

def default_paths() -> list[Path]:
    return [p / "src" for p in sorted((ROOT / "packages").iterdir())
            if p.name != "core" and (p / "src").is_dir()] + [ROOT / "examples"]


def attribute_paths() -> list[Path]:
    """Where tensor attributes are checked: every plugin's sources and tests, and the
    examples."""
    return [p / sub for p in sorted((ROOT / "packages").iterdir()) if p.name != "core"
            for sub in ("src", "tests") if (p / sub).is_dir()] + [ROOT / "examples"]


def private_attributes(source: str, filename: str = "<source>") -> Iterator[tuple[int, str]]:
    """``(line, attribute)`` for each use of a tensor's private attribute in ``source``, in
    line order."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Attribute) or node.attr not in TENSOR_PRIVATE:
            continue
        on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
        if on_self and (isinstance(node.ctx, ast.Store) or node.attr == "_make"):
            continue  # a plugin class's own attribute
        found.append((node.lineno, node.col_offset, node.attr))
    for line, _, attr in sorted(found):
        yield line, attr


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


def _files(paths: list[Path]) -> list[Path]:
    return [f for root in paths for f in ([root] if root.is_file() else sorted(root.rglob("*.py")))]


def _shown(f: Path) -> Path:
    try:
        return f.resolve().relative_to(ROOT)
    except ValueError:
        return f


def main(argv: list[str]) -> int:
    given = [Path(a) for a in argv]
    bad = 0
    for f in _files(given or default_paths()):
        for line, module in private_imports(f.read_text(), str(f)):
            bad += 1
            print(f"{_shown(f)}:{line}: imports {module}, a private module of core: "
                  "take the name from ember.backend (the plugin contract) or ember")
    for f in _files(given or attribute_paths()):
        for line, attr in private_attributes(f.read_text(), str(f)):
            bad += 1
            print(f"{_shown(f)}:{line}: reads {attr}, a private attribute of Tensor: use "
                  f"{TENSOR_PRIVATE[attr]} (the decorator contract, "
                  "docs/writing-a-decorator.md)")
    if bad:
        print(f"{bad} use(s) of core's private modules or tensor attributes outside core")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
