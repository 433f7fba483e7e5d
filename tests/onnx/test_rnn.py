"""RNN, GRU and LSTM against onnxruntime, and their weights train under autodiff."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx_oracle import check, helper, numpy_helper

import ember
import ember.onnx

RNG = np.random.default_rng(5)
COVERED = {"RNN", "GRU", "LSTM"}


def f(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.5).astype(np.float32)


def _model(op: str, inputs: list[str], feeds: dict[str, np.ndarray],
           inits: dict[str, np.ndarray], outputs: int, **attrs: Any) -> Any:
    node = helper.make_node(op, inputs, [f"y{k}" for k in range(outputs)], **attrs)
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                         list(v.shape)) for k, v in feeds.items()]
    outs = [helper.make_empty_tensor_value_info(f"y{k}") for k in range(outputs)]
    g = helper.make_graph([node], "g", ins, outs,
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


def test_lstm_bidirectional_lengths_states_peepholes(device: str) -> None:
    t, n, i, h = 5, 3, 4, 6
    feeds = {"x": f(t, n, i), "h0": f(2, n, h), "c0": f(2, n, h)}
    inits = {"w": f(2, 4 * h, i), "r": f(2, 4 * h, h), "b": f(2, 8 * h),
             "lens": np.array([5, 2, 0], np.int32), "p": f(2, 3 * h)}
    model = _model("LSTM", ["x", "w", "r", "b", "lens", "h0", "c0", "p"], feeds, inits, 3,
                   hidden_size=h, direction="bidirectional")
    check(model, feeds, device)


def test_lstm_clip_input_forget(device: str) -> None:
    # (layout=1 is covered by the backend suite: onnxruntime refuses it)
    t, n, i, h = 4, 2, 3, 5
    feeds = {"x": f(t, n, i)}
    inits = {"w": f(1, 4 * h, i) * 3, "r": f(1, 4 * h, h) * 3}
    model = _model("LSTM", ["x", "w", "r"], feeds, inits, 3, hidden_size=h,
                   clip=0.7, input_forget=1)
    check(model, feeds, device)


def test_gru_linear_before_reset_reverse_activations(device: str) -> None:
    t, n, i, h = 4, 2, 3, 5
    feeds = {"x": f(t, n, i), "h0": f(1, n, h)}
    inits = {"w": f(1, 3 * h, i), "r": f(1, 3 * h, h), "b": f(1, 6 * h)}
    model = _model("GRU", ["x", "w", "r", "b", "", "h0"], feeds, inits, 2, hidden_size=h,
                   direction="reverse", linear_before_reset=1,
                   activations=["HardSigmoid", "LeakyRelu"], activation_alpha=[0.3, 0.1],
                   activation_beta=[0.4])
    check(model, feeds, device)


def test_rnn_relu_bidirectional_lengths(device: str) -> None:
    t, n, i, h = 3, 3, 2, 4
    feeds = {"x": f(t, n, i)}
    inits = {"w": f(2, h, i), "r": f(2, h, h), "b": f(2, 2 * h),
             "lens": np.array([1, 3, 2], np.int32)}
    model = _model("RNN", ["x", "w", "r", "b", "lens"], feeds, inits, 2, hidden_size=h,
                   direction="bidirectional", activations=["Relu", "Tanh"])
    check(model, feeds, device)


@pytest.mark.parametrize("op,gates,attrs,states", [
    ("LSTM", 4, {"direction": "bidirectional"}, 2),
    ("GRU", 3, {"linear_before_reset": 1, "direction": "bidirectional"}, 1),
    ("RNN", 1, {"activations": ["Relu"]}, 1)])
def test_layers_pytorch_defines_import_as_nn_modules(device: str, op: str, gates: int,
                                                     attrs: dict[str, Any],
                                                     states: int) -> None:
    t, n, i, h = 4, 3, 2, 5
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    feeds = {"x": f(t, n, i), "h0": f(dirs, n, h), "c0": f(dirs, n, h)}
    if states == 1:
        del feeds["c0"]
    inits = {"w": f(dirs, gates * h, i), "r": f(dirs, gates * h, h),
             "b": f(dirs, 2 * gates * h)}
    names = ["x", "w", "r", "b", "", "h0"] + (["c0"] if states == 2 else [])
    model = _model(op, names, feeds, inits, 3 if op == "LSTM" else 2, hidden_size=h, **attrs)
    m = ember.onnx.load(model, device=device)
    layer = getattr(m, f"{op}_0")
    assert isinstance(layer, getattr(ember.nn, op))
    assert not any(name in ("w", "r", "b") for name, _ in m.named_parameters())
    check(model, feeds, device)


def test_imported_lstm_trains_as_nn_lstm() -> None:
    t, n, i, h = 3, 2, 3, 4
    feeds = {"x": f(t, n, i)}
    inits = {"w": f(1, 4 * h, i), "r": f(1, 4 * h, h), "b": f(1, 8 * h)}
    model = _model("LSTM", ["x", "w", "r", "b"], feeds, inits, 1, hidden_size=h)
    m = ember.onnx.load(model, device="autodiff<cpu>")
    assert sorted(name for name, _ in m.named_parameters()) == [
        "LSTM_0.bias_hh_l0", "LSTM_0.bias_ih_l0", "LSTM_0.weight_hh_l0",
        "LSTM_0.weight_ih_l0"]
    x = ember.tensor(feeds["x"], device="autodiff<cpu>")
    grads = (m(x) ** 2).sum().backward()
    w = m.LSTM_0.weight_ih_l0
    # finite differences on one input-gate weight (gate i leads in ONNX's and PyTorch's
    # orders), in float64 arithmetic through the general (composite) rule: clip=1e9
    eps, k = 1e-3, (0, 2, 1)  # row 2 of 4: gate i

    def loss(wv: np.ndarray) -> float:
        mod = _model("LSTM", ["x", "w", "r", "b"], feeds, {**inits, "w": wv}, 1,
                     hidden_size=h, clip=1e9)
        return float((ember.onnx.load(mod)(ember.tensor(feeds["x"])).numpy()
                      .astype(np.float64) ** 2).sum())

    up, down = inits["w"].copy(), inits["w"].copy()
    up[k] += eps
    down[k] -= eps
    fd = (loss(up) - loss(down)) / (2 * eps)
    assert abs(float(grads[w].numpy()[k[1:]]) - fd) < 2e-2 * (1 + abs(fd))


def test_attributes_pytorch_lacks_keep_the_graph_parameters() -> None:
    t, n, i, h = 3, 2, 3, 4
    feeds = {"x": f(t, n, i)}
    inits = {"w": f(1, 4 * h, i), "r": f(1, 4 * h, h)}
    model = _model("LSTM", ["x", "w", "r"], feeds, inits, 1, hidden_size=h, clip=3.0)
    m = ember.onnx.load(model)
    assert sorted(name for name, _ in m.named_parameters()) == ["r", "w"]


@pytest.mark.parametrize("op,gates,attrs", [
    ("LSTM", 4, {"direction": "bidirectional"}),
    ("GRU", 3, {"linear_before_reset": 1})])
def test_imported_layer_exports_back_unrolled(tmp_path: Any, op: str, gates: int,
                                              attrs: dict[str, Any]) -> None:
    from onnx_oracle import ort

    t, n, i, h = 3, 2, 3, 4
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    feeds = {"x": f(t, n, i)}
    inits = {"w": f(dirs, gates * h, i), "r": f(dirs, gates * h, h),
             "b": f(dirs, 2 * gates * h)}
    m = ember.onnx.load(_model(op, ["x", "w", "r", "b"], feeds, inits, 2, hidden_size=h,
                               **attrs))
    assert isinstance(getattr(m, f"{op}_0"), getattr(ember.nn, op))
    path = str(tmp_path / "back.onnx")
    x = ember.tensor(feeds["x"])
    ember.onnx.export(m, x, path)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input": feeds["x"]})
    for got, want in zip(m(x), ref, strict=True):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
