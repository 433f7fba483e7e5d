"""Every loss, as a function and as a module, matches PyTorch's value and input gradients."""

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


def _probs(*shape: int, seed: int = 0) -> np.ndarray:
    return (1 / (1 + np.exp(-randn(*shape, seed=seed)))).astype(np.float32)


def _classes(n: int, c: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, c, n).astype(np.int64)


def _signs(n: int) -> np.ndarray:
    return np.array([1, -1] * (n // 2) + [1] * (n % 2), dtype=np.float32)


LOG_P = np.log(_probs(4, 5) / _probs(4, 5).sum(1, keepdims=True)).astype(np.float32)
TARGET_P = _probs(4, 5, seed=1) / _probs(4, 5, seed=1).sum(1, keepdims=True)
TARGET_P[0, 2] = 0.0  # a zero target contributes nothing

RUN_MEAN, RUN_VAR = randn(4, seed=5), _probs(4, seed=6) + 0.5

# name: (ember function, torch function, inputs, keyword arguments)
CASES: dict[str, tuple[Callable[..., Any], Callable[..., Any], list[np.ndarray], dict]] = {
    "l1": (F.l1_loss, TF.l1_loss, [randn(4, 3), randn(4, 3, seed=1)], {}),
    "l1_sum": (F.l1_loss, TF.l1_loss, [randn(4, 3), randn(4, 3, seed=1)],
               {"reduction": "sum"}),
    "mse_none": (F.mse_loss, TF.mse_loss, [randn(4, 3), randn(4, 3, seed=1)],
                 {"reduction": "none"}),
    "huber": (F.huber_loss, TF.huber_loss, [randn(6, 3, scale=2), randn(6, 3, seed=1)],
              {"delta": 0.7}),
    "smooth_l1": (F.smooth_l1_loss, TF.smooth_l1_loss,
                  [randn(6, 3, scale=2), randn(6, 3, seed=1)], {"beta": 0.5}),
    "smooth_l1_beta0": (F.smooth_l1_loss, TF.smooth_l1_loss,
                        [randn(6, 3), randn(6, 3, seed=1)], {"beta": 0.0}),
    "bce": (F.binary_cross_entropy, TF.binary_cross_entropy, [_probs(5, 2), _probs(5, 2, seed=1)],
            {}),
    "bce_weight": (F.binary_cross_entropy, TF.binary_cross_entropy,
                   [_probs(5, 2), _probs(5, 2, seed=1), _probs(5, 2, seed=2)], {}),
    "bce_with_logits": (F.binary_cross_entropy_with_logits, TF.binary_cross_entropy_with_logits,
                        [randn(5, 3, scale=10), _probs(5, 3, seed=1)], {}),
    "bce_with_logits_pos_weight": (
        lambda x, t, pw: F.binary_cross_entropy_with_logits(x, t, pos_weight=pw),
        lambda x, t, pw: TF.binary_cross_entropy_with_logits(x, t, pos_weight=pw),
        [randn(5, 3, scale=4), _probs(5, 3, seed=1), _probs(3, seed=2) * 3], {}),
    "kl_div_batchmean": (F.kl_div, TF.kl_div, [LOG_P, TARGET_P], {"reduction": "batchmean"}),
    "kl_div_mean": (F.kl_div, TF.kl_div, [LOG_P, TARGET_P], {"reduction": "mean"}),
    "kl_div_log_target": (F.kl_div, TF.kl_div, [LOG_P, np.log(TARGET_P + 0.1)],
                          {"reduction": "sum", "log_target": True}),
    "cosine_embedding": (F.cosine_embedding_loss, TF.cosine_embedding_loss,
                         [randn(6, 4), randn(6, 4, seed=1), _signs(6)], {"margin": 0.2}),
    "cosine_similarity": (F.cosine_similarity, TF.cosine_similarity,
                          [randn(6, 4), randn(6, 4, seed=1)], {}),
    "cross_entropy_smoothing_weight": (
        lambda x, t, w: F.cross_entropy(x, t, w, label_smoothing=0.1),
        lambda x, t, w: TF.cross_entropy(x, t, w, label_smoothing=0.1),
        [randn(6, 4), _classes(6, 4), _probs(4, seed=3)], {}),
    "cross_entropy_ignore_index": (
        lambda x, t: F.cross_entropy(x, t, ignore_index=1),
        lambda x, t: TF.cross_entropy(x, t, ignore_index=1),
        [randn(6, 4), _classes(6, 4, seed=2)], {}),
    "nll": (F.nll_loss, TF.nll_loss, [LOG_P, _classes(4, 5)], {}),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b),
                   lambda x, w, b: TF.group_norm(x, 2, w, b),
                   [randn(2, 4, 3), randn(4, seed=1), randn(4, seed=2)], {}),
    "batch_norm_eval": (
        lambda x, w, b: F.batch_norm(x, ember.tensor(RUN_MEAN, device=AD),
                                     ember.tensor(RUN_VAR, device=AD), w, b, training=False),
        lambda x, w, b: TF.batch_norm(x, torch.from_numpy(RUN_MEAN), torch.from_numpy(RUN_VAR),
                                      w, b, training=False),
        [randn(3, 4, 2), randn(4, seed=1), randn(4, seed=2)], {}),
}


