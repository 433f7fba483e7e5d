"""ember's single entry point for lint, typecheck, tests, conformance, benchmarks, docs, demo.

``bash scripts/test.sh`` runs ``nox --no-install -db none -s lint typecheck tests conformance
conformance_compiled conformance_remote install`` inside the workspace's ``.venv`` (set up by
``scripts/setup.sh``), as two nox runs side by side (``EMBER_NOX_HALF``, `SLOW_STACKS`).  With
a virtualenv backend (``nox -db uv``) each session installs the workspace into its own
environment first.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "conformance", "conformance_compiled",
                        "conformance_remote", "install"]
nox.options.reuse_existing_virtualenvs = True

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGES = sorted(os.path.dirname(p) for p in glob.glob("packages/*/pyproject.toml"))
TEMPLATE = "examples/third-party-backend"

# Every device stack the conformance suite runs on, when its plugin is installed and available.
CONFORMANCE_DEVICES = [
    "cpu",
    "autodiff<cpu>",
    "fusion<cpu>",
    "autodiff<fusion<cpu>>",
    "numpyref",
    "opencl:0",
    "autodiff<opencl:0>",
    "fusion<opencl:0>",
    "autodiff<fusion<opencl:0>>",
    "triton-interpret",
    "autodiff<triton-interpret>",
    "fusion<triton-interpret>",
    "autodiff<fusion<triton-interpret>>",
    "wgpu:0",
    "autodiff<wgpu:0>",
    "fusion<wgpu:0>",
    "autodiff<fusion<wgpu:0>>",
]


# The stacks the suite also runs in compiled mode (each case traced, then replayed on fresh
# inputs: ``--ember-compile``), with the share of cases run in CI: the whole suite passes on
# each (measured on the 2-core machine: cpu 15 s, autodiff<cpu> 28 s, autodiff<fusion<cpu>>
# 31 s, opencl:0 5 min, triton-interpret 3 min, wgpu:0 28 s), but opencl:0 and
# triton-interpret run one case in 3 to keep the default sessions well inside the CI budget
# (``-- --ember-sample=1`` runs them all).
COMPILED_DEVICES = {"cpu": 1, "autodiff<cpu>": 1, "autodiff<fusion<cpu>>": 1, "opencl:0": 3,
                    "triton-interpret": 3, "wgpu:0": 1}

# The Remote decorator's stacks: the session starts `ember-remote serve` on a free port of
# 127.0.0.1 with a fresh token, runs the suite through it and stops the server by its PID
# (about 35 s each on the 2-core machine).
REMOTE_DEVICES = ["remote<{address}/cpu>", "autodiff<remote<{address}/cpu>>"]


# What each session is expected to take on the 2-core CI machine (seconds), from measured runs
# (docs and commit messages of 2026-12; the whole default run took 34 min in a fresh clone,
# 52 min on a loaded machine): the plan printed before the first session and each session's
# estimate come from here.  A parametrized session is looked up by its parameter, then by name.
EXPECTED_S: dict[str, float] = {
    "lint": 30, "typecheck": 150, "tests": 600, "install": 180,
    "conformance": 60, "conformance(device='numpyref')": 40,
    "conformance(device='opencl:0')": 360, "conformance(device='autodiff<opencl:0>')": 150,
    "conformance(device='fusion<opencl:0>')": 240,
    "conformance(device='autodiff<fusion<opencl:0>>')": 150,
    "conformance(device='triton-interpret')": 240,
    "conformance(device='autodiff<triton-interpret>')": 120,
    "conformance(device='fusion<triton-interpret>')": 150,
    "conformance(device='autodiff<fusion<triton-interpret>>')": 120,
    "conformance_compiled": 30, "conformance_compiled(device='opencl:0')": 300,
    "conformance_compiled(device='triton-interpret')": 180, "conformance_remote": 35,
}
HEARTBEAT_S = 30  # the longest the run stays quiet: a line saying where it is, at least this often
PARAMETERS = {"conformance": CONFORMANCE_DEVICES, "conformance_compiled": list(COMPILED_DEVICES),
              "conformance_remote": REMOTE_DEVICES}


#: ``scripts/test.sh`` runs the default sessions as two nox runs side by side, one on each core:
#: ``EMBER_NOX_HALF=b`` takes the sessions of these stacks (the slow ones), ``a`` the rest
SLOW_STACKS = ("opencl", "triton")


def _half(name: str) -> str:
    """Which half of ``scripts/test.sh`` runs session ``name``."""
    return "b" if any(s in name for s in SLOW_STACKS) else "a"


def _expected(name: str) -> float:
    return EXPECTED_S.get(name, EXPECTED_S.get(name.split("(")[0], 60))


def _planned() -> list[str]:
    """The sessions this nox run will go through, parametrized ones expanded (``-s`` names as
    given on the command line, else the default sessions)."""
    args, names, i = sys.argv[1:], [], 0
    while i < len(args):
        if args[i] in ("-s", "--session", "--sessions", "-e"):
            i += 1
            while i < len(args) and not args[i].startswith("-"):
                names.append(args[i])
                i += 1
            continue
        i += 1
    out = []
    for name in names or nox.options.sessions or []:
        params = PARAMETERS.get(name)
        out += [f"{name}(device={d!r})" for d in params] if params else [name]
    half = os.environ.get("EMBER_NOX_HALF")
    return [n for n in out if _half(n) == half] if half else out


def _minutes(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


class _Progress:
    """Says which session runs, its place in the plan and an estimate of what is left, and from a
    daemon thread, a line at least every ``HEARTBEAT_S`` seconds while a session runs (pytest -q
    prints a dot per test, but collection, mypy, pip and slow cases can sit quiet for minutes)."""

    def __init__(self) -> None:
        self.plan = _planned()
        self.t0 = time.monotonic()
        self.current: tuple[str, float, int] | None = None  # name, start, index in the plan
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def show_plan(self) -> None:
        total = sum(_expected(n) for n in self.plan)
        n = len(self.plan)
        print(f"nox: {n} session{'' if n == 1 else 's'}, about {_minutes(total)} in all on 2 "
              "cores (devices that are not available here are skipped in seconds):", flush=True)
        for i, name in enumerate(self.plan, 1):
            print(f"nox:   {i:>2}. {name:<55} ~{_minutes(_expected(name))}", flush=True)

    def start(self, session: nox.Session) -> None:
        name = session.name
        with self.lock:
            if self.thread is None:
                self.show_plan()
                self.thread = threading.Thread(target=self._beat, daemon=True)
                self.thread.start()
            index = self.plan.index(name) if name in self.plan else -1
            self.current = (name, time.monotonic(), index)
        left = sum(_expected(n) for n in self.plan[index:]) if index >= 0 else _expected(name)
        place = f"{index + 1}/{len(self.plan)}" if index >= 0 else "?"
        session.log(f"session {place}: {name}, expected ~{_minutes(_expected(name))}; "
                    f"{_minutes(time.monotonic() - self.t0)} so far, about {_minutes(left)} left")

    def _beat(self) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            with self.lock:
                if self.current is None:
                    continue
                name, since, _ = self.current
            print(f"\nnox: ... {name} still running: {_minutes(time.monotonic() - since)} "
                  f"(expected ~{_minutes(_expected(name))}); "
                  f"{_minutes(time.monotonic() - self.t0)} since the first session",
                  file=sys.stderr, flush=True)


PROGRESS = _Progress()


def _start(session: nox.Session) -> None:
    """Every session's first call: skipped when the other half of ``scripts/test.sh`` runs
    it, else announced (`PROGRESS`)."""
    half = os.environ.get("EMBER_NOX_HALF")
    if half and _half(session.name) != half:
        session.skip(f"the other half of scripts/test.sh runs it (EMBER_NOX_HALF={half})")
    PROGRESS.start(session)


def _install(session: nox.Session) -> None:
    _start(session)
    if isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv):
        return  # running in the workspace's own .venv: scripts/setup.sh installed everything
    editable = [arg for p in [*PACKAGES, TEMPLATE] for arg in ("-e", p)]
    session.install(*editable, "-r", "requirements-dev.txt")


def _available(device: str) -> tuple[bool, str]:
    code = (
        "import warnings, ember\n"
        "warnings.simplefilter('ignore')\n"
        f"ember.device({device!r})\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    lines = (proc.stderr or "").strip().splitlines()
    return proc.returncode == 0, (lines[-1] if lines else "")


def _pytest(session: nox.Session, *args: str) -> None:
    # pytest exits 5 when it collected nothing: that is a failure for us, never a pass
    session.run("python", "-m", "pytest", *args, success_codes=[0])


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over every package, the tests, examples and benchmarks; plugins import core's
    machinery from ``ember.backend`` only (``scripts/check_plugin_api.py``); and core's imports
    make no cycle through ``ember._tensor`` and none sits at a module's bottom
    (``scripts/check_imports.py``)."""
    _install(session)
    session.run("ruff", "check", "packages", "tests", "examples", "benchmarks", "noxfile.py")
    session.run("python", "scripts/check_plugin_api.py")
    session.run("python", "scripts/check_imports.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on every package's sources and the template's, in one run (so that each
    package is checked against its siblings' sources): each ``src/<import name>`` found."""
    _install(session)
    targets = sorted(os.path.dirname(init) for src in [*PACKAGES, TEMPLATE]
                     for init in glob.glob(f"{src}/src/*/__init__.py"))
    session.run("mypy", "--strict", *targets)


@nox.session
def tests(session: nox.Session) -> None:
    """Each package's own tests (with its own pytest settings), then the repository's tests/."""
    _install(session)
    for pkg in [*PACKAGES, TEMPLATE]:
        if os.path.isdir(f"{pkg}/tests"):
            _pytest(session, "-q", "-c", f"{pkg}/pyproject.toml", "--rootdir", pkg,
                    f"{pkg}/tests", *session.posargs)
    paths = [p for p in sorted(glob.glob("tests/*")) if os.path.basename(p) not in
             ("conformance", "__pycache__", "conftest.py") and (p.endswith(".py") or
                                                               os.path.isdir(p))]
    _pytest(session, "-q", *paths, *session.posargs)


@nox.session
@nox.parametrize("device", CONFORMANCE_DEVICES)
def conformance(session: nox.Session, device: str) -> None:
    """The cross-backend conformance suite on one device stack."""
    _install(session)
    ok, reason = _available(device)
    if not ok:
        session.skip(f"{device} is not available here: {reason}")
    env = {}
    if "triton-interpret" in device:  # record the kernels the interpreter runs (see below)
        record = Path(session.create_tmp()) / "kernels.jsonl"
        record.unlink(missing_ok=True)
        env["EMBER_TRITON_RECORD"] = str(record)
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/conformance",
                f"--ember-device={device}", *session.posargs, env=env, success_codes=[0])
    if env:
        # the interpreter never runs Triton's front end: compile a sample of what it ran for
        # sm_90 (Triton's compiler and ptxas work without a GPU), as the H200 would
        session.run("python", "-m", "ember_triton._aot", env["EMBER_TRITON_RECORD"],
                    "--sample", "300", env={"TRITON_INTERPRET": "0"})


