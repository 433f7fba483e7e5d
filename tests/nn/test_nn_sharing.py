"""Parameter sharing (weight tying) through every Module operation, against PyTorch.

``lm_head.weight = wte.weight`` makes one parameter reachable under two paths. PyTorch lists it
once in ``parameters()``, saves it under both paths, and keeps it one tensor through ``to``,
dtype casts, ``requires_grad_`` and ``load_state_dict``; ember must do the same, and keep it
through record files and ``ember.compile``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ember
from ember import nn, optim
from ember.nn import functional as F

torch = pytest.importorskip("torch")

AD = "autodiff<cpu>"
V, D = 7, 4


class Tied(nn.Module):
    """A token embedding whose matrix is also the output layer (GPT-2's tied ``lm_head``)."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.ln = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: ember.Tensor) -> ember.Tensor:
        return self.lm_head(self.ln(self.wte(idx)))


class TorchTied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(V, D)
        self.ln = torch.nn.LayerNorm(D)
        self.lm_head = torch.nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: Any) -> Any:
        return self.lm_head(self.ln(self.wte(idx)))


def _tied(model: Any) -> bool:
    return model.lm_head.weight is model.wte.weight


def _torch_like(model: Tied) -> Any:
    """A TorchTied holding ``model``'s values."""
    ref = TorchTied().double()
    ref.load_state_dict({k: torch.tensor(v.numpy().astype(np.float64))
                         for k, v in model.state_dict().items()})
    return ref


def test_listings_match_pytorch_for_a_tied_weight_and_a_shared_module() -> None:
    def build(lib: Any) -> Any:
        emb, head, act = lib.Embedding(V, D), lib.Linear(D, V, bias=False), lib.ReLU()
        head.weight = emb.weight
        return lib.Sequential(emb, act, head, act)

    ours, ref = build(nn), build(torch.nn)
    for method, kwargs in [("named_parameters", {}),
                           ("named_parameters", {"remove_duplicate": False}),
                           ("named_modules", {}),
                           ("named_modules", {"remove_duplicate": False})]:
        got = [n for n, _ in getattr(ours, method)(**kwargs)]
        want = [n for n, _ in getattr(ref, method)(**kwargs)]
        assert got == want, (method, kwargs)
    assert list(ours.state_dict()) == list(ref.state_dict()) == ["0.weight", "2.weight"]
    assert len(list(ours.parameters())) == len(list(ref.parameters())) == 1
    assert ours.num_params() == sum(p.numel() for p in ref.parameters()) == V * D


def test_shared_buffer_is_listed_once_as_pytorch() -> None:
    ours, ref = nn.Module(), torch.nn.Module()
    ours.a, ours.b = nn.Module(), nn.Module()
    ref.a, ref.b = torch.nn.Module(), torch.nn.Module()
    mask, tmask = ember.ones(3), torch.ones(3)
    for m, t in [(ours.a, mask), (ours.b, mask)]:
        m.register_buffer("mask", t)
    for m, t in [(ref.a, tmask), (ref.b, tmask)]:
        m.register_buffer("mask", t)
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in ref.named_buffers()]
    assert ([n for n, _ in ours.named_buffers(remove_duplicate=False)]
            == [n for n, _ in ref.named_buffers(remove_duplicate=False)] == ["a.mask", "b.mask"])


CASTS: dict[str, tuple[Callable[[Any], Any], Any, Any]] = {
    "half": (lambda m: m.half(), ember.float16, torch.float16),
    "bfloat16": (lambda m: m.bfloat16(), ember.bfloat16, torch.bfloat16),
    "double": (lambda m: m.double(), ember.float64, torch.float64),
    "float": (lambda m: m.double().float(), ember.float32, torch.float32),
    "to(dtype)": (lambda m: m.to(dtype=ember.float64 if isinstance(m, nn.Module)
                                 else torch.float64), ember.float64, torch.float64),
    "to(device, dtype)": (lambda m: m.to(AD, ember.float64) if isinstance(m, nn.Module)
                          else m.to("cpu", torch.float64), ember.float64, torch.float64),
}


@pytest.mark.parametrize("cast", list(CASTS))
def test_dtype_casts_keep_a_tied_weight_one_parameter(cast: str) -> None:
    fn, ours_dtype, ref_dtype = CASTS[cast]
    model, ref = Tied(), TorchTied()
    before = model.wte.weight.numpy().astype(np.float64)
    fn(model), fn(ref)
    assert _tied(ref) and ref.wte.weight.dtype == ref_dtype  # the oracle's behaviour
    assert _tied(model) and model.wte.weight.dtype is ours_dtype
    assert len(list(model.parameters())) == len(list(ref.parameters())) == 3
    tol = 1e-2 if ours_dtype in (ember.float16, ember.bfloat16) else 1e-6
    np.testing.assert_allclose(model.wte.weight.numpy().astype(np.float64), before, rtol=tol)


