"""Core's import graph stays a tree around the Tensor class: no import cycle runs through
``ember._tensor``, and no module imports at its bottom.

    python scripts/check_imports.py [--graph] [SRC [PACKAGE]]

reads the modules of ``PACKAGE`` (default ``ember``) under ``SRC`` (default core's sources)
and counts the imports that run when a module is imported: module-level statements, including
those under ``if``/``try``/``with``, but not under ``if TYPE_CHECKING:`` nor inside a function
or class.  It fails (exit 1), printing one line per problem, if

- the imports form a cycle through ``<PACKAGE>._tensor`` (a strongly connected component of
  more than one module that holds it): ``_tensor`` imports none of the op modules; Tensor's
  methods reach them through the bindings ``ember/__init__.py`` makes once every module is
  loaded (``_tensor.bind``);
- a module-level import comes after the module's first ``def`` or ``class``: an import at the
  bottom of a file is how a cycle hides.

``--graph`` also prints every cycle (any strongly connected component of the package), which
the check itself tolerates outside ``_tensor``.  ``nox -s lint`` runs it.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
CORE_SRC = ROOT / "packages" / "core" / "src"


class Import(NamedTuple):
    line: int
    target: str  # the module imported, dotted and absolute
    late: bool  # after the module's first top-level def or class


def modules(src: Path, package: str) -> dict[str, Path]:
    """``{dotted name: file}`` for every module of ``package`` under ``src``."""
    found = {}
    for f in sorted((src / package).rglob("*.py")):
        parts = f.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = f
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a module body that run on import, blocks flattened; not the bodies of
    functions and classes, nor ``if TYPE_CHECKING:`` (its ``else`` runs)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _runtime_statements(node.body)
            yield from _runtime_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody,
                          *(h.body for h in node.handlers)):
                yield from _runtime_statements(block)
        elif isinstance(node, ast.With):
            yield from _runtime_statements(node.body)


def runtime_imports(name: str, path: Path, known: set[str]) -> list[Import]:
    """The imports of module ``name`` (file ``path``) that run on import, as edges to modules
    in ``known`` or outside it (``from pkg import sub`` is an edge to ``pkg.sub`` when that is a
    module, else to ``pkg``)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    first_def = min((n.lineno for n in tree.body
                     if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)),
                    default=None)
    # an import runs the packages above its target too, but the importer's own packages are
    # already being imported (a package runs before its modules)
    mine = {name, *(name.rsplit(".", k)[0] for k in range(1, name.count(".") + 1))}

    def edges(line: int, target: str, late: bool) -> list[Import]:
        parts = target.split(".")
        above = [".".join(parts[:k]) for k in range(1, len(parts))]
        return [Import(line, t, late) for t in [*above, target] if t not in mine]

    found = []
    for node in _runtime_statements(tree.body):
        late = first_def is not None and node.lineno > first_def
        if isinstance(node, ast.Import):
            for alias in node.names:
                found += edges(node.lineno, alias.name, late)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module == "__future__":
                continue
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                # a name taken from a package needs that package run far enough to define it
                found += edges(node.lineno, sub if sub in known else module, late)
                if sub not in known and module in mine:
                    found.append(Import(node.lineno, module, late))
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def problems(src: Path = CORE_SRC, package: str = "ember",
             show_graph: bool = False) -> list[str]:
    """One line per problem (see the module docstring); with ``show_graph`` also every cycle."""
    files = modules(src, package)
    known = set(files)
    graph: dict[str, set[str]] = {}
    lines = []
    for name, path in files.items():
        imports = runtime_imports(name, path, known)
        graph[name] = {i.target for i in imports if i.target in known and i.target != name}
        shown = path.relative_to(ROOT if ROOT in path.parents else src)
        lines += [f"{shown}:{line}: imports {target} after its first def or class: move the "
                  "import to the top (a cycle it hides must be broken instead)"
                  for line, target in sorted({(i.line, i.target) for i in imports if i.late})]
    tensor = f"{package}._tensor"
    for component in strongly_connected(graph):
        if tensor in component:
            lines.append(f"import cycle through {tensor} ({len(component)} modules: "
                         f"{', '.join(component)}): {tensor} must import no module that "
                         "imports it back; Tensor's methods reach ops through _tensor.bind")
        elif show_graph:
            lines.append(f"(allowed) import cycle of {len(component)} modules: "
                         f"{', '.join(component)}")
    return lines


def main(argv: list[str]) -> int:
    show_graph = "--graph" in argv
    args = [a for a in argv if a != "--graph"]
    src = Path(args[0]) if args else CORE_SRC
    package = args[1] if len(args) > 1 else "ember"
    lines = problems(src, package, show_graph)
    print("\n".join(lines) if lines else f"{package}: no import cycle through _tensor, "
          "no import below a definition")
    return 1 if any(not line.startswith("(allowed)") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
