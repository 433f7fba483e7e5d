"""max_pool1d, adaptive_max_pool2d, margin ranking, triplet margin and CTC losses (functions and
modules) against PyTorch: values, indices, and gradients of every float input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from nn_oracle import AD, randn

import ember
import ember.nn.functional as F
from ember import nn

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple) else [out]


def _check(fn: Callable[..., Any], tfn: Callable[..., Any], inputs: list[np.ndarray],
           rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Values (and integer outputs exactly) and the gradients of a random projection."""
    xs = [ember.tensor(a, device=AD, requires_grad=a.dtype.kind == "f") for a in inputs]
    txs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    outs, touts = _flat(fn(*xs)), _flat(tfn(*txs))
    assert len(outs) == len(touts)
    loss, tloss = None, None
    for i, (o, to) in enumerate(zip(outs, touts, strict=True)):
        if not to.dtype.is_floating_point:
            np.testing.assert_array_equal(o.numpy(), to.numpy(), err_msg=f"output {i}")
            continue
        np.testing.assert_allclose(o.numpy(), to.detach().numpy(), rtol=rtol, atol=atol)
        w = randn(*to.shape, seed=7 + i)
        term, tterm = (o * ember.tensor(w, device=AD)).sum(), (to * torch.from_numpy(w)).sum()
        loss = term if loss is None else loss + term
        tloss = tterm if tloss is None else tloss + tterm
    assert loss is not None and tloss is not None
    grads = loss.backward()
    tloss.backward()
    for i, (x, tx) in enumerate(zip(xs, txs, strict=True)):
        if tx.grad is not None:
            np.testing.assert_allclose(grads[x].numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6,
                                       err_msg=f"gradient of input {i}")


def _signs(n: int, seed: int = 0) -> np.ndarray:
    return np.where(np.random.default_rng(seed).random(n) < 0.5, -1.0, 1.0).astype(np.float32)


POOLS: dict[str, tuple[Callable[..., Any], Callable[..., Any], list[np.ndarray]]] = {
    "max_pool1d": (lambda x: F.max_pool1d(x, 3), lambda x: TF.max_pool1d(x, 3),
                   [randn(2, 3, 10)]),
    "max_pool1d_stride_padding_dilation_indices": (
        lambda x: F.max_pool1d(x, 3, 2, 1, 2, return_indices=True),
        lambda x: TF.max_pool1d(x, 3, 2, 1, 2, return_indices=True), [randn(2, 3, 11)]),
    "max_pool1d_ceil_mode_unbatched": (
        lambda x: F.max_pool1d(x, 2, 2, ceil_mode=True, return_indices=True),
        lambda x: TF.max_pool1d(x, 2, 2, ceil_mode=True, return_indices=True), [randn(3, 7)]),
    "adaptive_max_pool2d_uneven": (
        lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True),
        lambda x: TF.adaptive_max_pool2d(x, (3, 4), return_indices=True), [randn(2, 3, 7, 9)]),
    "adaptive_max_pool2d_divisible": (lambda x: F.adaptive_max_pool2d(x, 2),
                                      lambda x: TF.adaptive_max_pool2d(x, 2),
                                      [randn(1, 2, 6, 4)]),
    "adaptive_max_pool2d_upsample_none_unbatched": (
        lambda x: F.adaptive_max_pool2d(x, (5, None), return_indices=True),
        lambda x: TF.adaptive_max_pool2d(x, (5, None), return_indices=True), [randn(2, 3, 4)]),
    "adaptive_max_pool2d_ties_first_in_row_major_order": (
        lambda x: F.adaptive_max_pool2d(x, (2, 2), return_indices=True),
        lambda x: TF.adaptive_max_pool2d(x, (2, 2), return_indices=True),
        [np.round(randn(1, 1, 5, 5)).astype(np.float32)]),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_pooling_matches_pytorch_values_indices_and_gradients(name: str) -> None:
    _check(*POOLS[name])


