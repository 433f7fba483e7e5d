"""RNN, the recurrent cells, Upsample, Bilinear and the transformer decoder against PyTorch:
the same state_dict (names and shapes), the same outputs, parameter and input gradients."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from nn_oracle import compare_module, randn

import ember
from ember import nn

torch = pytest.importorskip("torch")
tnn = torch.nn
G = ember.Generator


def _mask(*shape: int, seed: int = 0) -> np.ndarray:
    m = np.random.default_rng(seed).random(shape) < 0.3
    m[..., 0] = False  # never mask a whole row
    return m


CASES: dict[str, Any] = {
    "rnn_tanh": lambda: (nn.RNN(3, 4, generator=G(0)), tnn.RNN(3, 4), [randn(5, 2, 3)]),
    "rnn_relu_two_layers_bidirectional_batch_first": lambda: (
        nn.RNN(3, 4, 2, "relu", batch_first=True, bidirectional=True, generator=G(1)),
        tnn.RNN(3, 4, 2, "relu", batch_first=True, bidirectional=True), [randn(2, 5, 3)]),
    "rnn_no_bias_with_h0": lambda: (nn.RNN(3, 2, bias=False, generator=G(2)),
                                    tnn.RNN(3, 2, bias=False),
                                    [randn(4, 2, 3), randn(1, 2, 2, seed=1)]),
    "rnn_unbatched": lambda: (nn.RNN(3, 4, num_layers=2, generator=G(3)),
                              tnn.RNN(3, 4, num_layers=2), [randn(6, 3)]),
    "rnn_cell_tanh": lambda: (nn.RNNCell(3, 4, generator=G(4)), tnn.RNNCell(3, 4),
                              [randn(2, 3), randn(2, 4, seed=1)]),
    "rnn_cell_relu_no_bias_no_state": lambda: (
        nn.RNNCell(3, 4, bias=False, nonlinearity="relu", generator=G(5)),
        tnn.RNNCell(3, 4, bias=False, nonlinearity="relu"), [randn(2, 3)]),
    "lstm_cell": lambda: (nn.LSTMCell(3, 4, generator=G(6)), tnn.LSTMCell(3, 4), [randn(2, 3)]),
    "lstm_cell_unbatched": lambda: (nn.LSTMCell(3, 4, generator=G(7)), tnn.LSTMCell(3, 4),
                                    [randn(3)]),
    "gru_cell": lambda: (nn.GRUCell(3, 4, generator=G(8)), tnn.GRUCell(3, 4),
                         [randn(2, 3), randn(2, 4, seed=1)]),
    "gru_cell_no_bias": lambda: (nn.GRUCell(3, 2, bias=False, generator=G(9)),
                                 tnn.GRUCell(3, 2, bias=False), [randn(5, 3)]),
    "bilinear": lambda: (nn.Bilinear(3, 4, 5, generator=G(10)), tnn.Bilinear(3, 4, 5),
                         [randn(6, 3), randn(6, 4, seed=1)]),
    "bilinear_no_bias_3d": lambda: (nn.Bilinear(2, 3, 4, bias=False, generator=G(11)),
                                    tnn.Bilinear(2, 3, 4, bias=False),
                                    [randn(2, 5, 2), randn(2, 5, 3, seed=1)]),
    "upsample_nearest": lambda: (nn.Upsample(scale_factor=2), tnn.Upsample(scale_factor=2),
                                 [randn(1, 2, 3, 4)]),
    "upsample_bilinear_size_align_corners": lambda: (
        nn.Upsample((5, 7), mode="bilinear", align_corners=True),
        tnn.Upsample((5, 7), mode="bilinear", align_corners=True), [randn(2, 1, 3, 4)]),
    "upsample_bilinear_recomputed_scale": lambda: (
        nn.Upsample(scale_factor=1.5, mode="bilinear", recompute_scale_factor=True),
        tnn.Upsample(scale_factor=1.5, mode="bilinear", recompute_scale_factor=True),
        [randn(1, 2, 4, 3)]),
    "upsample_linear_1d": lambda: (nn.Upsample(scale_factor=3, mode="linear"),
                                   tnn.Upsample(scale_factor=3, mode="linear"),
                                   [randn(2, 2, 4)]),
    "upsampling_bilinear2d": lambda: (nn.UpsamplingBilinear2d(scale_factor=2),
                                      tnn.UpsamplingBilinear2d(scale_factor=2),
                                      [randn(1, 1, 3, 3)]),
    "transformer_decoder_layer_post_norm": lambda: (
        nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, generator=G(12)),
        tnn.TransformerDecoderLayer(8, 2, 16, dropout=0.0),
        [randn(5, 2, 8), randn(7, 2, 8, seed=1)]),
    "transformer_decoder_layer_norm_first_gelu_batch_first": lambda: (
        nn.TransformerDecoderLayer(8, 4, 12, dropout=0.0, activation="gelu", batch_first=True,
                                   norm_first=True, generator=G(13)),
        tnn.TransformerDecoderLayer(8, 4, 12, dropout=0.0, activation="gelu",
                                    batch_first=True, norm_first=True),
        [randn(2, 5, 8), randn(2, 6, 8, seed=1)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_matches_pytorch_forward_and_gradients(name: str) -> None:
    module, tmodule, inputs = CASES[name]()
    compare_module(module, tmodule, inputs, rtol=1e-4, atol=2e-5)


def test_lstm_cell_with_state_matches_pytorch() -> None:
    compare_module(nn.LSTMCell(3, 4, generator=G(0)), tnn.LSTMCell(3, 4),
                   [randn(2, 3), randn(2, 4, seed=1), randn(2, 4, seed=2)],
                   call=lambda m, x, h, c: m(x, (h, c)), tcall=lambda m, x, h, c: m(x, (h, c)),
                   rtol=1e-4, atol=1e-5)


def test_cells_unrolled_match_the_layer_with_the_same_weights() -> None:
    rnn = nn.RNN(3, 4, nonlinearity="relu", generator=G(1))
    cell = nn.RNNCell(3, 4, nonlinearity="relu")
    cell.load_state_dict({k[:-3]: v for k, v in rnn.state_dict().items()})
    x = ember.tensor(randn(5, 2, 3))
    out, h = rnn(x)
    hc = None
    for t in range(5):
        hc = cell(x[t], hc)
        np.testing.assert_allclose(hc.numpy(), out[t].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(h[0].numpy(), out[-1].numpy())


def test_transformer_decoder_with_masks_matches_pytorch() -> None:
    layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True, generator=G(2))
    e = nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(8))
    t = tnn.TransformerDecoder(tnn.TransformerDecoderLayer(8, 2, 16, dropout=0.0,
                                                           batch_first=True), 2,
                               norm=tnn.LayerNorm(8))
    causal = np.triu(np.full((5, 5), -np.inf, dtype=np.float32), 1)
    tgt_pad = np.array([[False] * 5, [False] * 3 + [True] * 2])
    mem_pad = np.array([[False] * 6, [False] * 4 + [True] * 2])

    def call(m: Any, tgt: Any, mem: Any, mask: Any, tp: Any, mp: Any) -> Any:
        return m(tgt, mem, tgt_mask=mask, tgt_key_padding_mask=tp,
                 memory_key_padding_mask=mp)

    def tcall(m: Any, tgt: Any, mem: Any, mask: Any, tp: Any, mp: Any) -> Any:
        # PyTorch wants masks of one kind: the padding masks as floats too
        return m(tgt, mem, tgt_mask=mask, tgt_key_padding_mask=torch.where(tp, -1e9, 0.0),
                 memory_key_padding_mask=mp)

    compare_module(e, t, [randn(2, 5, 8), randn(2, 6, 8, seed=1), causal, tgt_pad, mem_pad],
                   call=call, tcall=tcall, rtol=1e-4, atol=2e-5, train=True)


def test_transformer_matches_pytorch_with_a_causal_target_mask() -> None:
    e = nn.Transformer(8, 2, 2, 1, dim_feedforward=16, dropout=0.0, batch_first=True,
                       generator=G(3))
    t = tnn.Transformer(8, 2, 2, 1, dim_feedforward=16, dropout=0.0, batch_first=True)
    assert {k: v.shape for k, v in e.state_dict().items()} == {
        k: tuple(v.shape) for k, v in t.state_dict().items()}
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    np.testing.assert_array_equal(mask.numpy(),
                                  tnn.Transformer.generate_square_subsequent_mask(4).numpy())
    compare_module(e, t, [randn(2, 6, 8), randn(2, 4, 8, seed=1), mask.numpy()],
                   call=lambda m, s, g, k: m(s, g, tgt_mask=k),
                   tcall=lambda m, s, g, k: m(s, g, tgt_mask=k), rtol=1e-4, atol=2e-5,
                   train=True)


def test_transformer_weight_matrices_are_xavier_uniform() -> None:
    e = nn.Transformer(16, 2, 1, 1, dim_feedforward=64, generator=G(4))
    w = e.state_dict()["decoder.layers.0.linear1.weight"].numpy()
    bound = np.sqrt(6 / (16 + 64))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound


def test_tgt_is_causal_without_a_mask_is_the_causal_mask() -> None:
    layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, generator=G(5))
    tgt, mem = ember.tensor(randn(4, 1, 8)), ember.tensor(randn(3, 1, 8, seed=1))
    a = layer(tgt, mem, tgt_is_causal=True)
    b = layer(tgt, mem, tgt_mask=nn.Transformer.generate_square_subsequent_mask(4))
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
    assert not np.allclose(a.numpy(), layer(tgt, mem).numpy(), atol=1e-3)


def test_module_errors_name_the_values() -> None:
    with pytest.raises(ValueError, match="nonlinearity must be 'tanh' or 'relu', got 'gelu'"):
        nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match=r"RNNCell: expected input \[N, 3\] or \[3\], got"):
        nn.RNNCell(3, 4)(ember.zeros(2, 5))
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        nn.Upsample()
    with pytest.raises(ValueError, match=r"bilinear: inputs \(2, 3\) and \(2, 5\)"):
        nn.Bilinear(3, 4, 2)(ember.zeros(2, 3), ember.zeros(2, 5))
    model = nn.Transformer(8, 2, 1, 1, dim_feedforward=8)
    with pytest.raises(ValueError, match="different batch sizes"):
        model(ember.zeros(3, 2, 8), ember.zeros(3, 4, 8))
