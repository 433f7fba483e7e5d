"""What the tape keeps for the backward pass: only the values the rules read (`rules.READS`).

Byte counts come from ``tracemalloc`` (numpy's buffers are traced), checked against figures
derived from the shapes: what PyTorch's autograd saves for the same layers.
"""

from __future__ import annotations

import gc
import tracemalloc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import ember
import ember.functional as F
import ml_dtypes
import numpy as np
import pytest

import ember_autodiff.backend

AD = "autodiff<cpu>"
N, C, V = 256, 32, 512  # rows (batch x time), width, vocabulary


@pytest.fixture
def gc_off() -> Iterator[None]:
    """Values die by reference counting alone, when their last holder drops them."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _param(rng: np.random.Generator, *shape: int, scale: float = 0.1) -> Any:
    return ember.tensor((rng.normal(size=shape) * scale).astype(np.float32), device=AD,
                        requires_grad=True)


def _gpt_tail() -> tuple[Callable[[], Any], list[Any]]:
    """A pre-norm MLP block with a residual, the LM head and the loss, under bfloat16
    autocast: the layers of GPT-2 that keep the most for the backward pass."""
    rng = np.random.default_rng(0)
    x = _param(rng, N, C, scale=1.0)
    lw, lb = _param(rng, C), _param(rng, C)
    w1, b1, w2, b2 = _param(rng, 4 * C, C), _param(rng, 4 * C), _param(rng, C, 4 * C), \
        _param(rng, C)
    wh = _param(rng, V, C)
    target = ember.tensor(rng.integers(0, V, N), device=AD)
    params = [x, lw, lb, w1, b1, w2, b2, wh]

    def loss() -> Any:
        with ember.autocast("cpu", dtype=ember.bfloat16):
            h = F.layer_norm(x, (C,), lw, lb)
            y = x + F.linear(F.gelu(F.linear(h, w1, b1), approximate="tanh"), w2, b2)
            return F.cross_entropy(F.linear(y, wh), target)

    return loss, params


def _live_after(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` and the bytes still allocated once it returned (its result holds them)."""
    fn()  # the first call fills core's caches (constants, kernels)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = fn()
        gc.collect()
        return out, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_a_gpt_block_and_loss_under_autocast_keep_no_more_than_pytorch_saves() -> None:
    loss_fn, _ = _gpt_tail()
    loss, live = _live_after(loss_fn)
    bf16, f32 = 2, 4
    expected = (N * C * bf16  # the LayerNorm's output in bfloat16, the first Linear's input
                + 2 * N * 4 * C * bf16  # GELU's input and output (the second Linear's input)
                + N * C * bf16  # the residual sum in bfloat16, the head's input
                + N * V * bf16  # the bfloat16 logits, which the loss reads as they are
                # (PyTorch keeps their float32 copy, the loss's input there: ember keeps less)
                + (4 * C * C + C * 4 * C + V * C) * bf16  # the weights' bfloat16 casts
                + 2 * N * f32 + N * f32)  # the LayerNorm's mean and rstd; the loss's lse
    # Not kept: the LayerNorm's float32 output, the Linears' outputs, a float32 copy of the
    # logits, the float32 casts of the residual branch and the residual sum itself: rules that
    # read no value of them.
    assert expected <= live < expected * 1.05, (live, expected)
    assert loss.dtype == ember.float32


def test_keeping_less_leaves_every_gradient_bit_for_bit(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    loss_fn, params = _gpt_tail()
    grads = loss_fn().backward()
    got = [grads[p].numpy() for p in params]
    monkeypatch.setattr(ember_autodiff.backend, "READS", {})  # every node keeps everything
    all_grads = loss_fn().backward()
    for p, g in zip(params, got, strict=True):
        assert g.dtype == np.float32
        np.testing.assert_array_equal(g, all_grads[p].numpy())


def test_a_product_keeps_only_the_operand_its_needed_gradient_reads(gc_off: None) -> None:
    rng = np.random.default_rng(1)
    w = ember.tensor(rng.normal(size=(8, 5)), device=AD, requires_grad=True)
    c = ember.tensor(rng.normal(size=(3, 8)), device=AD)  # constant
    h = w * 2.0  # keeps the constant 2.0 only
    dead = weakref.ref(h.inner)
    y = (c @ h).sum()  # d/dh reads c: h itself is not kept
    del h
    assert dead() is None
    np.testing.assert_allclose(y.backward()[w].numpy(), 2.0 * c.numpy().sum(0)[:, None]
                               * np.ones((1, 5)), rtol=1e-12)


def test_casts_and_residual_sums_keep_neither_operand(gc_off: None) -> None:
    x = ember.tensor(np.linspace(-2.0, 2.0, 64, dtype=np.float32), device=AD,
                     requires_grad=True)
    h = x * 3.0
    hb = h.to(dtype=ember.bfloat16)
    r = hb.to(dtype=ember.float32) + x
    refs = [weakref.ref(h.inner), weakref.ref(hb.inner)]
    del h, hb
    assert [ref() for ref in refs] == [None, None]
    g = (r * r).sum().backward()[x].numpy()  # the product keeps r, read by its rule
    # d/dx of sum(r^2) with r = x * 3 (through the casts) + x: 2 r + 3 (2 r), the second
    # rounded to bfloat16 on its way back through the casts (PyTorch's rule for a cast)
    two_r = 2.0 * r.numpy()
    expected = two_r + 3.0 * two_r.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(g, expected, rtol=1e-6)


def test_layer_norm_keeps_its_input_and_statistics_not_its_output(gc_off: None) -> None:
    rng = np.random.default_rng(2)
    x64 = rng.normal(size=(6, 16))
    c = rng.normal(size=(6, 16))
    x = ember.tensor(x64, device=AD, requires_grad=True)
    y = F.layer_norm(x, (16,))
    dead = weakref.ref(y.inner)
    loss = (y * ember.tensor(c, device=AD)).sum()  # d/dy reads the constant only
    del y
    assert dead() is None
    # PyTorch's formula: dx = rstd (g - mean(g) - xhat mean(g xhat)), here g = c
    mean = x64.mean(1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x64 - mean) ** 2).mean(1, keepdims=True) + 1e-5)
    xhat = (x64 - mean) * rstd
    expected = rstd * (c - c.mean(1, keepdims=True) - xhat * (c * xhat).mean(1, keepdims=True))
    np.testing.assert_allclose(loss.backward()[x].numpy(), expected, rtol=1e-9, atol=1e-12)


def test_second_derivatives_see_the_shapes_of_values_not_kept() -> None:
    # create_graph runs the rules on tensors of the autodiff device: a rule that reads only
    # the shape of an input (sum's, reshape's, a cast's) still builds its gradient there
    x = ember.tensor([0.5, -1.0, 2.0], dtype=ember.float64, device=AD, requires_grad=True)
    y = (x.to(dtype=ember.float32).reshape(3, 1).expand(3, 2) ** 3).sum()
    g = y.backward(create_graph=True)[x]
    hess = g.sum().backward()[x].numpy()
    np.testing.assert_allclose(hess, 2 * 6 * np.array([0.5, -1.0, 2.0]), rtol=1e-6)
