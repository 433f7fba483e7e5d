"""One command for a GPU machine: ember's conformance suite on ``cuda:0`` (and
``autodiff<cuda:0>``), a torch-free launch check, CuPy pool flatness over 1,000 training steps,
and a few speed figures, then a summary table.

    python benchmarks/gpu/check.py [--quick] [--jobs 12] [--sample K] [--out DIR]
                                   [--device STACK ...]

The stacks run in one pytest run (see `conformance`); ``--sample K`` runs one case in K.

Needs no network and no ``pip install``: ember's packages are put on ``sys.path`` from this
checkout, and a synthetic ``.dist-info`` folder declares their ``ember.plugins`` entry points.
What the machine must have: Python >= 3.11, numpy, ml_dtypes, pluggy, safetensors, pytest
(pytest-xdist for ``--jobs``), triton >= 3.6 and cupy.  torch is not needed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def workspace_env(tmp: Path) -> dict[str, str]:
    """PYTHONPATH with every package's src/ and a dist-info folder naming their plugins."""
    site = tmp / "site"
    paths = [str(site)]
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        meta = tomllib.loads(pyproject.read_text())["project"]
        name = meta["name"].replace("-", "_")
        paths.append(str(pyproject.parent / "src"))
        info = site / f"{name}-{meta['version']}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
        lines = []
        for group, eps in meta.get("entry-points", {}).items():  # ember.plugins, pytest11
            lines += [f"[{group}]"] + [f"{k} = {v}" for k, v in eps.items()] + [""]
        (info / "entry_points.txt").write_text("\n".join(lines))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def child_result(script: str, args: list[str], tag: str) -> dict[str, Any] | None:
    """Run ``script args`` with the workspace on the path; the JSON after its last ``tag ``
    line (``None``, with the child's output tail printed, when there is none)."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, script, *args], env=workspace_env(Path(tmp)),
                              capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(tag + " ")]
    if not lines:
        print(proc.stdout[-4000:], proc.stderr[-4000:])
        return None
    return json.loads(lines[-1][len(tag) + 1:])  # type: ignore[no-any-return]


def conformance(devices: list[str], env: dict[str, str], out: Path, jobs: int, quick: bool,
                timeout: float, sample: int = 1) -> list[dict[str, object]]:
    """Run the suite on every stack of ``devices`` in one pytest run (its xdist workers take
    cases of every stack, so kernels compile once and no worker idles at a stack's end);
    counts per stack from its JUnit XML, where a case's id starts with ``<stack>::``."""
    xml = out / "conformance.xml"
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "ember.testing.suite",
           *[f"--ember-device={d}" for d in devices], f"--ember-sample={sample}",
           "-q", "-p", "no:cacheprovider", "-p", "no:benchmark", "--assert=plain",
           "--tb=line", f"--junitxml={xml}", "-o", "junit_family=xunit1"]
    if jobs > 1:
        cmd += ["-n", str(jobs)]
    if quick:
        cmd += ["-k", "add or matmul or sum or conv2d or sort or rand"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
        log = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) \
            else exc.stdout or ""
        log = f"TIMEOUT after {timeout:.0f} s\n{partial}"
    (out / "conformance.log").write_text(log)
    seconds = round(time.perf_counter() - t0, 1)
    runs = {d: {"device": d, "passed": 0, "failed": 0, "skipped": 0, "errors": 0,
                "seconds": seconds, "failures": []} for d in devices}
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = case.get("name") or ""
            dev = name.partition("[")[2].partition("::")[0]
            counts = runs.get(dev)
            if counts is None:  # a placeholder case of a parametrisation without cases
                continue
            kids = {child.tag for child in case}
            if "failure" in kids or "error" in kids:
                counts["failed"] = int(counts["failed"]) + 1  # type: ignore[call-overload]
                failures = counts["failures"]
                assert isinstance(failures, list)
                failures.append(name)
            elif "skipped" in kids:
                counts["skipped"] = int(counts["skipped"]) + 1  # type: ignore[call-overload]
            else:
                counts["passed"] = int(counts["passed"]) + 1  # type: ignore[call-overload]
    else:
        for counts in runs.values():
            counts["errors"] = 1
    print(log[-3000:])
    return list(runs.values())


