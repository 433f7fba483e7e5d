"""``scripts/check_imports.py``: core has no import cycle through ``ember._tensor`` and no import
at the bottom of a module, and the checker catches both when they are planted."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_imports",
                                                  ROOT / "scripts" / "check_imports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    """A tiny package ``pkg`` under ``tmp_path`` (its source root) with the given modules."""
    for name, text in {"__init__.py": "", **files}.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_core_has_no_cycle_through_tensor_and_no_late_import() -> None:
    check = _checker()
    assert check.problems() == []
    assert check.main([]) == 0


def test_a_planted_cycle_through_tensor_and_its_late_import_fail(tmp_path: Path) -> None:
    check = _checker()
    src = _package(tmp_path, {
        "_tensor.py": "class Tensor:\n    pass\n\n\nfrom . import _ops  # the bottom\n",
        "_ops.py": "from ._tensor import Tensor\n",
        "_leaf.py": "import math\n",
    })
    lines = check.problems(src, "pkg")
    assert len(lines) == 2, lines
    assert lines[0].startswith("pkg/_tensor.py:5: imports pkg._ops after its first def or class")
    assert lines[1].startswith(
        "import cycle through pkg._tensor (2 modules: pkg._ops, pkg._tensor)")
    assert check.main([str(src), "pkg"]) == 1


def test_a_cycle_through_a_package_init_counts(tmp_path: Path) -> None:
    # ``from .sub import x`` runs ``sub/__init__.py`` first, which imports _tensor back
    check = _checker()
    src = _package(tmp_path, {
        "_tensor.py": "from .sub._ops import neg\n",
        "sub/__init__.py": "from .._tensor import Tensor\n",
        "sub/_ops.py": "def neg() -> None:\n    pass\n",
    })
    (line,) = check.problems(src, "pkg")
    assert line.startswith("import cycle through pkg._tensor (2 modules: pkg._tensor, pkg.sub)")


def test_type_checking_and_function_imports_do_not_count(tmp_path: Path) -> None:
    check = _checker()
    src = _package(tmp_path, {
        "_tensor.py": ("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                       "    from . import _ops\n\n\nclass Tensor:\n"
                       "    def neg(self) -> None:\n        from . import _ops\n\n\n"
                       "def bind() -> None:\n    global _ops\n    from . import _ops\n\n\n"
                       "if TYPE_CHECKING:\n    from ._ops import neg\n"),
        "_ops.py": "from ._tensor import Tensor\n",
    })
    assert check.problems(src, "pkg") == []
    assert check.main([str(src), "pkg"]) == 0


def test_other_cycles_are_shown_but_allowed(tmp_path: Path) -> None:
    check = _checker()
    src = _package(tmp_path, {"a.py": "from . import b\n", "b.py": "from . import a\n"})
    assert check.problems(src, "pkg") == []
    (line,) = check.problems(src, "pkg", show_graph=True)
    assert line == "(allowed) import cycle of 2 modules: pkg.a, pkg.b"
    assert check.main(["--graph", str(src), "pkg"]) == 0


def test_tensor_methods_reach_the_op_modules_bound_at_import() -> None:
    import ember
    from ember import _elementwise, _manipulation, _tensor

    assert _tensor._ew is _elementwise and _tensor._mv is _manipulation
    x = ember.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert (x + x).sum().item() == 20.0
    assert x.reshape(4).tolist() == [1.0, 2.0, 3.0, 4.0]