@pytest.mark.parametrize("op", ["requires_grad_(False)", "freeze+unfreeze"])
def test_freezing_keeps_a_tied_weight_one_parameter(op: str) -> None:
    model = Tied().to(AD)
    if op == "freeze+unfreeze":
        model.freeze()
        assert _tied(model) and not model.wte.weight.requires_grad
        model.unfreeze()
        assert model.wte.weight.requires_grad
    else:
        model.requires_grad_(False)
        assert not model.lm_head.weight.requires_grad
    assert _tied(model)
    trainable = list(model.trainable_parameters())
    assert len(trainable) == (0 if op == "requires_grad_(False)" else 3)


def test_load_state_dict_of_a_tied_model_keeps_the_tie_and_its_values() -> None:
    src, dst = Tied(), Tied().to(AD)
    weight = dst.wte.weight
    dst.load_state_dict(src.state_dict())
    assert _tied(dst) and dst.wte.weight is weight  # identity kept: optimizers keep working
    np.testing.assert_array_equal(dst.lm_head.weight.numpy(), src.wte.weight.numpy())


def test_load_state_dict_with_different_values_under_both_names_ends_as_pytorch() -> None:
    """Both paths of a tied weight are loaded in state-dict order: the last one wins in PyTorch,
    and the parameter stays one tensor."""
    model, ref = Tied().double(), TorchTied().double()
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    rng = np.random.default_rng(0)
    state["wte.weight"] = rng.standard_normal((V, D))
    state["lm_head.weight"] = rng.standard_normal((V, D))
    model.load_state_dict({k: ember.tensor(v) for k, v in state.items()})
    ref.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    assert _tied(ref) and _tied(model)
    np.testing.assert_array_equal(model.wte.weight.numpy(), ref.wte.weight.detach().numpy())


def test_load_state_dict_with_only_one_name_of_a_tied_weight_fills_both_as_pytorch() -> None:
    """Checkpoints that leave out the tied ``lm_head.weight`` (as many do) load with
    ``strict=False``, reporting the missing key; the tie gives the head the embedding's values."""
    src, model, ref = Tied(), Tied(), TorchTied()
    state = {k: v for k, v in src.state_dict().items() if k != "lm_head.weight"}
    result = model.load_state_dict(state, strict=False)
    ref_result = ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in state.items()},
                                     strict=False)
    assert result.missing_keys == ref_result.missing_keys == ["lm_head.weight"]
    assert _tied(model)
    np.testing.assert_array_equal(model.lm_head.weight.numpy(), src.wte.weight.numpy())
    with pytest.raises(ember.RecordError, match=r"missing key 'lm_head\.weight'"):
        Tied().load_state_dict(state)


def test_record_round_trip_keeps_a_tied_weight(tmp_path: Path) -> None:
    src = Tied().to(AD)
    path = tmp_path / "tied.safetensors"
    ember.record.save(src, path)
    tensors, _ = ember.record.load_tensors(path)
    assert sorted(tensors) == sorted(src.state_dict())  # saved under both names, as PyTorch
    dst = Tied().to(AD)
    weight = dst.wte.weight
    ember.record.load(dst, path)
    assert _tied(dst) and dst.wte.weight is weight
    np.testing.assert_array_equal(dst.lm_head.weight.numpy(), src.wte.weight.numpy())
    half = Tied().half()
    ember.record.load(half, path, cast=True)
    assert _tied(half) and half.wte.weight.dtype is ember.float16


def test_compiled_training_of_a_tied_model_keeps_the_tie_and_matches_pytorch() -> None:
    """SGD steps through ``ember.compile`` (traced once, then replayed) give PyTorch's losses
    on the same weights, update the shared matrix once per step with the sum of both uses'
    gradients, and leave ``lm_head.weight is wte.weight``."""
    model = Tied().double().to(AD)
    ref = _torch_like(model)
    opt = optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    assert len(opt.param_groups[0]["params"]) == 3

    @ember.compile
    def step(x: ember.Tensor, y: ember.Tensor) -> ember.Tensor:
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        opt.step(loss.backward())
        return loss

    rng = np.random.default_rng(1)
    for _ in range(4):
        x, y = rng.integers(0, V, (2, 5)), rng.integers(0, V, (2, 5))
        loss = step(ember.tensor(x, device=AD), ember.tensor(y, device=AD))
        ref_opt.zero_grad()
        ref_loss = torch.nn.functional.cross_entropy(
            ref(torch.tensor(x)).reshape(-1, V), torch.tensor(y).reshape(-1))
        ref_loss.backward()
        ref_opt.step()
        np.testing.assert_allclose(loss.item(), ref_loss.item(), rtol=1e-10)
    assert step.stats.replays >= 2
    assert _tied(model)
    np.testing.assert_allclose(model.wte.weight.numpy(), ref.wte.weight.detach().numpy(),
                               rtol=1e-10, atol=1e-12)
