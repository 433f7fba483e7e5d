"""The pytest plugin (entry point ``pytest11: ember``): ``--ember-device`` and the suite's
parametrization, declared skips and the summary line.

It imports nothing of ember at load time, so it costs nothing in pytest runs that do not use
the suite.  Test functions that take an ``ember_case`` argument are parametrized over every
(device, case) pair; ``ember_grad_case`` over gradient cases on autodiff devices only.
"""

from __future__ import annotations

import fnmatch
import os
import zlib
from collections import Counter
from typing import Any

import pytest

_DECLARED = "declared"
_UNSUPPORTED = "unsupported dtype"
_RESULTS: dict[str, Counter[str]] = {}
_OTHER: Counter[str] = Counter()  # tests of the run that are not op cases (pytest counts them too)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ember", "ember conformance suite")
    group.addoption(
        "--ember-device", action="append", default=[], metavar="DEVICE",
        help="device string(s) to run the ember conformance suite on (repeat or separate with "
             "commas; default: $EMBER_TEST_DEVICE, else ember's default device, which is cpu "
             "where installed)")
    group.addoption(
        "--ember-compile", action="store_true", default=False,
        help="run every case through ember.compile: trace on the case's inputs, replay on "
             "fresh inputs of the same shapes, both against the oracle")
    group.addoption(
        "--ember-plugin", action="append", default=[], metavar="MODULE",
        help="register the ember plugin module MODULE (its hooks, as an entry point would) "
             "before the run: a plugin tested before it is installed")
    group.addoption(
        "--ember-sample", type=int, default=1, metavar="K",
        help="run one case in K (chosen by a hash of the case id: the same ones every run); "
             "for slow device stacks in CI")


def devices_from(config: pytest.Config) -> list[str]:
    raw = config.getoption("ember_device") or [os.environ.get("EMBER_TEST_DEVICE") or ""]
    if raw == [""]:  # ember's default device: cpu, or the best one installed where cpu is not
        import ember

        raw = [str(ember.default_device())]
    out: list[str] = []
    for item in raw:
        out.extend(_split_devices(item))
    return list(dict.fromkeys(out))


def _split_devices(text: str) -> list[str]:
    """Split ``cpu,autodiff<cpu>`` at top-level commas (decorator options keep theirs)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return [p for p in parts if p]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ember_case: a case of the ember conformance suite")
    modules = config.getoption("ember_plugin", None) or []
    if modules:
        import importlib

        from ember._plugins import plugin_manager, register_plugin

        for name in modules:
            if plugin_manager().get_plugin(name) is None:
                register_plugin(importlib.import_module(name), name=name)


@pytest.fixture
def ember_compile(request: pytest.FixtureRequest) -> bool:
    """Whether the suite runs in compiled mode (``--ember-compile``)."""
    return bool(request.config.getoption("ember_compile", False))


def _skip_reason(case: Any, device: Any, skips: dict[str, str]) -> tuple[str, str] | None:
    for pattern, reason in skips.items():
        if fnmatch.fnmatchcase(case.id, pattern):
            return _DECLARED, f"declared by the backend ({pattern}): {reason}"
    for d in case.required_dtypes():
        if not device.supports(d):
            return _UNSUPPORTED, f"device {device} does not support dtype {d.name}"
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = metafunc.fixturenames
    grad = "ember_grad_case" in names
    if "ember_case" not in names and not grad:
        return
    import ember
    from ember._plugins import conformance_skips

    from ._case import all_cases
    from ._grad import grad_cases

    params = []
    for name in devices_from(metafunc.config):
        dev = ember.device(name)
        if grad and not str(dev).startswith("autodiff<"):
            continue
        skips = conformance_skips(str(dev))
        sample = max(1, int(metafunc.config.getoption("ember_sample", 1) or 1))
        for case in grad_cases() if grad else all_cases():
            if sample > 1 and zlib.crc32(case.id.encode()) % sample:
                continue
            cid = f"{dev}::{case.id}"
            marks: list[Any] = [pytest.mark.ember_case]
            why = _skip_reason(case, dev, skips)
            if why is not None:
                marks.append(pytest.mark.skip(reason=why[1]))
            params.append(pytest.param(str(dev), case, id=cid, marks=marks))
    metafunc.parametrize(("ember_device", "ember_grad_case" if grad else "ember_case"), params)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" and not (report.skipped or report.failed):
        return
    if "ember_case" not in report.keywords:
        _OTHER["skipped" if report.skipped else "failed" if report.failed else "passed"] += 1
        return
    cid = report.nodeid.rsplit("[", 1)[-1].rstrip("]")
    device = cid.split("::", 1)[0]
    counts = _RESULTS.setdefault(device, Counter())
    if report.skipped:
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        counts[_UNSUPPORTED if "does not support dtype" in reason else _DECLARED] += 1
    elif report.failed:
        counts["failed"] += 1
    elif report.when == "call":
        counts["passed"] += 1


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    for device, c in _RESULTS.items():
        mode = " (compiled)" if config.getoption("ember_compile", False) else ""
        line = (f"ember conformance{mode} on {device}: {c['passed']} passed, "
                f"{c[_DECLARED]} skipped (declared), {c[_UNSUPPORTED]} skipped (unsupported dtype)")
        if c["failed"]:
            line += f", {c['failed']} failed"
        terminalreporter.write_line(line)
    # pytest's own count (the next line) includes the run's tests that are not op cases (such
    # as a gradient test with no case on a plain device, skipped): say how the two agree
    if _RESULTS and sum(_OTHER.values()):
        total = Counter(_OTHER)
        for c in _RESULTS.values():
            total["passed"] += c["passed"]
            total["skipped"] += c[_DECLARED] + c[_UNSUPPORTED]
            total["failed"] += c["failed"]
        order = ("failed", "passed", "skipped")  # pytest's
        said = ", ".join(f"{total[k]} {k}" for k in order if total[k])
        other = ", ".join(f"{_OTHER[k]} {k}" for k in order if _OTHER[k])
        terminalreporter.write_line(f"ember conformance: with {other} outside the op cases, "
                                    f"{said} in all")
