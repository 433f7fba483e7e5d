"""Conv -> BatchNormalization -> Add -> Relu chains fused at import: the same values as
onnxruntime, the fused kernel really runs on the cpu, and on autodiff stacks the chain runs node
by node (gradients as torch computes them for the unfused model)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch_models as tm
from onnx_oracle import assert_close, graph_model, helper, reference

import ember
import ember.onnx
from ember.ops import composite as cops

torch = tm.torch
rng = np.random.default_rng(7)


def _chain_model(norm: bool, add: bool, relu: bool, stride: int, bias: bool) -> tuple[Any, dict]:
    c, o = 3, 5
    inits = {"w": rng.standard_normal((o, c, 3, 3)).astype(np.float32)}
    conv_in = ["x", "w"]
    if bias:
        inits["b"] = rng.standard_normal(o).astype(np.float32)
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["y0"], pads=[1, 1, 1, 1],
                              strides=[stride, stride])]
    last = "y0"
    if norm:
        inits.update({"s": rng.standard_normal(o).astype(np.float32),
                      "t": rng.standard_normal(o).astype(np.float32),
                      "m": rng.standard_normal(o).astype(np.float32),
                      "v": (rng.random(o) + 0.5).astype(np.float32)})
        nodes.append(helper.make_node("BatchNormalization", [last, "s", "t", "m", "v"], ["y1"],
                                      epsilon=1e-3))
        last = "y1"
    feeds = {"x": rng.standard_normal((2, c, 9, 9)).astype(np.float32)}
    if add:
        side = 9 // stride + (9 % stride > 0)
        feeds["r"] = rng.standard_normal((2, o, side, side)).astype(np.float32)
        nodes.append(helper.make_node("Add", ["r", last], ["y2"]))  # the conv on the right
        last = "y2"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["y3"]))
        last = "y3"
    return graph_model(nodes, feeds, [last], inits), feeds


CHAINS = [  # norm, add, relu, stride, bias
    (True, True, True, 1, False),
    (True, False, True, 2, True),
    (False, True, False, 2, True),
    (False, False, True, 1, True),
    (True, True, False, 1, True),
    (False, False, False, 2, True),  # a lone Conv with a bias
]


@pytest.mark.parametrize(("norm", "add", "relu", "stride", "bias"), CHAINS)
def test_a_fused_chain_matches_onnxruntime_and_runs_the_fused_kernel(
        norm: bool, add: bool, relu: bool, stride: int, bias: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _chain_model(norm, add, relu, stride, bias)
    m = ember.onnx.load(model, device="cpu")
    assert [n.op_type for n in m._nodes] == ["ember.FusedConv"]
    table = ember.device("cpu").backend.kernels
    kernel, calls = table[cops.fused_conv2d], []

    def spy(*args: Any, **params: Any) -> Any:
        calls.append(params)
        return kernel(*args, **params)

    monkeypatch.setitem(table, cops.fused_conv2d, spy)
    got = m(*[ember.tensor(v) for v in feeds.values()]).numpy()
    assert [(p["norm"], p["residual"], p["relu"], p["bias"]) for p in calls] == \
        [(norm, add, relu, bias)]
    assert_close(got, reference(model, feeds)[0], "fused chain")


def test_an_intermediate_read_elsewhere_or_returned_is_not_fused() -> None:
    nodes = [helper.make_node("Conv", ["x", "w"], ["y0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y0"], ["y1"]),
             helper.make_node("Conv", ["x", "w"], ["z0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["z0"], ["z1"]),
             helper.make_node("Add", ["z0", "z1"], ["z2"])]
    inits = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)}
    feeds = {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    model = graph_model(nodes, feeds, ["y0", "y1", "z2"], inits)
    m = ember.onnx.load(model)
    assert [n.op_type for n in m._nodes] == ["Conv", "Relu", "Conv", "Relu", "Add"]
    for got, want in zip(m(ember.tensor(feeds["x"])), reference(model, feeds), strict=True):
        assert_close(got.numpy(), want, "unfused")


class ConvBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: Any, r: Any) -> Any:
        return torch.relu(self.bn(self.conv(x)) + r)


def test_a_fused_chain_trains_as_the_unfused_graph_under_autodiff() -> None:
    torch.manual_seed(0)
    block = ConvBlock()
    with torch.no_grad():  # statistics that are not the identity
        block.bn.running_mean.uniform_(-1, 1)
        block.bn.running_var.uniform_(0.5, 2)
        block.bn.weight.uniform_(0.5, 2)
        block.bn.bias.uniform_(-1, 1)
    x, r = torch.randn(2, 3, 6, 6), torch.randn(2, 4, 6, 6)
    block.train()  # keep the batch norm in the graph (an eval export folds it into the conv)
    import io
    import warnings

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(block, (x, r), buf, dynamo=False, input_names=["x", "r"],
                          output_names=["out"], opset_version=17,
                          training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    block.eval()
    import onnx

    proto = onnx.load_from_string(buf.getvalue())
    for n in proto.graph.node:  # inference batch norm, as the importer supports
        if n.op_type == "BatchNormalization":
            del n.output[1:]
            for a in list(n.attribute):
                if a.name == "training_mode":
                    n.attribute.remove(a)
    dev = "autodiff<cpu>"
    m = ember.onnx.load(proto, device=dev)
    assert "ember.FusedConv" in [n.op_type for n in m._nodes]
    params = dict(m.named_parameters())
    ex = ember.tensor(x.numpy(), device=dev)
    er = ember.tensor(r.numpy(), device=dev)
    out = m(ex, er)
    weight = torch.randn(out.shape)
    grads = (out * ember.tensor(weight.numpy(), device=dev)).sum().backward()
    (block(x, r) * weight).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), block(x, r).detach().numpy(), rtol=1e-5,
                               atol=1e-5)
    for name, want in (("conv.weight", block.conv.weight.grad),
                       ("bn.weight", block.bn.weight.grad), ("bn.bias", block.bn.bias.grad)):
        np.testing.assert_allclose(grads[params[name]].numpy(), want.numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=name)
