"""multinomial, bernoulli and randperm: distributions by statistical tests with fixed seeds,
reproducibility per seed, PyTorch's shapes and dtypes, and errors naming the values."""

from __future__ import annotations

import numpy as np
import pytest

import ember

DEVICES = ["cpu", "autodiff<cpu>"]

# chi-square critical values at p = 1e-4 (scipy.stats.chi2.ppf(1 - 1e-4, df)): a correct
# sampler fails one of these with probability 1e-4, and the seeds are fixed
CHI2_CRIT = {3: 21.108, 4: 23.513, 5: 25.745}


def _chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("device", DEVICES)
def test_multinomial_with_replacement_follows_the_weights(device: str) -> None:
    w = np.array([1.0, 0.0, 2.0, 4.0, 0.5, 2.5], dtype=np.float32)
    g = ember.Generator(11)
    draws = ember.multinomial(ember.tensor(w, device=device), 20000, True, generator=g).numpy()
    assert draws.dtype == np.int64 and draws.shape == (20000,)
    counts = np.bincount(draws, minlength=6)
    assert counts[1] == 0, "a zero-weight category was drawn"
    nz = w > 0
    assert _chi2(counts[nz], w[nz] / w.sum()) < CHI2_CRIT[4]
    # and the test can fail: the same counts against uniform weights are far off
    assert _chi2(counts[nz], np.full(5, 0.2)) > 100 * CHI2_CRIT[4]


def test_multinomial_rows_are_sampled_independently() -> None:
    w = np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 5.0, 0.0], [3.0, 1.0, 0.0, 0.0]])
    out = ember.multinomial(ember.tensor(w), 4000, replacement=True,
                            generator=ember.Generator(3)).numpy()
    assert out.shape == (3, 4000)
    assert (out[1] == 2).all()
    assert set(np.unique(out[2])) == {0, 1}
    assert _chi2(np.bincount(out[0], minlength=4), np.full(4, 0.25)) < CHI2_CRIT[3]
    assert abs((out[2] == 0).mean() - 0.75) < 0.03


def test_multinomial_without_replacement_draws_distinct_categories_in_weight_order() -> None:
    w = ember.tensor([[5.0, 1.0, 0.0, 3.0, 1.0]] * 3000)
    out = ember.multinomial(w, 3, generator=ember.Generator(5)).numpy()
    assert out.shape == (3000, 3)
    assert all(len(set(row)) == 3 for row in out), "a category was drawn twice"
    assert not (out == 2).any(), "a zero-weight category was drawn"
    # the first draw is distributed as the weights; the second as the weights without the first
    assert _chi2(np.bincount(out[:, 0], minlength=5)[[0, 1, 3, 4]],
                 np.array([5, 1, 3, 1]) / 10) < CHI2_CRIT[3]
    p_second_0 = sum(wi / 10 * 5 / (10 - wi) for wi in (1.0, 3.0, 1.0))
    assert abs((out[:, 1] == 0).mean() - p_second_0) < 0.035


def test_multinomial_taking_every_category_without_replacement_is_a_permutation() -> None:
    out = ember.multinomial(ember.ones(8), 8, generator=ember.Generator(0)).tolist()
    assert sorted(out) == list(range(8))


@pytest.mark.parametrize("device", DEVICES)
def test_random_sampling_is_reproducible_per_seed(device: str) -> None:
    w = ember.tensor([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]], device=device)
    p = ember.full((50,), 0.4, device=device)

    def draw(seed: int) -> list[list[int] | list[float]]:
        g = ember.Generator(seed)
        return [ember.multinomial(w, 10, True, generator=g).tolist(),
                ember.multinomial(w, 2, generator=g).tolist(),
                ember.bernoulli(p, generator=g).tolist(),
                ember.randperm(20, generator=g, device=device).tolist()]

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)
    ember.manual_seed(3)
    a = ember.randperm(30).tolist()
    ember.manual_seed(3)
    assert ember.randperm(30).tolist() == a


