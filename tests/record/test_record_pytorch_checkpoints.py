"""Checkpoints written by PyTorch (through safetensors) load into ember, and back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ember
from ember import nn, record

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


class TorchEncoder(torch.nn.Module):
    """A small classifier as a PyTorch user (or a Hugging Face port) would name it."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings = torch.nn.Embedding(20, 16)
        layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True,
                                                 norm_first=True, activation="gelu")
        self.encoder = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(16),
                                                   enable_nested_tensor=False)
        self.classifier = torch.nn.Linear(16, 5)

    def forward(self, ids: Any, pad: Any) -> Any:
        return self.classifier(self.encoder(self.embeddings(ids), src_key_padding_mask=pad))


class EmberEncoder(nn.Module):
    """The same network in ember, with its own names."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(20, 16)
        layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.blocks = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16))
        self.out = nn.Linear(16, 5)

    def forward(self, ids: ember.Tensor, pad: ember.Tensor) -> ember.Tensor:
        return self.out(self.blocks(self.tok(ids), src_key_padding_mask=pad))


RULES: list[record.Rule] = [
    *record.strip_prefix("model."),
    (r"^embeddings\.", "tok."),
    (r"^encoder\.", "blocks."),
    (r"^classifier\.", "out."),
    *record.HF_LAYER_NORM,
    (r"^pooler\.", None),  # a head this model does not have
]


def _torch_checkpoint(tmp_path: Path) -> tuple[Path, TorchEncoder]:
    torch.manual_seed(0)
    tmodel = TorchEncoder().eval()
    state = {f"model.{k}": v.contiguous() for k, v in tmodel.state_dict().items()}
    # an older port names the final LayerNorm's parameters gamma and beta
    state["model.encoder.norm.gamma"] = state.pop("model.encoder.norm.weight")
    state["model.encoder.norm.beta"] = state.pop("model.encoder.norm.bias")
    state["model.pooler.dense.weight"] = torch.zeros(3, 3)
    path = tmp_path / "encoder.safetensors"
    safetensors_torch.save_file(state, str(path), metadata={"format": "pt"})
    return path, tmodel


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    ids = np.random.default_rng(0).integers(0, 20, (3, 7)).astype(np.int64)
    pad = np.zeros((3, 7), dtype=bool)
    pad[1, 5:] = True
    pad[2, 3:] = True
    return ids, pad


def test_pytorch_transformer_checkpoint_loads_through_remapping_and_reproduces_outputs(
        tmp_path: Path) -> None:
    path, tmodel = _torch_checkpoint(tmp_path)
    model = EmberEncoder().eval()
    result = record.load(model, path, remap=RULES)
    assert result.missing_keys == [] and result.unexpected_keys == []
    ids, pad = _inputs()
    with torch.no_grad():
        ref = tmodel(torch.from_numpy(ids), torch.from_numpy(pad)).numpy()
    out = model(ember.tensor(ids), ember.tensor(pad)).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_without_remapping_the_error_lists_the_foreign_names(tmp_path: Path) -> None:
    path, _ = _torch_checkpoint(tmp_path)
    with pytest.raises(ember.RecordError) as info:
        record.load(EmberEncoder(), path)
    text = str(info.value)
    assert "missing key 'tok.weight'" in text
    assert "unexpected key 'model.embeddings.weight': the file has float32 [20, 16]" in text


def test_ember_checkpoint_loads_into_pytorch_with_the_same_names(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.Flatten(),
                          nn.Linear(12, 2)).eval()
    record.save(model, tmp_path / "m.safetensors")
    tmodel = torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3), torch.nn.BatchNorm2d(3),
                                 torch.nn.Flatten(), torch.nn.Linear(12, 2)).eval()
    tmodel.load_state_dict(safetensors_torch.load_file(str(tmp_path / "m.safetensors")))
    x = np.random.default_rng(1).standard_normal((2, 1, 4, 4)).astype(np.float32)
    with torch.no_grad():
        ref = tmodel(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(ember.tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-6)


def test_bfloat16_checkpoint_from_pytorch_loads_with_cast(tmp_path: Path) -> None:
    tfc = torch.nn.Linear(4, 3).to(torch.bfloat16)
    path = tmp_path / "bf16.safetensors"
    safetensors_torch.save_file(tfc.state_dict(), str(path))
    fc = nn.Linear(4, 3)
    with pytest.raises(ember.RecordError, match=r"dtype mismatch.*bfloat16"):
        record.load(fc, path)
    record.load(fc, path, cast=True)
    np.testing.assert_array_equal(fc.weight.numpy(), tfc.weight.float().detach().numpy())
