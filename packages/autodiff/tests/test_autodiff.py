"""Behaviour of the autodiff device: API, graph lifetime, grad mode, second derivatives."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import ember
import numpy as np
import pytest

from ember_autodiff import AutodiffBackend, AutodiffTensor, Gradients

AD = "autodiff<cpu>"


def leaf(values: object, device: str = AD) -> ember.Tensor:
    return ember.tensor(values, dtype=ember.float64, device=device, requires_grad=True)


# -- the device -------------------------------------------------------------------------------


def test_device_string_round_trips_and_tensors_are_autodiff_tensors() -> None:
    d = ember.device(AD)
    assert str(d) == AD
    assert isinstance(d.backend, AutodiffBackend)
    assert isinstance(ember.ones(2, device=d), AutodiffTensor)
    assert any(row.name == "autodiff<...>" for row in ember.devices())


def test_checkpointing_option_reaches_the_backend() -> None:
    assert ember.device("autodiff<cpu,checkpointing=true>").backend.checkpointing is True
    assert ember.device(AD).backend.checkpointing is False


def test_unknown_option_is_an_error() -> None:
    with pytest.raises(TypeError, match="bogus"):
        ember.device("autodiff<cpu,bogus=1>")


def test_values_match_the_inner_device() -> None:
    x = ember.tensor([[1.0, 2.0], [3.0, 4.0]], device=AD)
    y = ember.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert (x @ x).softmax(-1).tolist() == (y @ y).softmax(-1).tolist()
    assert (x @ x).device is ember.device(AD)


def test_backward_on_a_plain_cpu_tensor_raises_attribute_error() -> None:
    x = ember.ones(2)
    with pytest.raises(AttributeError, match="backward"):
        x.backward()  # type: ignore[attr-defined]  # the point of the test


def test_mypy_flags_backward_on_a_plain_tensor(tmp_path: Path) -> None:
    src = tmp_path / "plain.py"
    src.write_text("import ember\n\nember.ones(2).backward()\n")
    run = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports",
                          "silent", str(src)], capture_output=True, text=True, check=False)
    assert run.returncode == 1, run.stdout
    assert '"Tensor" has no attribute "backward"' in run.stdout


# -- gradients --------------------------------------------------------------------------------


def test_gradients_of_a_small_expression() -> None:
    x, y = leaf([1.0, 2.0]), leaf([3.0, -1.0])
    grads = (x * y + x.exp()).sum().backward()
    assert isinstance(grads, Gradients)
    np.testing.assert_allclose(grads[x].numpy(), [3.0 + np.e, -1.0 + np.e ** 2])
    np.testing.assert_allclose(grads[y].numpy(), [1.0, 2.0])
    assert grads[x].device is ember.device("cpu")


def test_backward_of_shared_input_accumulates() -> None:
    x = leaf([2.0, 3.0])
    grads = (x * x + x).sum().backward()
    assert grads[x].tolist() == [5.0, 7.0]


def test_broadcast_input_gets_gradient_of_its_own_shape() -> None:
    x, b = leaf([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), leaf([1.0, 1.0, 1.0])
    grads = (x * b).sum().backward()
    assert grads[b].tolist() == [5.0, 7.0, 9.0]


def test_intermediates_that_are_alive_have_gradients() -> None:
    x = leaf([1.0, 2.0])
    h = x * 3.0
    grads = (h * h).sum().backward()
    assert grads[h].tolist() == [6.0, 12.0]
    assert grads[x].tolist() == [18.0, 36.0]


def test_gradients_lookup_iteration_and_errors() -> None:
    x, c = leaf([1.0]), ember.tensor([2.0], device=AD)
    unused = leaf([5.0])
    grads = (x * c).sum().backward()
    assert x in grads and c not in grads and unused not in grads
    assert grads.get(c) is None
    with pytest.raises(KeyError, match="does not require grad"):
        grads[c]
    with pytest.raises(KeyError, match="not an input"):
        grads[unused]
    with pytest.raises(KeyError, match="not an autodiff device"):
        grads[ember.ones(1)]
    pairs = {round(t.item(), 3): g.tolist() for t, g in grads}
    assert pairs[1.0] == [2.0]


def test_backward_frees_the_graph_unless_retained() -> None:
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    first = y.backward(retain_graph=True)
    second = y.backward()
    assert first[x].tolist() == second[x].tolist() == [2.0, 4.0]
    with pytest.raises(RuntimeError, match="already freed"):
        y.backward()


def test_backward_of_non_scalar_needs_grad_output() -> None:
    x = leaf([1.0, 2.0])
    y = x * x
    with pytest.raises(RuntimeError, match="one element"):
        y.backward()
    grads = y.backward(ember.tensor([1.0, 10.0], dtype=ember.float64))
    assert grads[x].tolist() == [2.0, 40.0]


def test_no_grad_records_nothing_and_enable_grad_restores() -> None:
    x = leaf([1.0])
    with ember.no_grad():
        y = x * 2.0
        with ember.enable_grad():
            z = x * 2.0
    assert not y.requires_grad and y.is_leaf
    assert z.requires_grad and not z.is_leaf
    assert ember.is_grad_enabled()


def test_grad_mode_is_per_thread() -> None:
    seen: list[bool] = []
    with ember.no_grad():
        t = threading.Thread(target=lambda: seen.append(ember.is_grad_enabled()))
        t.start()
        t.join()
        assert not ember.is_grad_enabled()
    assert seen == [True]


def test_detach_cuts_the_graph() -> None:
    x = leaf([3.0])
    grads = (x * x.detach()).sum().backward()
    assert grads[x].tolist() == [3.0]
    assert x.detach().is_leaf and not x.detach().requires_grad


def test_integer_and_bool_results_carry_no_gradient() -> None:
    x = leaf([1.0, 5.0, 2.0])
    assert not x.argmax().requires_grad
    assert not (x > 1.0).requires_grad
    assert not x.long().requires_grad
    # piecewise-constant float results do, with a gradient of 0 (PyTorch's)
    assert x.floor().requires_grad
    assert x.sign().sum().backward()[x].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(RuntimeError, match="floating point"):
        ember.tensor([1, 2], device=AD).requires_grad_()


def test_max_splits_the_gradient_evenly_between_ties() -> None:
    x = leaf([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    grads = x.amax(dim=1).sum().backward()
    np.testing.assert_allclose(grads[x].numpy(), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])


def test_prod_with_a_zero_gives_the_product_of_the_others() -> None:
    x = leaf([2.0, 0.0, 3.0])
    assert x.prod().backward()[x].tolist() == [0.0, 6.0, 0.0]


def test_setitem_is_differentiable_in_both_tensors() -> None:
    x, v = leaf([1.0, 2.0, 3.0]), leaf([10.0])
    y = x * 1.0
    y[1:2] = v * 2.0
    grads = (y * ember.tensor([1.0, 2.0, 3.0], dtype=ember.float64, device=AD)).sum().backward()
    assert grads[x].tolist() == [1.0, 0.0, 3.0]
    assert grads[v].tolist() == [4.0]


def _slice_reads(x: ember.Tensor, overlap: bool) -> ember.Tensor:
    """Rows 0, 3 and 1 one by one, rows 4:6 as a window (row 2 unread), with ``overlap`` row 1
    a second time through a window cut on two axes, and x itself: the slice gradients are
    joined (one cat, or without it padded and summed)."""
    w = ember.tensor(np.arange(1.0, 19.0).reshape(6, 3), dtype=ember.float64, device=x.device)
    y = ((x[0] * w[0]).sum() + (x[3] * w[3]).sum() + (x[1] * w[1]).sum()
         + (x[4:6] * w[4:6]).sum() + (x * x).sum())
    return y + (x[1:2, 1:] * 5.0).sum() if overlap else y


def _slice_reads_grad(v: np.ndarray, overlap: bool) -> np.ndarray:
    w = np.arange(1.0, 19.0).reshape(6, 3)
    want = 2 * v + w
    want[2] = 2 * v[2]
    if overlap:
        want[1, 1:] += 5.0
    return want


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("device", [AD, "autodiff<cpu,checkpointing=true>"])
def test_gradients_of_slices_are_joined_into_one_tensor(device: str, overlap: bool) -> None:
    v = np.arange(18.0).reshape(6, 3) / 7
    x = leaf(v, device)
    np.testing.assert_allclose(_slice_reads(x, overlap).backward()[x].numpy(),
                               _slice_reads_grad(v, overlap))
    y = leaf(v, device)
    h = y * 1.0  # an intermediate read through slices, tiling axis 0 with gaps
    loss = h[1].sum() * 2.0 + (h[3:5] * 3.0).sum()
    grads = loss.backward()
    want = np.zeros((6, 3))
    want[1], want[3:5] = 2.0, 3.0
    np.testing.assert_array_equal(grads[y].numpy(), want)
    np.testing.assert_array_equal(grads[h].numpy(), want)


@pytest.mark.parametrize("overlap", [False, True])
def test_gradients_of_slices_can_be_differentiated_again(overlap: bool) -> None:
    v = np.arange(18.0).reshape(6, 3) / 7
    x = leaf(v)
    g = _slice_reads(x, overlap).backward(create_graph=True)[x]
    np.testing.assert_allclose(g.numpy(), _slice_reads_grad(v, overlap))
    rows = ember.stack([g[t] for t in range(6)], 0)  # the join itself is on the graph
    np.testing.assert_allclose((rows * rows).sum().backward()[x].numpy(),
                               4 * _slice_reads_grad(v, overlap))


def test_mlp_gradients_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    xs, w1, b1, w2 = rng.normal(size=(8, 5)), rng.normal(size=(6, 5)), rng.normal(size=6), \
        rng.normal(size=(3, 6))
    target = np.array([0, 2, 1, 1, 0, 2, 2, 0])
    ps = [leaf(a) for a in (w1, b1, w2)]
    logits = ember.functional.linear(ember.tensor(xs, device=AD).relu(), ps[0], ps[1]).tanh() \
        @ ps[2].T
    grads = ember.functional.cross_entropy(logits, ember.tensor(target, device=AD)).backward()
    tp = [torch.tensor(a, requires_grad=True) for a in (w1, b1, w2)]
    tl = torch.nn.functional.linear(torch.tensor(xs).relu(), tp[0], tp[1]).tanh() @ tp[2].T
    torch.nn.functional.cross_entropy(tl, torch.tensor(target)).backward()
    for p, t in zip(ps, tp, strict=True):
        np.testing.assert_allclose(grads[p].numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_conv_and_pool_gradients_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(2, 4, 9, 9)), rng.normal(size=(6, 2, 3, 3))
    ex, ew = leaf(x), leaf(w)
    F = ember.functional
    y = F.max_pool2d(F.conv2d(ex, ew, stride=2, padding=1, dilation=1, groups=2), 2,
                     ceil_mode=True)
    grads = (y * y).sum().backward()
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(tx, tw, stride=2, padding=1,
                                                                   groups=2), 2, ceil_mode=True)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(grads[ex].numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(grads[ew].numpy(), tw.grad.numpy(), rtol=1e-9, atol=1e-10)


# -- second derivatives -----------------------------------------------------------------------


def _mlp_loss(params: list[ember.Tensor], x: ember.Tensor) -> ember.Tensor:
    w1, b1, w2 = params
    return ((x @ w1 + b1).tanh() @ w2).pow(2).mean()


def test_nested_autodiff_gives_first_derivatives_too() -> None:
    x = leaf([1.0, 2.0], "autodiff<autodiff<cpu>>")
    grads = (x * x * x).sum().backward()
    assert grads[x].device is ember.device(AD)
    assert grads[x].tolist() == [3.0, 12.0]


def _hvp_setup() -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, list[np.ndarray]]:
    """Parameters, a direction, inputs, and the HVP by finite differences of the gradient."""
    rng = np.random.default_rng(0)
    shapes = [(3, 4), (4,), (4, 2)]
    values = [rng.normal(size=s) for s in shapes]
    vs = [rng.normal(size=s) for s in shapes]
    xs = rng.normal(size=(5, 3))

    def gradient(vals: list[np.ndarray]) -> list[np.ndarray]:
        ps = [leaf(v) for v in vals]
        grads = _mlp_loss(ps, ember.tensor(xs, device=AD)).backward()
        return [grads[p].numpy() for p in ps]

    eps = 1e-5
    plus = gradient([a + eps * v for a, v in zip(values, vs, strict=True)])
    minus = gradient([a - eps * v for a, v in zip(values, vs, strict=True)])
    return values, vs, xs, [(hi - lo) / (2 * eps) for hi, lo in zip(plus, minus, strict=True)]


def _dot(grads: Gradients, ps: list[ember.Tensor], vs: list[np.ndarray],
         device: str) -> ember.Tensor:
    total = ember.zeros((), dtype=ember.float64, device=device)
    for p, v in zip(ps, vs, strict=True):
        total = total + (grads[p] * ember.tensor(v, device=device)).sum()
    return total


def test_hessian_vector_product_by_nesting_matches_finite_differences() -> None:
    values, vs, xs, expected = _hvp_setup()
    nested = "autodiff<autodiff<cpu>>"
    ps = [leaf(v, nested) for v in values]
    grads = _mlp_loss(ps, ember.tensor(xs, device=nested)).backward()
    # grads[p] lives on autodiff<cpu>, recorded there: differentiate <grad, v> once more
    hvp = _dot(grads, ps, vs, AD).backward()
    for p, want in zip(ps, expected, strict=True):
        np.testing.assert_allclose(hvp[p].numpy(), want, rtol=1e-6, atol=1e-8)


def test_hessian_vector_product_by_create_graph_matches_finite_differences() -> None:
    values, vs, xs, expected = _hvp_setup()
    ps = [leaf(v) for v in values]
    grads = _mlp_loss(ps, ember.tensor(xs, device=AD)).backward(create_graph=True)
    assert grads[ps[0]].device is ember.device(AD) and grads[ps[0]].requires_grad
    hvp = _dot(grads, ps, vs, AD).backward()
    for p, want in zip(ps, expected, strict=True):
        np.testing.assert_allclose(hvp[p].numpy(), want, rtol=1e-6, atol=1e-8)


def test_second_derivative_of_a_cube_by_create_graph() -> None:
    x = leaf([1.0, -2.0])
    g = (x * x * x).sum().backward(create_graph=True)[x]
    assert g.tolist() == [3.0, 12.0]
    assert g.sum().backward()[x].tolist() == [6.0, -12.0]


@pytest.mark.parametrize("device", ["autodiff<autodiff<cpu>>", "autodiff<fusion<cpu>>",
                                    "autodiff<cpu,checkpointing=true>"])
def test_gradients_over_other_inner_devices(device: str) -> None:
    if "fusion" in device:
        pytest.importorskip("ember_fusion")
    from ember_autodiff.testing import check_grads

    rng = np.random.default_rng(0)
    F = ember.functional
    check_grads(lambda x, w: F.cross_entropy((x @ w).tanh(), ember.tensor([0, 2, 1],
                                                                          device=x.device)),
                [rng.normal(size=(3, 4)), rng.normal(size=(4, 3))], device=device)
    check_grads(lambda x: F.layer_norm(x, 4).exp().sum(0), [rng.normal(size=(3, 4))],
                device=device)
