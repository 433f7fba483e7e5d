"""Normalisation, embedding, recurrent, attention and transformer layers against PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from nn_oracle import AD, compare_module, copy_into_torch, randn

import ember
from ember import nn

torch = pytest.importorskip("torch")
tnn = torch.nn
G = ember.Generator


def _ids(*shape: int, high: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, shape).astype(np.int64)


def _bool_mask(*shape: int, seed: int = 0) -> np.ndarray:
    m = np.random.default_rng(seed).random(shape) < 0.3
    m[..., 0] = False  # never mask a whole row
    return m


CASES: dict[str, Any] = {
    "batch_norm1d_train": lambda: (nn.BatchNorm1d(4), tnn.BatchNorm1d(4), [randn(6, 4)], True),
    "batch_norm1d_3d_train": lambda: (nn.BatchNorm1d(3), tnn.BatchNorm1d(3),
                                      [randn(4, 3, 5)], True),
    "batch_norm2d_train": lambda: (nn.BatchNorm2d(3), tnn.BatchNorm2d(3),
                                   [randn(2, 3, 4, 4)], True),
    "batch_norm2d_eval": lambda: (nn.BatchNorm2d(3), tnn.BatchNorm2d(3),
                                  [randn(2, 3, 4, 4)], False),
    "batch_norm_no_affine": lambda: (nn.BatchNorm1d(4, affine=False),
                                     tnn.BatchNorm1d(4, affine=False), [randn(5, 4)], True),
    "layer_norm": lambda: (nn.LayerNorm(6), tnn.LayerNorm(6), [randn(3, 4, 6)], False),
    "layer_norm_2d_shape_no_bias": lambda: (nn.LayerNorm((3, 4), bias=False),
                                            tnn.LayerNorm((3, 4), bias=False),
                                            [randn(2, 3, 4)], False),
    "group_norm": lambda: (nn.GroupNorm(2, 6), tnn.GroupNorm(2, 6), [randn(3, 6, 4, 2)], False),
    "rms_norm": lambda: (nn.RMSNorm(5), tnn.RMSNorm(5), [randn(3, 5)], False),
    "rms_norm_eps": lambda: (nn.RMSNorm([2, 5], eps=1e-3), tnn.RMSNorm([2, 5], eps=1e-3),
                             [randn(3, 2, 5)], False),
    "embedding": lambda: (nn.Embedding(10, 4, generator=G(0)), tnn.Embedding(10, 4),
                          [_ids(3, 5)], False),
    "embedding_padding_idx": lambda: (nn.Embedding(10, 4, padding_idx=2, generator=G(1)),
                                      tnn.Embedding(10, 4, padding_idx=2),
                                      [np.array([[2, 1, 2, 5]], dtype=np.int64)], False),
    "lstm": lambda: (nn.LSTM(3, 4, generator=G(2)), tnn.LSTM(3, 4), [randn(5, 2, 3)], False),
    "lstm_two_layers_bidirectional_batch_first": lambda: (
        nn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True, generator=G(3)),
        tnn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True),
        [randn(2, 5, 3)], False),
    "gru": lambda: (nn.GRU(3, 4, generator=G(4)), tnn.GRU(3, 4), [randn(5, 2, 3)], False),
    "gru_bidirectional_no_bias": lambda: (
        nn.GRU(3, 2, bias=False, bidirectional=True, generator=G(5)),
        tnn.GRU(3, 2, bias=False, bidirectional=True), [randn(4, 2, 3)], False),
    "transformer_encoder_layer_post_norm": lambda: (
        nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, generator=G(6)),
        tnn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), [randn(5, 2, 8)], False),
    "transformer_encoder_layer_norm_first_gelu_batch_first": lambda: (
        nn.TransformerEncoderLayer(8, 4, 12, dropout=0.0, activation="gelu", batch_first=True,
                                   norm_first=True, generator=G(7)),
        tnn.TransformerEncoderLayer(8, 4, 12, dropout=0.0, activation="gelu",
                                    batch_first=True, norm_first=True),
        [randn(2, 5, 8)], False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_matches_pytorch_forward_and_gradients(name: str) -> None:
    module, tmodule, inputs, train = CASES[name]()
    compare_module(module, tmodule, inputs, rtol=1e-4, atol=2e-5, train=train)


def test_lstm_and_gru_with_initial_states_match_pytorch() -> None:
    h0, c0 = randn(1, 2, 4, seed=1), randn(1, 2, 4, seed=2)
    compare_module(nn.LSTM(3, 4, generator=G(0)), tnn.LSTM(3, 4),
                   [randn(5, 2, 3), h0, c0],
                   call=lambda m, x, h, c: m(x, (h, c)), tcall=lambda m, x, h, c: m(x, (h, c)),
                   rtol=1e-4, atol=1e-5)
    compare_module(nn.GRU(3, 4, generator=G(1)), tnn.GRU(3, 4), [randn(5, 2, 3), h0],
                   rtol=1e-4, atol=1e-5)


def _mha_pair(batch_first: bool) -> tuple[nn.Module, Any]:
    return (nn.MultiheadAttention(8, 2, batch_first=batch_first, generator=G(8)),
            tnn.MultiheadAttention(8, 2, batch_first=batch_first))


def test_multihead_attention_parameters_have_pytorchs_names_and_shapes() -> None:
    e, t = _mha_pair(False)
    assert {k: v.shape for k, v in e.state_dict().items()} == {
        k: tuple(v.shape) for k, v in t.state_dict().items()}


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_cross_attention_matches_pytorch(batch_first: bool) -> None:
    e, t = _mha_pair(batch_first)
    q, kv = (randn(2, 4, 8, seed=1), randn(2, 6, 8, seed=2)) if batch_first else (
        randn(4, 2, 8, seed=1), randn(6, 2, 8, seed=2))
    compare_module(e, t, [q, kv, kv], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["bool", "float", "per_head"])
def test_multihead_attention_masks_match_pytorch(kind: str) -> None:
    e, t = _mha_pair(True)
    x = randn(2, 5, 8)
    if kind == "bool":
        mask = _bool_mask(5, 5)
    elif kind == "float":
        mask = randn(5, 5, seed=3)
    else:
        mask = _bool_mask(2 * 2, 5, 5, seed=4)
    pad = np.array([[False] * 5, [False, False, False, True, True]])
    if kind == "float":  # PyTorch wants both masks of one kind
        pad = np.where(pad, -1e4, 0.0).astype(np.float32)
    compare_module(e, t, [x, mask, pad],
                   call=lambda m, x, a, p: m(x, x, x, attn_mask=a, key_padding_mask=p),
                   tcall=lambda m, x, a, p: m(x, x, x, attn_mask=a, key_padding_mask=p),
                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["none", "bool", "causal"])
def test_multihead_attention_without_weights_takes_the_fused_op_and_matches_pytorch(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``need_weights=False`` runs `scaled_dot_product_attention` (the fused kernel where the
    device has one): same outputs and gradients as PyTorch, with masks and key padding."""
    from ember.nn import attention

    calls = []
    real = attention.scaled_dot_product_attention
    monkeypatch.setattr(attention, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    e, t = _mha_pair(True)
    x = randn(2, 5, 8)
    pad = np.array([[False] * 5, [False, False, False, True, True]])
    mask = _bool_mask(5, 5) if kind == "bool" else np.triu(np.ones((5, 5), dtype=bool), 1)
    compare_module(e, t, [x, mask, pad],
                   call=lambda m, x, a, p: m(x, x, x, attn_mask=None if kind != "bool" else a,
                                             key_padding_mask=p, need_weights=False,
                                             is_causal=kind == "causal"),
                   tcall=lambda m, x, a, p: m(x, x, x, attn_mask=None if kind == "none" else a,
                                              key_padding_mask=p, need_weights=False),
                   rtol=1e-4, atol=1e-5)
    assert calls


def test_multihead_attention_causal_equals_pytorch_with_a_causal_mask() -> None:
    e, t = _mha_pair(True)
    causal = np.triu(np.ones((5, 5), dtype=bool), 1)
    compare_module(e, t, [randn(2, 5, 8)],
                   call=lambda m, x: m(x, x, x, is_causal=True, average_attn_weights=False),
                   tcall=lambda m, x: m(x, x, x, attn_mask=torch.from_numpy(causal),
                                        average_attn_weights=False),
                   rtol=1e-4, atol=1e-5)
    _, weights = e(*(ember.tensor(randn(1, 5, 8), device=AD),) * 3, is_causal=True)
    assert np.all(np.triu(weights.numpy()[0], 1) == 0)


def test_transformer_encoder_with_final_norm_and_padding_matches_pytorch() -> None:
    e = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                         batch_first=True, generator=G(9)),
                              2, norm=nn.LayerNorm(8))
    t = tnn.TransformerEncoder(tnn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                           batch_first=True), 2,
                               norm=tnn.LayerNorm(8), enable_nested_tensor=False)
    pad = np.array([[False] * 5, [False, False, False, True, True]])
    compare_module(e, t, [randn(2, 5, 8), pad],
                   call=lambda m, x, p: m(x, src_key_padding_mask=p),
                   tcall=lambda m, x, p: m(x, src_key_padding_mask=p), rtol=1e-4, atol=2e-5)


