"""Devices for the ONNX tests: ``--ember-onnx-device cpu,fusion<cpu>`` (or
``$EMBER_ONNX_DEVICE``); by default cpu, fusion<cpu> and opencl:0, each where available."""

from __future__ import annotations

import os

import pytest

DEFAULT = "cpu,fusion<cpu>,opencl:0"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--ember-onnx-device", default=None, metavar="DEVICES",
                     help="device stacks for tests/onnx, comma-separated (default: "
                          f"$EMBER_ONNX_DEVICE, else {DEFAULT}, each where available)")


def _devices(config: pytest.Config) -> list[str]:
    raw = config.getoption("ember_onnx_device") or os.environ.get("EMBER_ONNX_DEVICE") \
        or DEFAULT
    out, depth, cur = [], 0, ""
    for ch in raw:  # split at commas outside <...>
        depth += (ch == "<") - (ch == ">")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [d for d in out if d]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", _devices(metafunc.config), indirect=True)


@pytest.fixture
def device(request: pytest.FixtureRequest) -> str:
    import warnings

    import ember

    name = request.param
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ember.device(name)
        except Exception as exc:  # an absent device is a skip, named with its reason
            explicit = request.config.getoption("ember_onnx_device") or \
                os.environ.get("EMBER_ONNX_DEVICE")
            if explicit:
                raise
            pytest.skip(f"{name} is not available here: {exc}")
    return str(name)
