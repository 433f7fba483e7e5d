"""An imported model as a Module: fine-tuning under autodiff, records, compile, fusion, and
the errors of bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch_models as tm
from onnx_oracle import assert_close, graph_model, helper, onnx, reference
from threadpoolctl import threadpool_limits

import ember
import ember.onnx
from ember import nn, record

torch = tm.torch


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 4)

    def forward(self, x):  # type: ignore[no-untyped-def]  # a torch module
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.relu(self.conv2(x))
        return self.fc(x.flatten(1))


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    torch.manual_seed(0)
    data = tm.export(SmallCNN(), (torch.randn(1, 1, 8, 8),), ["x"], {"x": {0: "batch"}}, 17)
    path = tmp_path_factory.mktemp("onnx") / "cnn.onnx"
    path.write_bytes(data)
    return str(path)


def test_initializers_are_parameters_named_from_the_graph(cnn_path: str) -> None:
    m = ember.onnx.load(cnn_path)
    inits = {t.name for t in onnx.load(cnn_path).graph.initializer}
    names = set(dict(m.named_parameters()))
    # torch folds the batch norm into conv1 (a new name, made an attribute path: '::' -> '__')
    assert {"conv2.weight", "conv2.bias", "fc.weight", "fc.bias"} <= names
    assert names == {n.replace("::", "__") for n in inits}
    assert set(m.state_dict()) == names
    assert m.input_names == ["x"] and m.opset == 17


def test_batch_norm_statistics_are_buffers_and_constants_are_not_state() -> None:
    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
                 "v", 1, [1], [2.0])),
             helper.make_node("Mul", ["x", "c"], ["xc"]),
             helper.make_node("BatchNormalization", ["xc", "bn.weight", "bn.bias",
                                                     "bn.running_mean", "bn.running_var"],
                              ["y"])]
    inits = {k: np.ones(3, np.float32) for k in ("bn.weight", "bn.bias", "bn.running_mean",
                                                 "bn.running_var")}
    model = graph_model(nodes, {"x": np.ones((1, 3, 2, 2), np.float32)}, ["y"], inits)
    m = ember.onnx.load(model)
    assert set(dict(m.named_parameters())) == {"bn.weight", "bn.bias"}
    assert set(dict(m.named_buffers())) == {"bn.running_mean", "bn.running_var", "constants.c"}
    assert set(m.state_dict()) == {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}


def test_imported_cnn_fine_tunes_under_autodiff_and_round_trips_a_record(
        cnn_path: str, tmp_path: object) -> None:
    dev = "autodiff<cpu>"
    m = ember.onnx.load(cnn_path, device=dev)
    rng = np.random.default_rng(0)
    x = ember.tensor(rng.standard_normal((16, 1, 8, 8)).astype(np.float32), device=dev)
    y = ember.tensor(rng.integers(0, 4, 16), device=dev)
    opt = ember.optim.Adam(m.parameters(), lr=0.02)
    losses = []
    for _ in range(20):
        loss = nn.functional.cross_entropy(m(x), y)
        grads = loss.backward()
        opt.step(grads)
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    path = f"{tmp_path}/tuned.safetensors"
    record.save(m, path)
    # on the same stack and one thread (the cpu's GEMM splits follow idle cores), the same
    # kernels: identical
    with ember.no_grad(), threadpool_limits(1):
        want = m(x).numpy()
        again = ember.onnx.load(cnn_path, device=dev)
        before = again(x).numpy()
        record.load(again, path)
        got = again(x).numpy()
    assert not np.allclose(before, got)  # the record changed the weights
    np.testing.assert_array_equal(got, want)
    # on `cpu` the convolutions run fused (other GEMM calls, their roundings): equal to
    # float32 precision
    on_cpu = ember.onnx.load(cnn_path, device="cpu")
    record.load(on_cpu, path)
    np.testing.assert_allclose(on_cpu(x.detach().numpy()).numpy(), want, rtol=0,
                               atol=1e-5 * (1 + np.abs(want).max()))


def test_imported_model_runs_under_compile(device: str) -> None:
    torch.manual_seed(1)
    data = tm.export(tm.GPT2(layers=1), (torch.randint(0, 64, (1, 6)),), ["ids"],
                     {"ids": {0: "batch", 1: "seq"}}, 17)
    model = onnx.load_from_string(data)
    m = ember.onnx.load(model, device=device)
    step = ember.compile(lambda ids: m(ids))
    rng = np.random.default_rng(2)
    for s in (6, 6, 9, 6):  # replays, a retrace on the new length, a replay of the first
        ids = rng.integers(0, 64, (2, s)).astype(np.int64)
        got = step(ember.tensor(ids, device=device)).numpy()
        assert_close(got, reference(model, {"ids": ids})[0], f"compiled at seq {s}")
    assert step.stats.replays >= 2


def test_unsupported_ops_are_all_named_before_anything_is_built() -> None:
    # ember imports every operator of the default domain: these two are made up
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("Frobnicate", ["a"], ["b"], name="frob"),
             helper.make_node("Transmogrify", ["b"], ["y"], name="tm")]
    model = graph_model(nodes, {"x": np.zeros((2, 2), np.float32)}, ["y"], opset=20)
    with pytest.raises(ember.onnx.UnsupportedOperatorError) as err:
        ember.onnx.load(model)
    msg = str(err.value)
    for part in ("Frobnicate at node 'frob'", "Transmogrify at node 'tm'",
                 "opset 20",
                 "Supported ops: Abs", "Conv"):
        assert part in msg


def test_opset_outside_the_range_is_refused() -> None:
    model = graph_model([helper.make_node("Relu", ["x"], ["y"])],
                        {"x": np.zeros(2, np.float32)}, ["y"], opset=5)
    with pytest.raises(ValueError, match="opset 5; ember reads opsets 6-28"):
        ember.onnx.load(model)


def test_missing_and_broken_files_are_named(tmp_path: object) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.onnx"):
        ember.onnx.load(f"{tmp_path}/nope.onnx")
    bad = f"{tmp_path}/bad.onnx"
    with open(bad, "wb") as fh:
        fh.write(b"\x00\x01 not a protobuf")
    with pytest.raises(ValueError, match=r"bad\.onnx.*not a readable ONNX model"):
        ember.onnx.load(bad)


def test_inputs_are_checked_by_name_dtype_and_shape(cnn_path: str) -> None:
    m = ember.onnx.load(cnn_path)
    with pytest.raises(ValueError, match=r"input 'x': expected shape \[batch, 1, 8, 8\], got "
                                         r"\[2, 1, 9, 8\]"):
        m(ember.zeros((2, 1, 9, 8)))
    with pytest.raises(TypeError, match="expected dtype float32, got int64"):
        m(ember.zeros((2, 1, 8, 8), dtype=ember.int64))
    with pytest.raises(TypeError, match="has no input 'y'"):
        m(y=ember.zeros((2, 1, 8, 8)))
    out = m(x=ember.zeros((3, 1, 8, 8)))
    assert out.shape == (3, 4)


def test_a_failing_node_is_named_in_the_error() -> None:
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")]
    model = graph_model(nodes, {"x": np.zeros((2, 3), np.float32)}, ["y"],
                        inits={"s": np.array([4, -1], np.int64)}, dynamic={"x": ["a", "b"]})
    m = ember.onnx.load(model)
    with pytest.raises(ValueError, match="bad_reshape") as err:
        m(ember.zeros((2, 3)))
    assert "cannot reshape (2, 3) to [4, -1]" in str(err.value)


def test_several_outputs_come_back_as_a_tuple() -> None:
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=0),
             helper.make_node("Neg", ["b"], ["c"])]
    model = graph_model(nodes, {"x": np.arange(4, dtype=np.float32)}, ["a", "c"], opset=13)
    a, c = ember.onnx.load(model)(ember.tensor(np.arange(4, dtype=np.float32)))
    assert a.tolist() == [0.0, 1.0] and c.tolist() == [-2.0, -3.0]


def test_float_initializers_that_only_feed_masks_are_buffers() -> None:
    torch.manual_seed(2)
    data = tm.export(tm.GPT2(layers=1), (torch.randint(0, 64, (1, 6)),), ["ids"],
                     {"ids": {0: "batch", 1: "seq"}}, 17)
    m = ember.onnx.load(onnx.load_from_string(data), device="autodiff<cpu>")
    assert "h.0.attn.bias" in dict(m.named_buffers())  # the causal mask, compared with 0
    out = m(ember.tensor(np.arange(12).reshape(2, 6) % 64, device="autodiff<cpu>"))
    grads = out.logsumexp(-1).mean().backward()
    for name, p in m.named_parameters():
        assert float(abs(grads[p]).sum().item()) > 0, name  # every parameter gets a gradient


def test_without_the_onnx_package_the_error_names_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "onnx", None)  # import onnx fails
    with pytest.raises(ImportError, match=r"pip install 'ember\[onnx\]'"):
        ember.onnx.load("model.onnx")