def test_transformer_encoder_layers_are_independent_copies() -> None:
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 1, 8, generator=G(0)), 2)
    a, b = enc.layers[0].linear1.weight, enc.layers[1].linear1.weight
    assert a is not b and a.tolist() == b.tolist()
    assert next(iter(enc.state_dict())) == "layers.0.self_attn.in_proj_weight"


def test_batch_norm_running_statistics_match_pytorch_after_training_steps() -> None:
    e, t = nn.BatchNorm2d(3, momentum=0.2), tnn.BatchNorm2d(3, momentum=0.2)
    e.to(AD)
    opt = ember.optim.SGD(e.parameters(), lr=0.1)
    topt = torch.optim.SGD(t.parameters(), lr=0.1)
    for step in range(5):
        x = randn(4, 3, 2, 2, seed=step, scale=step + 1.0) + step
        opt.step((e(ember.tensor(x, device=AD)) ** 3).mean().backward())
        topt.zero_grad()
        (t(torch.from_numpy(x)) ** 3).mean().backward()
        topt.step()
    tstate = t.state_dict()
    for k, v in e.state_dict().items():
        np.testing.assert_allclose(v.numpy(), tstate[k].numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=k)
    assert int(e.num_batches_tracked.item()) == 5
    x = randn(2, 3, 2, 2, seed=9)
    e.eval()
    t.eval()
    np.testing.assert_allclose(e(ember.tensor(x, device=AD)).numpy(),
                               t(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_batch_norm_cumulative_average_when_momentum_is_none() -> None:
    e, t = nn.BatchNorm1d(2, momentum=None), tnn.BatchNorm1d(2, momentum=None)
    for step in range(3):
        x = randn(5, 2, seed=step) * (step + 1)
        e(ember.tensor(x))
        t(torch.from_numpy(x))
    np.testing.assert_allclose(e.running_var.numpy(), t.running_var.numpy(), rtol=1e-5)
    np.testing.assert_allclose(e.running_mean.numpy(), t.running_mean.numpy(), rtol=1e-5,
                               atol=1e-7)


def test_sinusoidal_encoding_matches_the_papers_formula() -> None:
    pe = nn.SinusoidalPositionalEncoding(6, max_len=7)
    pos = np.arange(7)[:, None]
    i = np.arange(0, 6, 2)
    ref = np.zeros((7, 6))
    ref[:, 0::2] = np.sin(pos / 10000 ** (i / 6))
    ref[:, 1::2] = np.cos(pos / 10000 ** (i / 6))
    x = ember.zeros(2, 7, 6)
    np.testing.assert_allclose(pe(x).numpy()[1], ref, atol=1e-6)
    np.testing.assert_allclose(pe(x[:, :3], offset=4).numpy()[0], ref[4:], atol=1e-6)
    assert "pe" not in pe.state_dict()


def _rope_reference(x: np.ndarray, interleaved: bool, base: float = 10000.0) -> np.ndarray:
    """RoPE written out pair by pair (RoFormer's definition)."""
    t, d = x.shape[-2], x.shape[-1]
    out = np.empty_like(x, dtype=np.float64)
    for pos in range(t):
        for i in range(d // 2):
            theta = pos * base ** (-2 * i / d)
            a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)
            x1, x2 = x[..., pos, a], x[..., pos, b]
            out[..., pos, a] = x1 * np.cos(theta) - x2 * np.sin(theta)
            out[..., pos, b] = x1 * np.sin(theta) + x2 * np.cos(theta)
    return out


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_embedding_matches_the_pairwise_definition(interleaved: bool) -> None:
    x = randn(2, 3, 5, 8)
    rope = nn.RotaryEmbedding(8, interleaved=interleaved)
    np.testing.assert_allclose(rope(ember.tensor(x)).numpy(), _rope_reference(x, interleaved),
                               rtol=1e-5, atol=1e-5)
    shifted = rope(ember.tensor(x[:, :, 2:]), offset=2).numpy()
    np.testing.assert_allclose(shifted, _rope_reference(x, interleaved)[:, :, 2:], rtol=1e-5,
                               atol=1e-5)


def test_rotary_embedding_preserves_norms_and_relative_dot_products() -> None:
    rope = nn.RotaryEmbedding(4)
    q = ember.tensor(np.tile(randn(1, 4), (6, 1)))
    rq = rope(q).numpy()
    np.testing.assert_allclose(np.linalg.norm(rq, axis=-1), np.linalg.norm(q.numpy(), axis=-1),
                               rtol=1e-5)
    dots = [float(rq[i] @ rq[i + 2]) for i in range(4)]
    np.testing.assert_allclose(dots, dots[0], rtol=1e-5)


def test_copying_weights_back_from_pytorch_round_trips() -> None:
    e = nn.LSTM(3, 4, num_layers=2, generator=G(0))
    t = tnn.LSTM(3, 4, num_layers=2)
    copy_into_torch(e, t)
    e2 = nn.LSTM(3, 4, num_layers=2)
    e2.load_state_dict({k: ember.tensor(v.numpy()) for k, v in t.state_dict().items()})
    for k, v in e.state_dict().items():
        assert v.tolist() == e2.state_dict()[k].tolist()


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_embedding_gradients_match_finite_differences(interleaved: bool) -> None:
    testing = pytest.importorskip("ember_autodiff.testing")
    rope = nn.RotaryEmbedding(4, interleaved=interleaved).to(AD)
    testing.check_grads(lambda x: rope(x, offset=1),
                        [np.random.default_rng(0).standard_normal((2, 3, 4))])


def test_sinusoidal_encoding_gradients_pass_straight_through() -> None:
    testing = pytest.importorskip("ember_autodiff.testing")
    pe = nn.SinusoidalPositionalEncoding(4, max_len=6).to(AD)
    testing.check_grads(lambda x: pe(x) * x, [np.random.default_rng(1).standard_normal((2, 3, 4))])


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "causal"])
def test_scaled_dot_product_attention_matches_pytorchs_function(mask_kind: str) -> None:
    import ember.nn.functional as F

    q, k, v = randn(2, 3, 4, 8, seed=1), randn(2, 3, 6, 8, seed=2), randn(2, 3, 6, 8, seed=3)
    mask: Any = None
    if mask_kind == "bool":
        mask = ~_bool_mask(4, 6)  # True = may attend, as PyTorch's function
    elif mask_kind == "float":
        mask = randn(4, 6, seed=4)
    args = [ember.tensor(a) for a in (q, k, v)]
    targs = [torch.from_numpy(a) for a in (q, k, v)]
    causal = mask_kind == "causal"
    out = F.scaled_dot_product_attention(*args, None if mask is None else ember.tensor(mask),
                                         is_causal=causal)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *targs, None if mask is None else torch.from_numpy(mask), is_causal=causal)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