@nox.session
@nox.parametrize("device", list(COMPILED_DEVICES))
def conformance_compiled(session: nox.Session, device: str) -> None:
    """The conformance suite through ``ember.compile`` on one device stack: every case traced
    on its inputs and replayed on fresh ones (declared untraceable cases are skipped)."""
    _install(session)
    ok, reason = _available(device)
    if not ok:
        session.skip(f"{device} is not available here: {reason}")
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/conformance",
                f"--ember-device={device}", "--ember-compile",
                f"--ember-sample={COMPILED_DEVICES[device]}", *session.posargs,
                success_codes=[0])


@nox.session
@nox.parametrize("device", REMOTE_DEVICES)
def conformance_remote(session: nox.Session, device: str) -> None:
    """The conformance suite on a ``remote<...>`` stack, against a server this session starts
    (``ember-remote serve --bind 127.0.0.1:0``) and stops by PID."""
    import importlib.util
    import secrets
    import select
    import signal

    _install(session)
    if importlib.util.find_spec("ember_remote") is None:
        session.skip("ember-remote is not installed")
    python = (sys.executable if isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv)
              else os.path.join(session.bin, "python"))
    token = secrets.token_hex(32)
    token_file = Path(session.create_tmp()) / "remote-token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    server = subprocess.Popen([python, "-m", "ember_remote", "serve", "--bind", "127.0.0.1:0",
                               "--token-file", str(token_file), "--devices", "cpu"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 120)
        line = server.stdout.readline() if ready else ""
        if " on " not in line:
            session.error(f"ember-remote serve did not start: {line!r}")
        address = line.split(" on ", 1)[1].split()[0]
        session.log(f"ember-remote serve: pid {server.pid} on {address}")
        session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "tests/conformance", f"--ember-device={device.format(address=address)}",
                    *session.posargs, env={"EMBER_REMOTE_TOKEN": token}, success_codes=[0])
    finally:
        os.kill(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGKILL)
            server.wait()


