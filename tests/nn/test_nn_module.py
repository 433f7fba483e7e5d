"""Module: registration, dotted paths, devices, modes, freezing, state dicts, printing."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import RecordError, nn

AD = "autodiff<cpu>"


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = [nn.Linear(3, 3), nn.Linear(3, 2)]
        self.heads = {"a": nn.Linear(2, 1), "b": nn.Linear(2, 1, bias=False)}
        self.scale = nn.Parameter(ember.ones(2))
        self.register_buffer("count", ember.zeros(1))
        self.register_buffer("scratch", ember.zeros(1), persistent=False)
        self.not_a_parameter = ember.ones(3)

    def forward(self, x: ember.Tensor) -> ember.Tensor:
        for layer in self.layers:
            x = layer(x)
        x = x * self.scale
        return self.heads["a"](x) + self.heads["b"](x)


def test_parameters_in_lists_and_dicts_of_modules_get_dotted_paths() -> None:
    names = [n for n, _ in Block().named_parameters()]
    assert names == ["scale", "layers.0.weight", "layers.0.bias", "layers.1.weight",
                     "layers.1.bias", "heads.a.weight", "heads.a.bias", "heads.b.weight"]


def test_state_dict_holds_persistent_buffers_but_not_plain_tensors() -> None:
    keys = list(Block().state_dict())
    assert "count" in keys and "scratch" not in keys and "not_a_parameter" not in keys
    assert [n for n, _ in Block().named_buffers()] == ["count", "scratch"]


def test_state_dict_keys_and_order_equal_pytorchs() -> None:
    torch = pytest.importorskip("torch")
    e = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 4))
    t = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(8, 4))
    assert list(e.state_dict()) == list(t.state_dict())
    assert [v.shape for v in e.state_dict().values()] == [
        tuple(v.shape) for v in t.state_dict().values()]


def test_repr_is_a_tree_like_pytorchs() -> None:
    torch = pytest.importorskip("torch")
    e = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Conv2d(1, 2, 3)))
    t = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                            torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3)))
    assert repr(e) == repr(t)


def test_num_params_counts_all_or_only_trainable() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    assert model.num_params() == 4 * 3 + 3 + 3 * 2 + 2
    model[0].freeze()
    assert model.num_params(trainable_only=True) == 3 * 2 + 2


def test_shared_parameters_are_listed_once_but_saved_under_every_path_as_pytorch() -> None:
    fc = nn.Linear(2, 2)
    model = nn.Sequential(fc, nn.ReLU(), fc)
    assert len(list(model.parameters())) == 2
    assert list(model.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_to_autodiff_device_makes_trainable_parameters_leaves_requiring_grad() -> None:
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1)).to(AD)
    model[1].freeze()
    assert [p.requires_grad for p in model.parameters()] == [True, True, False, False]
    assert all(str(p.device) == AD for p in model.parameters())
    x = ember.ones(4, 3, device=AD)
    grads = model(x).sum().backward()
    assert model[0].weight in grads and model[1].weight not in grads


def test_to_dtype_casts_floating_parameters_and_buffers() -> None:
    bn = nn.BatchNorm1d(3).to(ember.float64)
    assert bn.weight.dtype is ember.float64 and bn.running_mean.dtype is ember.float64
    assert bn.num_batches_tracked.dtype is ember.int64


@pytest.mark.parametrize("target", [AD, ember.float64])
def test_to_keeps_tied_weights_one_tensor(target: object) -> None:
    """``lm_head.weight = wte.weight`` survives ``.to(device)`` and ``.to(dtype)``: one
    parameter (listed once), whose gradient sums both uses."""
    wte, head = nn.Embedding(5, 3), nn.Linear(3, 5, bias=False)
    head.weight = wte.weight
    model = nn.Sequential(wte, head).to(target)  # type: ignore[arg-type]
    assert model[0].weight is model[1].weight
    assert len(list(model.parameters())) == 1
    if target == AD:
        idx = ember.tensor(np.array([1, 3]), device=AD)
        w = model[0].weight
        grads = model(idx).sum().backward()
        # d/dW of sum(W[idx] @ W.T): the embedding's rows get W's column sums, every row of
        # the head gets the sum of the looked-up rows
        e = np.outer(np.ones(5), w.numpy()[[1, 3]].sum(axis=0))
        e[[1, 3]] += w.numpy().sum(axis=0)
        np.testing.assert_allclose(grads[w].numpy(), e, rtol=1e-5, atol=1e-6)


def test_train_and_eval_set_the_mode_of_every_submodule() -> None:
    model = nn.Sequential(nn.Dropout(), nn.Sequential(nn.Dropout()))
    model.eval()
    assert [m.training for m in model.modules()] == [False, False, False, False]
    model.train()
    assert all(m.training for m in model.modules())


def test_load_state_dict_round_trips_and_keeps_parameter_identity() -> None:
    src, dst = nn.Linear(3, 2, generator=ember.Generator(0)), nn.Linear(3, 2)
    weight = dst.weight
    result = dst.load_state_dict(src.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert dst.weight is weight
    np.testing.assert_array_equal(dst.weight.numpy(), src.weight.numpy())


def test_load_state_dict_into_autodiff_module_keeps_it_trainable() -> None:
    src = nn.Linear(3, 2, generator=ember.Generator(0))
    dst = nn.Linear(3, 2).to(AD)
    dst.load_state_dict(src.state_dict())
    assert dst.weight.requires_grad and str(dst.weight.device) == AD
    np.testing.assert_array_equal(dst.weight.numpy(), src.weight.numpy())


def _snapshot(m: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.numpy().copy() for k, v in m.state_dict().items()}


def _unchanged(m: nn.Module, before: dict[str, np.ndarray]) -> bool:
    after = _snapshot(m)
    return before.keys() == after.keys() and all(
        np.array_equal(before[k], after[k]) for k in before)


def test_missing_key_names_key_and_both_values_and_changes_nothing() -> None:
    m = nn.Linear(3, 2)
    before = _snapshot(m)
    state = {"weight": ember.ones(2, 3)}
    with pytest.raises(RecordError, match=r"missing key 'bias': the module has float32 \[2\]"):
        m.load_state_dict(state)
    assert _unchanged(m, before)


def test_unexpected_key_is_an_error_when_strict_and_reported_when_not() -> None:
    m = nn.Linear(3, 2)
    state = {**nn.Linear(3, 2).state_dict(), "extra": ember.zeros(5)}
    with pytest.raises(RecordError, match=r"unexpected key 'extra': the state has float32 \[5\]"):
        m.load_state_dict(state)
    result = m.load_state_dict(state, strict=False)
    assert result.unexpected_keys == ["extra"]


def test_wrong_shape_names_both_shapes_and_changes_nothing() -> None:
    m = nn.Linear(3, 2)
    before = _snapshot(m)
    state = {"weight": ember.ones(3, 2), "bias": ember.ones(2)}
    with pytest.raises(RecordError, match=r"key 'weight': shape mismatch: the module has "
                                          r"float32 \[2, 3\], the state has float32 \[3, 2\]"):
        m.load_state_dict(state)
    assert _unchanged(m, before)


def test_wrong_dtype_is_an_error_unless_cast_is_asked_for() -> None:
    m = nn.Linear(3, 2)
    before = _snapshot(m)
    state = {"weight": ember.ones(2, 3, dtype=ember.float64), "bias": ember.ones(2)}
    with pytest.raises(RecordError, match=r"key 'weight': dtype mismatch: the module has "
                                          r"float32 \[2, 3\], the state has float64 \[2, 3\]"):
        m.load_state_dict(state)
    assert _unchanged(m, before)
    m.load_state_dict(state, cast=True)
    assert m.weight.dtype is ember.float32 and m.weight.tolist() == [[1.0] * 3] * 2


def test_assigning_a_module_before_super_init_is_a_clear_error() -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            self.fc = nn.Linear(1, 1)

    with pytest.raises(AttributeError, match="super"):
        Broken()


def test_replacing_a_parameter_value_keeps_it_registered() -> None:
    m = nn.Linear(2, 2)
    m.bias = ember.zeros(2)
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    with pytest.raises(TypeError, match="parameter 'bias'"):
        m.bias = 3  # type: ignore[assignment]  # the error under test
