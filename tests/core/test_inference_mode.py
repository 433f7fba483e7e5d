"""``ember.inference_mode``: PyTorch's context manager and decorator; nothing is recorded inside,
and the flags (grad mode, inference mode) follow PyTorch's through nesting and threads."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import ember

torch = pytest.importorskip("torch")
AD = "autodiff<cpu>"


def _flags(lib: Any) -> tuple[bool, bool]:
    return lib.is_grad_enabled(), lib.is_inference_mode_enabled()


def test_nothing_is_recorded_inside_and_recording_resumes_after() -> None:
    w = ember.ones(3, device=AD, requires_grad=True)
    with ember.inference_mode():
        y = (w * 2).sum()
    assert not y.requires_grad
    z = (w * 2).sum()
    assert z.requires_grad and z.backward()[w].tolist() == [2.0, 2.0, 2.0]


def test_decorator_with_and_without_parentheses_like_pytorch() -> None:
    w = ember.ones(2, device=AD, requires_grad=True)

    @ember.inference_mode
    def bare(x: Any) -> Any:
        return (x * w).sum(), _flags(ember)

    @ember.inference_mode()
    def called(x: Any) -> Any:
        return (x * w).sum(), _flags(ember)

    @ember.inference_mode(False)
    def off(x: Any) -> Any:
        return (x * w).sum(), _flags(ember)

    x = ember.ones(2, device=AD)
    for fn in (bare, called):
        out, flags = fn(x)
        assert not out.requires_grad and flags == (False, True)
    with ember.no_grad():
        out, flags = off(x)
    assert out.requires_grad and flags == (True, False)  # inference_mode(False) records
    assert bare.__name__ == "bare"
    assert _flags(ember) == (True, False)


@pytest.mark.parametrize("outer", ["none", "no_grad", "enable_grad"])
def test_flags_through_nesting_match_pytorch(outer: str) -> None:
    def walk(lib: Any) -> list[tuple[bool, bool]]:
        seen = [_flags(lib)]
        ctx = {"none": None, "no_grad": lib.no_grad, "enable_grad": lib.enable_grad}[outer]
        with ctx() if ctx else lib.inference_mode():
            seen.append(_flags(lib))
            with lib.inference_mode():
                seen.append(_flags(lib))
                with lib.inference_mode(False):
                    seen.append(_flags(lib))
                    with lib.no_grad():
                        seen.append(_flags(lib))
                    seen.append(_flags(lib))
                seen.append(_flags(lib))
            seen.append(_flags(lib))
        seen.append(_flags(lib))
        return seen

    assert walk(ember) == walk(torch)


def test_the_flags_are_restored_after_an_exception_and_are_per_thread() -> None:
    with pytest.raises(KeyError), ember.inference_mode():
        raise KeyError("x")
    assert _flags(ember) == (True, False)
    seen: list[tuple[bool, bool]] = []
    with ember.inference_mode():
        t = threading.Thread(target=lambda: seen.append(_flags(ember)))
        t.start()
        t.join()
        assert _flags(ember) == (False, True)
    assert seen == [(True, False)]