@nox.session
def install(session: nox.Session) -> None:
    """The documented install in fresh venvs: wheels of the workspace (``scripts/wheels.sh``),
    then ``pip install --find-links DIST "ember[cpu]"`` alone (the getting-started model trains;
    ``python -m ember.testing`` says to install ``ember[testing]``), then with ``ember[cpu,
    testing]`` (a sample of the suite runs); and ``ember[opencl,testing]`` in a second venv
    where OpenCL is available.  Each is checked by ``scripts/check_install.py`` from inside its
    venv, out of the source tree."""
    import shutil
    import tempfile

    _start(session)
    installs = [("cpu", ["cpu"], ["cpu", "testing"])]
    if _available("opencl:0")[0]:
        installs.append(("opencl", ["opencl", "testing"]))
    else:
        session.log("install: opencl:0 is not available here: only ember[cpu] is checked")
    tmp = Path(tempfile.mkdtemp(prefix="ember-install-"))
    try:
        dist = tmp / "dist"
        session.run("bash", "scripts/wheels.sh", str(dist), external=True)
        # out of the source tree, so that nothing of the workspace can be imported by accident
        shutil.copy("scripts/check_install.py", tmp)
        env = {"PYTHONPATH": None, "VIRTUAL_ENV": None, "EMBER_DEVICE": None,
               "EMBER_PLUGINS_DISABLE": None, "EMBER_TEST_DEVICE": None}
        for backend, *extras_in_turn in installs:
            venv = tmp / f"venv-{backend}"
            session.log(f"install: creating a fresh venv in {venv}")
            session.run(sys.executable, "-m", "venv", str(venv), external=True)
            python = str(venv / "bin" / "python")
            for extras in extras_in_turn:
                session.run(python, "-m", "pip", "install", "-q", "--progress-bar", "off",
                            "--find-links", str(dist), f"ember[{','.join(extras)}]",
                            external=True, env=env)
                with session.chdir(tmp):
                    session.run(python, "check_install.py", backend, str(venv),
                                external=True, env=env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@nox.session
def bench(session: nox.Session) -> None:
    """Side-by-side ratio benchmarks (ember vs numpy / PyTorch) on this machine."""
    _install(session)
    for script in sorted(glob.glob("benchmarks/*.py")):
        session.run("python", script, *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Doctests of core's public API (every example in a docstring runs)."""
    _install(session)
    _pytest(session, "-q", "-p", "no:cacheprovider", "--doctest-modules",
            "packages/core/src/ember", "--ignore=packages/core/src/ember/testing")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: train the guide CNN on the CPU, then infer from its artifacts."""
    _install(session)
    session.run("python", "examples/guide/main.py", *session.posargs)