# inputs PyTorch does not differentiate (class weights), or where its gradient is undefined
# (a KL target of exactly zero): given as constants
CONSTANT_INPUTS = {"bce_weight": {2}, "bce_with_logits_pos_weight": {2},
                   "cross_entropy_smoothing_weight": {2}, "kl_div_batchmean": {1},
                   "kl_div_mean": {1}, "KLDivLoss": {1}}


def _check(fn: Callable[..., Any], tfn: Callable[..., Any], inputs: list[np.ndarray],
           kw: dict[str, Any], constant: frozenset[int] | set[int] = frozenset()) -> None:
    grad = [a.dtype.kind == "f" and i not in constant for i, a in enumerate(inputs)]
    xs = [ember.tensor(a, device=AD, requires_grad=g) for a, g in zip(inputs, grad, strict=True)]
    txs = [torch.tensor(a, requires_grad=g) for a, g in zip(inputs, grad, strict=True)]
    out, tout = fn(*xs, **kw), tfn(*txs, **kw)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    w = randn(*tout.shape, seed=7)
    grads = (out * ember.tensor(w, device=AD)).sum().backward()
    (tout * torch.from_numpy(w)).sum().backward()
    for i, (x, tx) in enumerate(zip(xs, txs, strict=True)):
        if tx.grad is not None:
            np.testing.assert_allclose(grads[x].numpy(), tx.grad.numpy(), rtol=1e-4,
                                       atol=1e-6, err_msg=f"gradient of input {i}")


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss:UserWarning")
@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_matches_pytorch_value_and_gradients(name: str) -> None:
    _check(*CASES[name], CONSTANT_INPUTS.get(name, set()))


MODULES: dict[str, tuple[Any, Any, list[np.ndarray]]] = {
    "L1Loss": (nn.L1Loss(), torch.nn.L1Loss(), [randn(3, 2), randn(3, 2, seed=1)]),
    "MSELoss": (nn.MSELoss(reduction="sum"), torch.nn.MSELoss(reduction="sum"),
                [randn(3, 2), randn(3, 2, seed=1)]),
    "HuberLoss": (nn.HuberLoss(delta=0.5), torch.nn.HuberLoss(delta=0.5),
                  [randn(3, 2), randn(3, 2, seed=1)]),
    "SmoothL1Loss": (nn.SmoothL1Loss(beta=2.0), torch.nn.SmoothL1Loss(beta=2.0),
                     [randn(3, 2), randn(3, 2, seed=1)]),
    "BCELoss": (nn.BCELoss(), torch.nn.BCELoss(), [_probs(3, 2), _probs(3, 2, seed=1)]),
    "BCEWithLogitsLoss": (nn.BCEWithLogitsLoss(), torch.nn.BCEWithLogitsLoss(),
                          [randn(3, 2), _probs(3, 2, seed=1)]),
    "KLDivLoss": (nn.KLDivLoss(reduction="batchmean"),
                  torch.nn.KLDivLoss(reduction="batchmean"), [LOG_P, TARGET_P]),
    "CosineEmbeddingLoss": (nn.CosineEmbeddingLoss(0.1), torch.nn.CosineEmbeddingLoss(0.1),
                            [randn(4, 3), randn(4, 3, seed=1), _signs(4)]),
    "CrossEntropyLoss": (nn.CrossEntropyLoss(label_smoothing=0.2),
                         torch.nn.CrossEntropyLoss(label_smoothing=0.2),
                         [randn(5, 3), _classes(5, 3)]),
    "NLLLoss": (nn.NLLLoss(), torch.nn.NLLLoss(), [LOG_P, _classes(4, 5, seed=4)]),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_loss_module_matches_pytorch(name: str) -> None:
    module, tmodule, inputs = MODULES[name]
    _check(module, tmodule, inputs, {}, CONSTANT_INPUTS.get(name, set()))


def test_bce_clamps_logs_like_pytorch_at_zero_and_one() -> None:
    p = np.array([0.0, 1.0, 0.5], dtype=np.float32)
    t = np.array([1.0, 0.0, 1.0], dtype=np.float32)
    out = F.binary_cross_entropy(ember.tensor(p), ember.tensor(t), reduction="none")
    ref = TF.binary_cross_entropy(torch.from_numpy(p), torch.from_numpy(t), reduction="none")
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6)


def test_bce_with_logits_is_stable_for_huge_logits() -> None:
    x = ember.tensor([1000.0, -1000.0])
    out = F.binary_cross_entropy_with_logits(x, ember.tensor([0.0, 1.0]), reduction="none")
    assert out.tolist() == [1000.0, 1000.0]
