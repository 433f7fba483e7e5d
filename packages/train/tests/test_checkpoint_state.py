"""Nested training state through safetensors files, and atomic writes."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

import ember
from ember_train._state import atomic_write_bytes, load_state, save_state


def test_nested_state_round_trips_bit_exactly(tmp_path):
    w = ember.randn(3, 4, generator=ember.Generator(0))
    state = {
        "state": {0: {"step": 7, "exp_avg": w * 3, "flag": True}, 1: {"step": 2}},
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1], "name": None}],
        "counts": ember.tensor([1, 2, 3]),
        "raw": np.arange(5, dtype=np.uint8),
        "nan": float("nan"),
    }
    save_state(tmp_path / "s.safetensors", state)
    back = load_state(tmp_path / "s.safetensors")
    assert set(back["state"]) == {0, 1}  # int keys stay ints
    assert back["state"][0]["step"] == 7 and back["state"][0]["flag"] is True
    assert back["param_groups"][0]["betas"] == (0.9, 0.999)  # tuples stay tuples
    assert back["param_groups"][0]["name"] is None
    got, want = back["state"][0]["exp_avg"], w * 3
    assert got.dtype is ember.float32 and got.device is want.device
    assert got.numpy().tobytes() == want.numpy().tobytes()
    assert back["counts"].dtype is ember.int64 and back["counts"].tolist() == [1, 2, 3]
    assert back["raw"].dtype == np.uint8 and back["raw"].tolist() == [0, 1, 2, 3, 4]
    assert np.isnan(back["nan"])


def test_bfloat16_tensors_keep_their_bits(tmp_path):
    t = ember.tensor(np.array([1.5, -2.25, 3e38], dtype=ml_dtypes.bfloat16))
    save_state(tmp_path / "b.safetensors", {"t": t})
    back = load_state(tmp_path / "b.safetensors")["t"]
    assert back.dtype is ember.bfloat16
    assert back.numpy().tobytes() == t.numpy().tobytes()


def test_flat_state_dict_is_a_plain_safetensors_file(tmp_path):
    from safetensors.numpy import load_file

    w = ember.ones(2, 3)
    save_state(tmp_path / "m.safetensors", {"layer.weight": w, "layer.bias": ember.zeros(2)})
    plain = load_file(tmp_path / "m.safetensors")  # what PyTorch or any reader sees
    assert sorted(plain) == ["layer.bias", "layer.weight"]
    assert plain["layer.weight"].shape == (2, 3)


def test_a_file_without_skeleton_loads_as_a_flat_dict(tmp_path):
    from safetensors.numpy import save_file

    save_file({"a": np.ones(3, np.float32)}, tmp_path / "plain.safetensors")
    back = load_state(tmp_path / "plain.safetensors")
    assert list(back) == ["a"] and back["a"].tolist() == [1.0, 1.0, 1.0]


def test_unsupported_values_name_their_path(tmp_path):
    with pytest.raises(TypeError, match=r"state\.0\.fn"):
        save_state(tmp_path / "x.safetensors", {"state": [{"fn": object()}]})


def test_skeleton_is_readable_json(tmp_path):
    from safetensors import safe_open

    save_state(tmp_path / "s.safetensors", {"epoch": 3})
    with safe_open(str(tmp_path / "s.safetensors"), framework="numpy") as f:
        skeleton = json.loads(f.metadata()["ember_train.state"])
    assert skeleton == {"dict": {"epoch": {"v": 3}}}


def test_failed_atomic_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "f.bin"
    atomic_write_bytes(path, b"old")
    with pytest.raises(TypeError):
        atomic_write_bytes(path, "not bytes")  # type: ignore[arg-type]  # write() rejects str
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]  # no temporary file left
