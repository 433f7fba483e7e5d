"""Check an installation of core + one backend extra, from inside the environment it went to.

``nox -s install`` builds the wheels (``scripts/wheels.sh``), installs
``pip install --find-links DIST "ember[BACKEND]"`` into a fresh venv and runs this file with that
venv's Python, out of the source tree, then again after adding ``ember[BACKEND,testing]``::

    python check_install.py BACKEND VENV

It exits non-zero with the first thing that is not as documented: where ember was imported from,
which ember distributions are installed (core, the backend and the Autodiff decorator that every
backend extra brings), the default device (and the message that says why when ``cpu`` is
absent), a matmul and a reduction against values worked out by hand, the "unknown decorator"
error naming the package to install, the getting-started model training on
``autodiff<DEFAULT>`` (its loss falls), and ``python -m ember.testing``: without pytest, a
message naming ``ember[testing]``; with it, a sample of the conformance suite on the default
device.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib import metadata
from pathlib import Path

# the device each backend extra's installation must default to
DEFAULT_DEVICE = {"opencl": "opencl:0", "cpu": "cpu"}
DIST = {"opencl": "ember-backend-opencl", "cpu": "ember-backend-cpu"}


def check(ok: bool, what: str, detail: str = "") -> None:
    """Say ``what`` was checked; on failure, also ``detail``, and stop."""
    print(f"install check: {'ok' if ok else 'FAILED'}: {what}", flush=True)
    if not ok:
        sys.exit(f"install check failed: {what}\n{detail}")


def main(backend: str, venv: Path) -> None:
    code = (
        "import ember\n"
        "x = ember.tensor([[2., 3.], [4., 5.]])\n"
        "print(ember.__file__)\n"
        "print(x.device)\n"
        "print((x @ x + 1).tolist())\n"
        "print(x.sum(dim=1).tolist())\n"
        "try:\n"
        f"    ember.device('fusion<{DEFAULT_DEVICE[backend]}>')\n"
        "    print('no error')\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    check(proc.returncode == 0, "a tensor program runs", proc.stderr)
    where, dev, matmul, rowsum, unknown = proc.stdout.strip().splitlines()

    check(Path(where).resolve().is_relative_to(venv.resolve()),
          f"ember is imported from the new environment ({where})")
    ours = sorted(d.metadata["Name"] for d in metadata.distributions()
                  if d.metadata["Name"].startswith("ember"))
    want = sorted(["ember", DIST[backend], "ember-autodiff"])
    check(ours == want, f"the ember distributions installed are {', '.join(want)} ({ours})")
    check(dev == DEFAULT_DEVICE[backend],
          f"the default device is {DEFAULT_DEVICE[backend]} ({dev})")
    # [[2,3],[4,5]] @ itself = [[2*2+3*4, 2*3+3*5], [4*2+5*4, 4*3+5*5]] = [[16,21],[28,37]]
    check(matmul == "[[17.0, 22.0], [29.0, 38.0]]", f"x @ x + 1 ({matmul})")
    check(rowsum == "[5.0, 9.0]", f"x.sum(dim=1) ({rowsum})")
    said = [line for line in proc.stderr.splitlines() if "default device" in line]
    if backend == "cpu":
        check(not proc.stderr.strip(), f"nothing is printed with cpu installed ({proc.stderr!r})")
    else:
        check(len(said) == 1 and DEFAULT_DEVICE[backend] in said[0]
              and "ember-backend-cpu" in said[0],
              f"the fallback from cpu is said once, naming the device and the package ({said})")
    check("ember-fusion" in unknown and 'pip install "ember[fusion]"' in unknown,
          f"an unknown decorator names its package ({unknown})")

    losses = train(DEFAULT_DEVICE[backend])
    check(len(losses) == STEPS and losses[-1] < 0.5 * losses[0]
          and all(b < a for a, b in zip(losses, losses[3:], strict=False)),
          f"the getting-started model trains on autodiff<{DEFAULT_DEVICE[backend]}> (loss "
          f"{losses[0]:.3f} -> {losses[-1]:.3f} in {STEPS} steps)", f"losses: {losses}")

    if importlib.util.find_spec("pytest") is None:
        said = subprocess.run([sys.executable, "-m", "ember.testing", "--help"],
                              capture_output=True, text=True, check=False)
        check(said.returncode == 2 and 'pip install "ember[testing]"' in said.stderr
              and "Traceback" not in said.stderr,
              f"without pytest, python -m ember.testing says what to install "
              f"({said.stderr.strip()!r})")
        return
    # no --device: the suite runs on ember's default device
    suite = subprocess.run([sys.executable, "-m", "ember.testing", "--ember-sample=80"],
                           capture_output=True, text=True, check=False)
    # the summary's last lines: the suite's count on the device, the reconciled total (when
    # cases ran outside the op cases), pytest's own line
    tail = suite.stdout.strip().splitlines()[-3:] or [""]
    check(suite.returncode == 0 and " passed" in tail[-1]
          and any(line.startswith(f"ember conformance on {DEFAULT_DEVICE[backend]}: ")
                  for line in tail),
          f"python -m ember.testing runs a sample of the conformance suite on the default "
          f"device ({' / '.join(tail)})", suite.stdout[-4000:] + suite.stderr[-4000:])


STEPS = 30


def train(device: str) -> list[float]:
    """The losses of docs/getting-started.md's compiled training step on ``autodiff<device>``,
    on a task the model can learn: the label is the largest of the first three features."""
    code = (
        "import ember\n"
        "from ember import nn, optim\n"
        "from ember.nn import functional as F\n"
        f"d = ember.device('autodiff<{device}>')\n"
        "ember.manual_seed(0)\n"
        "model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3)).to(d)\n"
        "opt = optim.AdamW(model.parameters(), lr=1e-2)\n"
        "@ember.compile\n"
        "def step(x, y):\n"
        "    loss = F.cross_entropy(model(x), y)\n"
        "    opt.step(loss.backward())\n"
        "    return loss\n"
        "x = ember.randn(64, 4, generator=ember.Generator(0))\n"
        "y = x[:, :3].argmax(dim=1)\n"
        "x, y = x.to(d), y.to(d)\n"
        f"for _ in range({STEPS}):\n"
        "    print(step(x, y).item())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    check(proc.returncode == 0, f"a training loop runs on autodiff<{device}>",
          proc.stdout[-2000:] + proc.stderr[-4000:])
    return [float(v) for v in proc.stdout.split()]


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
