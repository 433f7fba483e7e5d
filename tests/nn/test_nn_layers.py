"""Each layer matches PyTorch's forward output and gradients with the same weights."""

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

CASES: dict[str, Any] = {
    "linear": lambda: (nn.Linear(5, 3, generator=G(0)), tnn.Linear(5, 3), [randn(4, 5)]),
    "linear_no_bias_3d": lambda: (nn.Linear(5, 3, bias=False, generator=G(1)),
                                  tnn.Linear(5, 3, bias=False), [randn(2, 4, 5)]),
    "conv1d": lambda: (nn.Conv1d(3, 4, 3, stride=2, padding=1, generator=G(2)),
                       tnn.Conv1d(3, 4, 3, stride=2, padding=1), [randn(2, 3, 9)]),
    "conv2d": lambda: (nn.Conv2d(2, 4, 3, padding=1, generator=G(3)),
                       tnn.Conv2d(2, 4, 3, padding=1), [randn(2, 2, 6, 6)]),
    "conv2d_groups_dilation": lambda: (
        nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(2, 1), dilation=2, groups=2,
                  generator=G(4)),
        tnn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(2, 1), dilation=2, groups=2),
        [randn(2, 4, 9, 7)]),
    "conv2d_same_even_kernel": lambda: (nn.Conv2d(2, 3, 4, padding="same", generator=G(5)),
                                        tnn.Conv2d(2, 3, 4, padding="same"),
                                        [randn(1, 2, 7, 6)]),
    "conv_transpose2d": lambda: (
        nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1, generator=G(6)),
        tnn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1),
        [randn(2, 3, 4, 5)]),
    "conv_transpose1d": lambda: (nn.ConvTranspose1d(3, 2, 4, stride=2, generator=G(7)),
                                 tnn.ConvTranspose1d(3, 2, 4, stride=2), [randn(2, 3, 5)]),
    "max_pool2d": lambda: (nn.MaxPool2d(2), tnn.MaxPool2d(2), [randn(2, 3, 6, 6)]),
    "max_pool2d_stride_pad": lambda: (nn.MaxPool2d(3, stride=2, padding=1),
                                      tnn.MaxPool2d(3, stride=2, padding=1),
                                      [randn(1, 2, 7, 7)]),
    "avg_pool2d": lambda: (nn.AvgPool2d(2, stride=1, padding=1),
                           tnn.AvgPool2d(2, stride=1, padding=1), [randn(1, 2, 5, 5)]),
    "adaptive_avg_pool2d": lambda: (nn.AdaptiveAvgPool2d((2, 3)), tnn.AdaptiveAvgPool2d((2, 3)),
                                    [randn(2, 2, 5, 7)]),
    "flatten": lambda: (nn.Flatten(), tnn.Flatten(), [randn(2, 3, 4)]),
    "unflatten": lambda: (nn.Unflatten(1, (2, 6)), tnn.Unflatten(1, (2, 6)), [randn(3, 12)]),
    "identity": lambda: (nn.Identity(), tnn.Identity(), [randn(3, 2)]),
    "sequential_cnn": lambda: (
        nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, generator=G(8)), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Dropout(0.3), nn.Flatten(),
                      nn.Linear(16, 10, generator=G(9))),
        tnn.Sequential(tnn.Conv2d(1, 4, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2),
                       tnn.Dropout(0.3), tnn.Flatten(), tnn.Linear(16, 10)),
        [randn(3, 1, 4, 4)]),
    "relu": lambda: (nn.ReLU(), tnn.ReLU(), [randn(4, 5)]),
    "gelu": lambda: (nn.GELU(), tnn.GELU(), [randn(4, 5)]),
    "gelu_tanh": lambda: (nn.GELU("tanh"), tnn.GELU("tanh"), [randn(4, 5)]),
    "silu": lambda: (nn.SiLU(), tnn.SiLU(), [randn(4, 5)]),
    "tanh": lambda: (nn.Tanh(), tnn.Tanh(), [randn(4, 5)]),
    "sigmoid": lambda: (nn.Sigmoid(), tnn.Sigmoid(), [randn(4, 5)]),
    "leaky_relu": lambda: (nn.LeakyReLU(0.2), tnn.LeakyReLU(0.2), [randn(4, 5)]),
    "softplus": lambda: (nn.Softplus(beta=2.0, threshold=3.0), tnn.Softplus(2.0, 3.0),
                         [randn(4, 5, scale=3)]),
    "mish": lambda: (nn.Mish(), tnn.Mish(), [randn(4, 5)]),
    "elu": lambda: (nn.ELU(0.7), tnn.ELU(0.7), [randn(4, 5)]),
    "prelu": lambda: (nn.PReLU(), tnn.PReLU(), [randn(4, 5)]),
    "prelu_channels": lambda: (nn.PReLU(3, init=0.1), tnn.PReLU(3, init=0.1),
                               [randn(2, 3, 4)]),
    "softmax": lambda: (nn.Softmax(dim=1), tnn.Softmax(dim=1), [randn(3, 4, 2)]),
    "log_softmax": lambda: (nn.LogSoftmax(dim=-1), tnn.LogSoftmax(dim=-1), [randn(3, 4)]),
}


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_matches_pytorch_forward_and_gradients(name: str) -> None:
    module, tmodule, inputs = CASES[name]()
    compare_module(module, tmodule, inputs, rtol=1e-4, atol=1e-5)


def test_linear_default_init_is_pytorchs_kaiming_uniform_bound() -> None:
    fc = nn.Linear(64, 32, generator=G(0))
    w, b = fc.weight.numpy(), fc.bias.numpy()
    bound = 1 / np.sqrt(64)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    # uniform on [-bound, bound]: the variance is bound² / 3
    assert abs(w.var() - bound ** 2 / 3) < 0.1 * bound ** 2 / 3
    assert fc.weight.shape == (32, 64)


def test_conv_default_init_bound_uses_fan_in_of_the_kernel() -> None:
    conv = nn.Conv2d(3, 8, 5, generator=G(0))
    bound = 1 / np.sqrt(3 * 5 * 5)
    assert np.abs(conv.weight.numpy()).max() <= bound
    assert np.abs(conv.weight.numpy()).max() > 0.9 * bound
    assert conv.weight.shape == (8, 3, 5, 5)


def test_same_generator_seed_gives_same_initial_weights() -> None:
    a, b = nn.Linear(4, 4, generator=G(7)), nn.Linear(4, 4, generator=G(7))
    c = nn.Linear(4, 4, generator=G(8))
    assert a.weight.tolist() == b.weight.tolist()
    assert a.weight.tolist() != c.weight.tolist()


def test_dropout_is_identity_in_eval_and_scales_kept_values_in_training() -> None:
    drop = nn.Dropout(0.25, generator=G(0))
    x = ember.ones(1000)
    y = drop(x).numpy()
    kept = y[y != 0]
    np.testing.assert_allclose(kept, 1 / 0.75, rtol=1e-6)
    assert 0.18 < 1 - len(kept) / 1000 < 0.32
    assert drop.eval()(x).tolist() == x.tolist()


def test_max_pool_with_indices_matches_pytorch() -> None:
    x = randn(1, 2, 4, 6)
    values, idx = nn.MaxPool2d(2, return_indices=True)(ember.tensor(x))
    tv, ti = tnn.MaxPool2d(2, return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(values.numpy(), tv.numpy())
    np.testing.assert_array_equal(idx.numpy(), ti.numpy())