def _ctc_inputs(t: int = 12, n: int = 4, c: int = 5, s: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    targets = rng.integers(1, c, (n, s))
    targets[1, 1] = targets[1, 0]  # a repeated label needs a blank between its frames
    return [randn(t, n, c), targets.astype(np.int64)]


IN_LENS, TG_LENS = [12, 10, 7, 12], [4, 3, 2, 0]


def _ctc(reduction: str, blank: int = 0, **kw: Any) -> tuple[Callable[..., Any],
                                                           Callable[..., Any]]:
    def run(x: Any, y: Any) -> Any:
        return F.ctc_loss(x.log_softmax(-1), y, IN_LENS, TG_LENS, blank, reduction, **kw)

    def trun(x: Any, y: Any) -> Any:
        return TF.ctc_loss(x.log_softmax(-1), y, torch.tensor(IN_LENS), torch.tensor(TG_LENS),
                           blank, reduction, **kw)

    return run, trun


def _ctc_blank_last() -> tuple[Callable[..., Any], Callable[..., Any], list[np.ndarray]]:
    x, y = _ctc_inputs()
    run, trun = _ctc("sum", blank=4)
    return run, trun, [x, np.where(y == 4, 0, y)]


LOSSES: dict[str, tuple[Callable[..., Any], Callable[..., Any], list[np.ndarray]]] = {
    "margin_ranking": (lambda a, b, y: F.margin_ranking_loss(a, b, y, 0.3),
                       lambda a, b, y: TF.margin_ranking_loss(a, b, y, 0.3),
                       [randn(8), randn(8, seed=1), _signs(8)]),
    "margin_ranking_none": (lambda a, b, y: F.margin_ranking_loss(a, b, y, reduction="none"),
                            lambda a, b, y: TF.margin_ranking_loss(a, b, y, reduction="none"),
                            [randn(6), randn(6, seed=1), _signs(6, 1)]),
    "triplet_margin": (F.triplet_margin_loss, TF.triplet_margin_loss,
                       [randn(5, 4), randn(5, 4, seed=1), randn(5, 4, seed=2)]),
    "triplet_margin_p1_swap_sum": (
        lambda a, p, n: F.triplet_margin_loss(a, p, n, 2.0, 1.0, swap=True, reduction="sum"),
        lambda a, p, n: TF.triplet_margin_loss(a, p, n, 2.0, 1.0, swap=True, reduction="sum"),
        [randn(5, 4), randn(5, 4, seed=1), randn(5, 4, seed=2)]),
    "triplet_margin_p3_1d_none": (
        lambda a, p, n: F.triplet_margin_loss(a, p, n, 0.5, 3.0, reduction="none"),
        lambda a, p, n: TF.triplet_margin_loss(a, p, n, 0.5, 3.0, reduction="none"),
        [randn(4), randn(4, seed=1), randn(4, seed=2)]),
    "pairwise_distance": (F.pairwise_distance, TF.pairwise_distance,
                          [randn(5, 4), randn(5, 4, seed=1)]),
    "ctc_mean": (*_ctc("mean"), _ctc_inputs()),
    "ctc_sum": (*_ctc("sum"), _ctc_inputs()),
    "ctc_none": (*_ctc("none"), _ctc_inputs()),
    "ctc_blank_last": _ctc_blank_last(),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_matches_pytorch_value_and_gradients(name: str) -> None:
    _check(*LOSSES[name])


def test_ctc_loss_with_concatenated_targets_matches_padded_targets() -> None:
    x, y = _ctc_inputs()
    flat = np.concatenate([y[i, :n] for i, n in enumerate(TG_LENS)])
    lp = ember.tensor(x).log_softmax(-1)
    a = F.ctc_loss(lp, ember.tensor(flat), IN_LENS, ember.tensor(TG_LENS), reduction="none")
    ref = TF.ctc_loss(torch.tensor(x).log_softmax(-1), torch.tensor(flat),
                      torch.tensor(IN_LENS), torch.tensor(TG_LENS), reduction="none")
    np.testing.assert_allclose(a.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_ctc_loss_unbatched_matches_pytorch() -> None:
    x = randn(6, 4)
    y = np.array([1, 2, 2], dtype=np.int64)
    a = F.ctc_loss(ember.tensor(x).log_softmax(-1), ember.tensor(y), 6, 3)
    ref = TF.ctc_loss(torch.tensor(x).log_softmax(-1), torch.tensor(y), torch.tensor(6),
                      torch.tensor(3))
    np.testing.assert_allclose(a.numpy(), ref.numpy(), rtol=1e-5)


def test_ctc_zero_infinity_zeroes_an_impossible_alignment_and_its_gradient() -> None:
    x = randn(3, 2, 4)
    y = np.array([[1, 1, 1], [1, 2, 3]], dtype=np.int64)  # three repeats need five frames
    xe = ember.tensor(x, device=AD, requires_grad=True)
    loss = F.ctc_loss(xe.log_softmax(-1), ember.tensor(y), [3, 3], [3, 3], reduction="none",
                      zero_infinity=True)
    tx = torch.tensor(x, requires_grad=True)
    tloss = TF.ctc_loss(tx.log_softmax(-1), torch.tensor(y), torch.tensor([3, 3]),
                        torch.tensor([3, 3]), reduction="none", zero_infinity=True)
    np.testing.assert_allclose(loss.numpy(), tloss.detach().numpy(), rtol=1e-5)
    assert loss.numpy()[0] == 0.0
    g = loss.sum().backward()[xe].numpy()
    tloss.sum().backward()
    assert np.isfinite(g).all()
    np.testing.assert_allclose(g, tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    plain = F.ctc_loss(ember.tensor(x).log_softmax(-1), ember.tensor(y), [3, 3], [3, 3],
                       reduction="none")
    assert np.isinf(plain.numpy()[0])


def test_ctc_loss_rejects_targets_longer_than_inputs_naming_the_sample() -> None:
    x = ember.tensor(randn(4, 2, 3)).log_softmax(-1)
    with pytest.raises(ValueError, match=r"target_lengths\[1\]=4 .*input_lengths\[1\]=2"):
        F.ctc_loss(x, ember.tensor([[1, 2, 1, 2]] * 2), [4, 2], [2, 4])
    with pytest.raises(ValueError, match=r"input_lengths\[0\]=5 is outside \[0, 4\]"):
        F.ctc_loss(x, ember.tensor([[1, 2]] * 2), [5, 2], [2, 2])
    with pytest.raises(ValueError, match="blank=3"):
        F.ctc_loss(x, ember.tensor([[1, 2]] * 2), [4, 4], [2, 2], blank=3)


MODULES: dict[str, tuple[Any, Any, list[np.ndarray]]] = {
    "MaxPool1d": (nn.MaxPool1d(3, 2, 1, return_indices=True),
                  torch.nn.MaxPool1d(3, 2, 1, return_indices=True), [randn(2, 3, 9)]),
    "AdaptiveMaxPool2d": (nn.AdaptiveMaxPool2d((2, 3)), torch.nn.AdaptiveMaxPool2d((2, 3)),
                          [randn(2, 2, 5, 7)]),
    "MarginRankingLoss": (nn.MarginRankingLoss(0.2, "sum"),
                          torch.nn.MarginRankingLoss(0.2, reduction="sum"),
                          [randn(6), randn(6, seed=1), _signs(6)]),
    "TripletMarginLoss": (nn.TripletMarginLoss(0.5, swap=True),
                          torch.nn.TripletMarginLoss(0.5, swap=True),
                          [randn(4, 3), randn(4, 3, seed=1), randn(4, 3, seed=2)]),
    "CTCLoss": (nn.CTCLoss(blank=0, reduction="mean"), torch.nn.CTCLoss(),
                [*_ctc_inputs(), np.array(IN_LENS), np.array(TG_LENS)]),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_matches_pytorch(name: str) -> None:
    module, tmodule, inputs = MODULES[name]
    if name == "CTCLoss":
        # PyTorch's CTC gradient is only the true one after log_softmax's backward (it adds
        # exp(log_probs), which log_softmax's backward removes): compare through logits
        _check(lambda x, *a: module(x.log_softmax(-1), *a),
               lambda x, *a: tmodule(x.log_softmax(-1), *a), inputs)
    else:
        _check(module, tmodule, inputs)
    assert repr(module).startswith(name)