@pytest.mark.parametrize("device", DEVICES)
def test_bernoulli_mean_matches_probabilities(device: str) -> None:
    probs = np.repeat(np.array([0.0, 0.1, 0.5, 0.9, 1.0], dtype=np.float32), 8000)
    out = ember.bernoulli(ember.tensor(probs, device=device),
                          generator=ember.Generator(2)).numpy()
    assert out.dtype == np.float32 and set(np.unique(out)) <= {0.0, 1.0}
    means = out.reshape(5, 8000).mean(1)
    assert means[0] == 0.0 and means[4] == 1.0
    # 5 standard errors of the mean (at most 0.0056 for p = 0.5)
    np.testing.assert_allclose(means[1:4], [0.1, 0.5, 0.9], atol=0.028)


def test_bernoulli_with_p_ignores_input_values_and_keeps_dtype() -> None:
    x = ember.zeros(20000, dtype=ember.float64)
    out = ember.bernoulli(x, 0.25, generator=ember.Generator(4))
    assert out.dtype == ember.float64
    assert abs(out.numpy().mean() - 0.25) < 0.016


def test_bernoulli_passes_no_gradient() -> None:
    p = ember.full((4,), 0.5, device="autodiff<cpu>", requires_grad=True)
    s = ember.bernoulli(p, generator=ember.Generator(0))
    grads = (s * p).sum().backward()
    np.testing.assert_array_equal(grads[p].numpy(), s.numpy())


@pytest.mark.parametrize("n", [0, 1, 2, 17, 1000])
def test_randperm_is_a_permutation(n: int) -> None:
    out = ember.randperm(n, generator=ember.Generator(n))
    assert out.dtype == ember.int64 and out.shape == (n,)
    assert sorted(out.tolist()) == list(range(n))


def test_randperm_positions_are_uniform() -> None:
    g = ember.Generator(9)
    firsts = np.array([ember.randperm(5, generator=g).tolist()[0] for _ in range(2000)])
    assert _chi2(np.bincount(firsts, minlength=5), np.full(5, 0.2)) < CHI2_CRIT[4]


def test_randperm_dtype_and_device() -> None:
    out = ember.randperm(6, dtype=ember.float32, device="autodiff<cpu>",
                         generator=ember.Generator(1))
    assert out.dtype == ember.float32 and str(out.device) == "autodiff<cpu>"
    assert sorted(out.tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_sampling_errors_name_the_op_and_the_values() -> None:
    with pytest.raises(ValueError, match=r"multinomial: probabilities .*non-negative.*-1\.0"):
        ember.multinomial(ember.tensor([0.5, -1.0, 2.0]), 1)
    with pytest.raises(ValueError, match=r"multinomial: .*num_samples=4 .*3 categories"):
        ember.multinomial(ember.tensor([0.5, 1.0, 2.0]), 4)
    with pytest.raises(ValueError, match=r"multinomial: .*num_samples=3 .*only 2 non-zero"):
        ember.multinomial(ember.tensor([0.5, 0.0, 2.0]), 3)
    with pytest.raises(ValueError, match=r"multinomial: every row .*positive sum"):
        ember.multinomial(ember.zeros(2, 3), 1, True)
    with pytest.raises(ValueError, match=r"multinomial: .*inf"):
        ember.multinomial(ember.tensor([1.0, float("inf")]), 1)
    with pytest.raises(ValueError, match="multinomial: input must be 1-D or 2-D"):
        ember.multinomial(ember.ones(2, 2, 2), 1)
    with pytest.raises(ValueError, match=r"bernoulli: probabilities .*\[0, 1\].*1\.5"):
        ember.bernoulli(ember.tensor([0.5, 1.5]))
    with pytest.raises(ValueError, match=r"bernoulli: p must be in \[0, 1\], got -0\.1"):
        ember.bernoulli(ember.zeros(2), -0.1)
    with pytest.raises(ValueError, match="randperm: n must be non-negative, got -1"):
        ember.randperm(-1)


def test_multinomial_matches_pytorch_shapes() -> None:
    torch = pytest.importorskip("torch")
    for shape, k, repl in (((4,), 3, False), ((2, 5), 7, True), ((3, 6), 6, False)):
        w = np.random.default_rng(0).random(shape).astype(np.float32) + 0.1
        ours = ember.multinomial(ember.tensor(w), k, repl, generator=ember.Generator(0))
        theirs = torch.multinomial(torch.tensor(w), k, repl)
        assert ours.shape == tuple(theirs.shape) and ours.dtype == ember.int64
