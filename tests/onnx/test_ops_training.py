"""Training-mode Dropout and BatchNormalization, scatter reductions with repeated indices,
GatherND batch_dims and MaxPool's Indices, against onnxruntime (Dropout's seeded mask
against the ONNX reference's definition)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_oracle import check, graph_model, helper
from test_ops import Case, K, f, ix

import ember
import ember.onnx

RNG = np.random.default_rng(7)

CASES = [
    Case("BatchNormalization-training", "BatchNormalization",
         [f(3, 4, 2, 2), K(f(4)), K(f(4)), K(f(4)), K(f(4, lo=0.5, hi=2.0))],
         {"training_mode": 1, "momentum": 0.8}, outputs=3, opset=15),
    Case("ScatterND-mul-repeated", "ScatterND",
         [f(4, 3), K(ix([[1], [3], [1]])), f(3, 3)], {"reduction": "mul"}, opset=16),
    Case("ScatterND-max-repeated", "ScatterND",
         [f(4, 3), K(ix([[1, 2], [0, 0], [1, 2]])), f(3)], {"reduction": "max"}, opset=18),
    Case("ScatterElements-min-repeated", "ScatterElements",
         [f(3, 4), K(ix([[1, 1], [0, 3], [2, 2]])), f(3, 2)],
         {"axis": 1, "reduction": "min"}, opset=18),
    Case("GatherND-batch-dims", "GatherND",
         [f(2, 3, 4, 5), K(ix([[[1, 2], [0, 3]], [[2, 0], [-1, 1]]]))], {"batch_dims": 1},
         opset=13),
    Case("MaxPool-indices-pads", "MaxPool", [f(2, 3, 6, 5)],
         {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 1]}, outputs=2),
    Case("MaxPool-indices-column-major", "MaxPool", [f(1, 2, 5, 5)],
         {"kernel_shape": [2, 2], "storage_order": 1}, outputs=2),
    Case("Dropout-training-zero-ratio", "Dropout",
         [f(3, 4), K(np.array(0.0, np.float32)), K(np.array(True))], outputs=2, opset=13),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_matches_onnxruntime(case: Case, device: str) -> None:
    model, feeds = case.model()
    check(model, feeds, device)


def test_seeded_training_dropout_draws_the_reference_mask() -> None:
    x = f(4, 5)
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"], seed=3)
    model = graph_model([node], {"x": x}, ["y", "m"],
                        {"r": np.array(0.4, np.float32), "t": np.array(True)}, 13)
    y, m = ember.onnx.load(model)(ember.tensor(x))
    keep = np.random.RandomState(3).uniform(0.0, 1.0, x.shape) >= 0.4
    np.testing.assert_array_equal(m.numpy(), keep)
    np.testing.assert_allclose(y.numpy(), keep * x / np.float32(0.6), rtol=1e-6)


def test_unseeded_training_dropout_keeps_about_one_minus_ratio() -> None:
    x = np.ones((200, 50), np.float32)
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y"])
    model = graph_model([node], {"x": x}, ["y"],
                        {"r": np.array(0.25, np.float32), "t": np.array(True)}, 13)
    y = ember.onnx.load(model)(ember.tensor(x)).numpy()
    assert set(np.unique(y).tolist()) <= {0.0, np.float32(1 / 0.75)}
    assert abs((y > 0).mean() - 0.75) < 0.02  # 10,000 draws: 4.6 standard deviations


def test_scatter_reduction_index_out_of_range_is_refused() -> None:
    case = Case("bad", "ScatterElements", [f(3, 4), K(ix([[0, 4]])), f(1, 2)],
                {"axis": 1, "reduction": "max"}, opset=18)
    model, feeds = case.model()
    with pytest.raises(IndexError, match="out of range for axis 1 of size 4"):
        ember.onnx.load(model)(**{k: ember.tensor(v) for k, v in feeds.items()})


def test_gather_nd_component_out_of_range_is_refused() -> None:
    case = Case("bad", "GatherND", [f(3, 4), ix([[0, 4]])], opset=13)
    model, feeds = case.model()
    with pytest.raises(IndexError, match="data axis 1 is out of range for size 4"):
        ember.onnx.load(model)(**{k: ember.tensor(v) for k, v in feeds.items()})
