"""The set-up scripts: the demo's environment holds the guide's run-time dependencies only, and
a second set-up installs nothing unless a pyproject or requirements file changed."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "examples" / "guide"
REQUIREMENTS = GUIDE / "requirements.txt"
# what the tests need and the demo must not install (several GB between them)
TEST_ONLY = {"torch", "triton", "onnxruntime", "onnx", "onnxscript", "mypy", "pyopencl", "ruff",
             "pytest", "hypothesis", "cupy", "wgpu", "mpi4py"}


def _editables() -> list[tuple[Path, list[str]]]:
    """``(package folder, extras)`` for each ``-e`` line of the guide's requirements."""
    out = []
    for line in REQUIREMENTS.read_text().splitlines():
        m = re.match(r"^-e (\S+?)(?:\[([\w,]+)\])?$", line.strip())
        if m:
            out.append((ROOT / m[1], m[2].split(",") if m[2] else []))
    return out


def _requirement_names(reqs: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower() for r in reqs}


def test_the_demo_requirements_name_the_guides_packages_and_nothing_test_only() -> None:
    projects = {folder: tomllib.loads((folder / "pyproject.toml").read_text())["project"]
                for folder, _ in _editables()}
    names = {p["name"] for p in projects.values()}
    assert {"ember", "ember-backend-cpu", "ember-autodiff", "ember-train"} <= names
    # what each package pulls, with the extras the file asks for
    pulled: set[str] = set()
    for folder, extras in _editables():
        project = projects[folder]
        pulled |= _requirement_names(project.get("dependencies", []))
        for extra in extras:
            pulled |= _requirement_names(project["optional-dependencies"][extra])
    assert "scikit-learn" in pulled  # ember.data.load_digits reads its shipped digits
    assert not pulled & TEST_ONLY, pulled & TEST_ONLY
    # every ember module the guide imports comes from a package the file installs
    imported = set()
    for script in GUIDE.glob("*.py"):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    local = {p.stem for p in GUIDE.glob("*.py")}
    third_party = imported - local - set(sys.stdlib_module_names)
    provided = {"ember", *(n.replace("-backend", "").replace("-", "_") for n in names)}
    assert third_party <= provided, third_party - provided


def _bash(script: str, cwd: Path) -> str:
    proc = subprocess.run(["bash", "-c", f"set -euo pipefail; . {ROOT}/scripts/_venv.sh; {script}"],
                          capture_output=True, text=True, cwd=cwd, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


def test_the_stamp_changes_with_the_files_it_covers_and_nothing_else(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "req.txt").write_text("-e packages/core\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    stamp = "venv_stamp venv req.txt pyproject.toml"
    first = _bash(stamp, tmp_path)
    assert _bash(f"venv_current venv {first} && echo current || echo stale", tmp_path) == "stale"
    _bash(f"venv_mark venv {first}", tmp_path)
    assert _bash(f"venv_current venv $({stamp}) && echo current || echo stale",
                 tmp_path) == "current"
    (tmp_path / "unrelated.py").write_text("x = 1\n")  # a source change needs no new install
    assert _bash(stamp, tmp_path) == first
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["y"]\n')
    assert _bash(f"venv_current venv $({stamp}) && echo current || echo stale",
                 tmp_path) == "stale"
