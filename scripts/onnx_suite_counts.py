"""Run onnx's own backend conformance suite on ember (or onnxruntime) and count the results.

    python scripts/onnx_suite_counts.py                       # ember on cpu, every case
    python scripts/onnx_suite_counts.py --backend onnxruntime # the same cases on onnxruntime
    python scripts/onnx_suite_counts.py --json out.json       # each case's outcome and message
    python scripts/onnx_suite_counts.py --write-exclusions    # regenerate tests/onnx's list

The cases are those ``onnx.backend.test.BackendTest`` builds (node cases, the light real
models, simple, pytorch-converted and pytorch-operator models), on onnx's ``CPU`` device,
checked by onnx's own comparison (``assert_similar_outputs``).  Each case is one of:
passed; *wrong* (it ran and its outputs differ from onnx's expected ones: an assertion);
*refused* (an error: an operator, attribute, dtype or input kind ember does not support).
``--write-exclusions`` writes every case that does not pass, grouped by reason, to
``tests/onnx/backend_suite_exclusions.py`` (wrong results are written too, under a reason
that says so, so that they are visible; the test fails on any that is not listed).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import sys
import time
import unittest
import warnings
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CATEGORIES = ("Node", "Real", "Simple", "PyTorchConverted", "PyTorchOperator")


def backend_module(name: str) -> Any:
    if name == "ember":
        import ember.onnx.backend as b
        return b
    import onnxruntime.backend as b
    return b


def reason_of(err: BaseException) -> str:
    """A short reason for a refused or wrong case, for grouping."""
    import re

    if isinstance(err, AssertionError):
        return "wrong result"
    if isinstance(err, TypeError) and "Unable to compare expected type" in str(err):
        # test_loop16_seq_none: the expected sequence holds a 0-d tensor, and the runner's
        # assert_similar_outputs calls len() on it (onnxruntime fails the same way)
        return ("onnx's runner cannot compare a sequence output holding a 0-d tensor (its "
                "assert_similar_outputs calls len() on it); onnxruntime fails it the same way")
    msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    m = re.search(r"uses operators ember cannot import: ([^.]*?)(?:\. Supported|$)", msg)
    if m:
        ops = sorted({re.split(r"[ (]", part.strip())[0] for part in m.group(1).split(";")})
        dom = re.search(r"domain '([^']+)'", msg)
        if dom:
            return f"operator domain {dom.group(1)!r} is not imported"
        return "unsupported operator: " + ", ".join(ops)
    m = re.search(r"ONNX element type (\w+) has no ember dtype", msg)
    if m:
        return f"dtype {m.group(1)} has no ember dtype"
    m = re.search(r"\(the ember reason: (.*)\)$", msg)
    if m:
        return m.group(1)
    msg = re.sub(r"node '[^']*'", "node", msg)
    msg = re.sub(r"'[^']*'", "'…'", msg)
    msg = re.sub(r"\d+", "N", msg)
    return f"{type(err).__name__}: {msg[:140]}"


class _Collect(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.outcomes: dict[str, dict[str, Any]] = {}
        self._t0 = 0.0

    def _id(self, test: unittest.TestCase) -> str:
        return test.id().rsplit(".", 1)[-1]

    def startTest(self, test: unittest.TestCase) -> None:  # unittest's name
        self._t0 = time.perf_counter()

    def _put(self, test: unittest.TestCase, status: str, reason: str = "",
             message: str = "") -> None:
        cat = type(test).__name__.removeprefix("OnnxBackend").removesuffix("ModelTest")
        self.outcomes[self._id(test)] = {"category": cat, "status": status, "reason": reason,
                                         "message": message[:600],
                                         "seconds": round(time.perf_counter() - self._t0, 4)}

    def addSuccess(self, test: unittest.TestCase) -> None:
        self._put(test, "passed")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        self._put(test, "wrong", reason_of(err[1]), str(err[1]))

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        self._put(test, "refused", reason_of(err[1]), f"{type(err[1]).__name__}: {err[1]}")

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        self._put(test, "skipped", reason)


def run(backend: str, pattern: str | None = None) -> dict[str, dict[str, Any]]:
    import onnx.backend.test

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnx's case generators warn about casts
        bt = onnx.backend.test.BackendTest(backend_module(backend), __name__)
        bt.include(pattern or r"_cpu$")
        suite = bt.test_suite
    result = _Collect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        suite.run(result)
    return {k: v for k, v in result.outcomes.items()
            if not (v["status"] == "skipped" and v["reason"] == "no matched include pattern")}


def summary(outcomes: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for cat in CATEGORIES:
        rows = [o for o in outcomes.values() if o["category"] == cat]
        c = collections.Counter(o["status"] for o in rows)
        table[cat] = {"cases": len(rows), "passed": c["passed"], "wrong": c["wrong"],
                      "refused": c["refused"], "skipped": c["skipped"]}
    table["all"] = {k: sum(t[k] for t in table.values()) for k in table["Node"]}
    return table


def _known_wrong(path: str) -> dict[str, str]:
    """The hand-written causes of wrong results in the current list (kept on rewriting)."""
    if not os.path.exists(path):
        return {}
    scope: dict[str, Any] = {}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), scope)
    return {n: reason for reason, names in scope.get("EXCLUDED", {}).items() for n in names
            if reason.startswith("wrong result: ")}


def write_exclusions(outcomes: dict[str, dict[str, Any]], path: str) -> None:
    known = _known_wrong(path)
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for name, o in sorted(outcomes.items()):
        if o["status"] == "wrong":
            groups[known.get(name, o["reason"])].append(name)
        elif o["status"] == "refused":
            groups[o["reason"]].append(name)
    lines = [
        "# ruff: noqa: E501  # generated data: each reason is one string",
        '"""onnx backend-suite cases ember does not pass, grouped by reason (written by',
        "``python scripts/onnx_suite_counts.py --write-exclusions``; edit the reasons by hand",
        "where a better one is known).  `test_backend_suite` skips each listed case with its",
        'reason and fails on any other case that does not pass."""',
        "",
        "EXCLUDED: dict[str, list[str]] = {",
    ]
    for reason, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"    {reason!r}: [")
        lines += [f"        {n!r}," for n in names]
        lines.append("    ],")
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("ember", "onnxruntime"), default="ember")
    ap.add_argument("--include", default=None, help="regex of case names (default: all, CPU)")
    ap.add_argument("--json", default=None, help="write each case's outcome here")
    ap.add_argument("--write-exclusions", action="store_true")
    ap.add_argument("--top", type=int, default=25, help="print the N largest reasons")
    args = ap.parse_args()
    t0 = time.perf_counter()
    outcomes = run(args.backend, args.include)
    took = time.perf_counter() - t0
    table = summary(outcomes)
    import onnx

    print(f"{args.backend} on onnx {onnx.__version__}'s backend suite ({platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, {took:.0f} s, "
          f"{time.strftime('%Y-%m-%d')})")
    print(f"{'category':<18}{'cases':>7}{'passed':>8}{'wrong':>7}{'refused':>9}")
    for cat, row in table.items():
        print(f"{cat:<18}{row['cases']:>7}{row['passed']:>8}{row['wrong']:>7}"
              f"{row['refused']:>9}")
    reasons = collections.Counter(o["reason"] for o in outcomes.values()
                                  if o["status"] in ("wrong", "refused"))
    for reason, n in reasons.most_common(args.top):
        print(f"{n:>5}  {reason}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "table": table, "cases": outcomes}, f,
                      indent=1)
    if args.write_exclusions:
        write_exclusions(outcomes, os.path.join(ROOT, "tests", "onnx",
                                                "backend_suite_exclusions.py"))
    sys.exit(0)


if __name__ == "__main__":
    main()