PROBES = r'''
import json, sys, time

class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this check")
        return None

sys.meta_path.insert(0, _NoTorch())
import numpy as np
import ember

res = {}
d = ember.device("cuda:0")
x = ember.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=d)
y = (x @ x.T + 1).sum().item()
res["no_torch"] = {"torch_imported": "torch" in sys.modules, "value_ok": y == float(
    (np.arange(12, dtype=np.float32).reshape(3, 4) @ np.arange(12, dtype=np.float32).reshape(
        3, 4).T + 1).sum())}
be = d.backend

def timed(fn, reps):
    fn(); d.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    d.synchronize()
    return (time.perf_counter() - t) / reps

speed = {}
for name, dt, prec in (("bf16", ember.bfloat16, "ieee"), ("fp16", ember.float16, "ieee"),
                       ("tf32", ember.float32, "tf32"), ("fp32", ember.float32, "ieee")):
    n = 4096
    a = ember.randn((n, n), dtype=dt, device=d)
    b = ember.randn((n, n), dtype=dt, device=d)
    be.matmul_precision = prec
    s = timed(lambda: a @ b, 5)
    speed[f"matmul 4096^3 {name} (TFLOP/s)"] = round(2 * n ** 3 / s / 1e12, 1)
be.matmul_precision = "ieee"
v = ember.randn((1 << 26,), device=d)
s = timed(lambda: v + v, 10)
speed["add 2^26 fp32 (TB/s, 12 B/elem)"] = round(12 * (1 << 26) / s / 1e12, 2)
s = timed(lambda: v.sum(), 10)
speed["sum 2^26 fp32 (TB/s)"] = round(4 * (1 << 26) / s / 1e12, 2)
small = ember.ones((1024,), device=d)
s = timed(lambda: small + small, 200)
speed["add 1024 elems, host cost per op (us)"] = round(s * 1e6, 1)
res["speed"] = speed

# CuPy pool flatness over 1,000 training steps (needs the autodiff package)
try:
    from ember import nn, optim
    ad = ember.device("autodiff<cuda:0>")
    g = ember.Generator(0)
    model = nn.Sequential(nn.Linear(784, 256, generator=g), nn.ReLU(),
                          nn.Linear(256, 10, generator=g)).to(ad)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    xb = ember.randn((128, 784), device=ad, generator=g)
    yb = ember.randint(0, 10, (128,), device=ad, generator=g)
    used = []
    t = time.perf_counter()
    for step in range(1000):
        loss = ember.nn.functional.cross_entropy(model(xb), yb)
        opt.step(loss.backward())
        if step in (9, 999):
            d.synchronize()
            used.append(be.memory_stats()["used_bytes"])
    d.synchronize()
    res["train"] = {"steps": 1000, "used_bytes_step10": used[0], "used_bytes_step1000": used[1],
                    "ms_per_step": round((time.perf_counter() - t), 3),
                    "final_loss": round(loss.item(), 4)}
except Exception as exc:
    res["train"] = {"error": f"{type(exc).__name__}: {exc}"}
res["torch_imported_at_end"] = "torch" in sys.modules
print("PROBES " + json.dumps(res))
'''


def probes(env: dict[str, str], timeout: float) -> dict[str, object]:
    try:
        proc = subprocess.run([sys.executable, "-c", PROBES], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("PROBES "):
            return json.loads(line[len("PROBES "):])  # type: ignore[no-any-return]
    return {"error": (proc.stdout + proc.stderr)[-3000:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a few op families only")
    p.add_argument("--jobs", type=int, default=12, help="pytest-xdist workers (1: none)")
    p.add_argument("--out", default=os.environ.get("OUT") or "artifacts/gpu-check")
    p.add_argument("--budget", type=float, default=480.0, help="seconds for everything")
    p.add_argument("--sample", type=int, default=1, help="run one conformance case in K")
    p.add_argument("--no-autodiff", action="store_true")
    p.add_argument("--no-probes", action="store_true", help="conformance only")
    p.add_argument("--device", action="append", default=None,
                   help="conformance on these stacks instead (repeatable), e.g. "
                        "--device 'fusion<cuda:0>' --device 'autodiff<fusion<cuda:0>>'")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        env = workspace_env(Path(tmp))
        report: dict[str, object] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        if not args.no_probes:
            report["probes"] = probes(env, timeout=min(120.0, args.budget / 4))
            print(json.dumps(report["probes"], indent=1))
        devices = ["cuda:0"]
        if not args.no_autodiff and (ROOT / "packages/autodiff").exists():
            devices.append("autodiff<cuda:0>")
        if args.device:
            devices = list(args.device)
        left = args.budget - (time.perf_counter() - t0)
        runs = conformance(devices, env, out, args.jobs, args.quick, max(30.0, left),
                           args.sample)
        report["conformance"] = runs
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print("\n| device | passed | failed | skipped | seconds (all stacks) |\n|---|---|---|---|---|")
    for r in runs:
        print(f"| {r['device']} | {r['passed']} | {r['failed']} | {r['skipped']} | "
              f"{r['seconds']} |")
    for r in runs:
        fails = r["failures"]
        assert isinstance(fails, list)
        if fails:
            print(f"\nfailures on {r['device']} ({len(fails)}):")
            for name in fails[:60]:
                print("  ", name)
    return 0 if all(r["failed"] == 0 and r["passed"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
