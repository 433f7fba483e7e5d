"""Every supported operator, in a one-node graph built with onnx.helper, against onnxruntime:
shapes, broadcasting, attributes, optional inputs, dynamic dims."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from onnx_oracle import check, graph_model, helper

import ember.onnx

RNG = np.random.default_rng(0)


def f(*shape: int, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    if lo is not None:
        return RNG.uniform(lo, hi, shape).astype(np.float32)
    return RNG.standard_normal(shape).astype(np.float32)


def i64(*values: Any) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def ix(nested: Any) -> np.ndarray:
    """An int64 array of a nested list."""
    return np.array(nested, dtype=np.int64)


@dataclass
class K:
    """An argument given as an initializer (a constant) instead of a graph input."""

    value: Any


@dataclass
class Case:
    id: str
    op: str
    args: list[Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    outputs: int = 1
    opset: int = 17
    dynamic: dict[int, list[Any]] = field(default_factory=dict)

    def model(self) -> tuple[Any, dict[str, np.ndarray]]:
        names, feeds, inits, dyn = [], {}, {}, {}
        for i, a in enumerate(self.args):
            if a is None:
                names.append("")
                continue
            name = f"a{i}"
            names.append(name)
            if isinstance(a, K):
                inits[name] = np.asarray(a.value)
            else:
                feeds[name] = a
                if i in self.dynamic:
                    dyn[name] = self.dynamic[i]
        outs = [f"y{j}" for j in range(self.outputs)]
        node = helper.make_node(self.op, names, outs, name=f"{self.op}_node", **self.attrs)
        return graph_model([node], feeds, outs, inits, self.opset, dyn), feeds


X = f(2, 3, 4)
POS = f(2, 3, 4, lo=0.1, hi=3.0)
UNIT = f(2, 3, 4, lo=-0.9, hi=0.9)
EDGES = np.array([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], [np.inf, -np.inf, np.nan, 0.0, -0.0, 3.7]],
                 np.float32)
IMG = f(2, 3, 7, 7)
B1 = RNG.random((3, 4)) > 0.5
B2 = RNG.random((3, 4)) > 0.5
INTS = i64(-7, -3, 0, 3, 7, 9)

CASES: list[Case] = []
for _op, _x in [("Abs", X), ("Neg", X), ("Exp", X), ("Log", POS), ("Sqrt", POS),
                ("Reciprocal", POS), ("Sin", X), ("Cos", X), ("Tan", UNIT), ("Tanh", X),
                ("Asin", UNIT), ("Acos", UNIT), ("Atan", X), ("Sinh", X), ("Cosh", X),
                ("Sigmoid", X), ("Erf", X), ("Floor", EDGES), ("Ceil", EDGES),
                ("Round", EDGES), ("Sign", X), ("Relu", X), ("Identity", X), ("Softplus", X),
                ("Softsign", X), ("Mish", X), ("HardSwish", X), ("Elu", X), ("Selu", X),
                ("Celu", X), ("ThresholdedRelu", X), ("IsNaN", EDGES), ("IsInf", EDGES)]:
    CASES.append(Case(_op, _op, [_x], opset=18 if _op == "Mish" else 17))
CASES += [
    Case("Not", "Not", [B1]),
    Case("IsInf-positive-only", "IsInf", [EDGES], {"detect_negative": 0}),
    Case("HardSigmoid-attrs", "HardSigmoid", [X], {"alpha": 0.3, "beta": 0.4}),
    Case("LeakyRelu-alpha", "LeakyRelu", [X], {"alpha": 0.2}),
    Case("Elu-alpha", "Elu", [X], {"alpha": 0.5}),
    Case("Gelu", "Gelu", [X], opset=20),
    Case("Gelu-tanh", "Gelu", [X], {"approximate": "tanh"}, opset=20),
    Case("PRelu-broadcast", "PRelu", [IMG, K(f(3, 1, 1))]),
    Case("Clip", "Clip", [X, K(np.float32(-0.5)), K(np.float32(0.7))]),
    Case("Clip-max-only", "Clip", [X, None, K(np.float32(0.3))]),
    Case("Clip-none", "Clip", [X]),
    Case("Dropout-inference", "Dropout", [X], opset=13),
    # binary, broadcasting
    Case("Add-broadcast", "Add", [X, f(4)]),
    Case("Sub-broadcast-both", "Sub", [f(2, 1, 4), f(3, 1)]),
    Case("Mul-scalar-const", "Mul", [X, K(np.float32(1.5))]),
    Case("Div", "Div", [X, POS]),
    Case("Div-int-truncates", "Div", [INTS, i64(2, 2, 2, -2, -2, 4)]),
    Case("Pow-square", "Pow", [X, K(np.float32(2.0))]),
    Case("Pow-tensor", "Pow", [POS, X]),
    Case("Pow-int-exponent", "Pow", [X, K(np.int64(3))]),
    Case("Mod-int", "Mod", [INTS, i64(3, 3, 3, -3, -3, 4)]),
    Case("Mod-fmod", "Mod", [X, POS], {"fmod": 1}),
    Case("Equal", "Equal", [INTS, i64(-7, 3, 0, 1, 7, 2)]),
    Case("Less", "Less", [X, f(4)]), Case("Greater", "Greater", [X, f(3, 1)]),
    Case("LessOrEqual", "LessOrEqual", [INTS, i64(0)]),
    Case("GreaterOrEqual", "GreaterOrEqual", [INTS, i64(3)]),
    Case("And", "And", [B1, B2]), Case("Or", "Or", [B1, B2]), Case("Xor", "Xor", [B1, B2]),
    Case("Max-variadic", "Max", [X, f(4), f(3, 1)]),
    Case("Min-variadic", "Min", [X, f(4), f(3, 1)]),
    Case("Sum-variadic", "Sum", [X, f(4), f(3, 1)]),
    Case("Mean-variadic", "Mean", [X, f(4), f(3, 1)]),
    Case("Where-broadcast", "Where", [RNG.random((3, 1)) > 0.5, X, f(4)]),
    Case("Cast-float-to-int", "Cast", [EDGES[:1]], {"to": 7}),
    Case("Cast-int-to-float", "Cast", [INTS], {"to": 1}),
    Case("Cast-to-bool", "Cast", [INTS], {"to": 9}),
    Case("CastLike", "CastLike", [INTS, K(np.zeros(1, np.float32))]),
    # linear algebra
    Case("MatMul", "MatMul", [X, f(4, 5)]),
    Case("MatMul-batched-broadcast", "MatMul", [f(2, 1, 3, 4), f(3, 4, 2)]),
    Case("MatMul-vector", "MatMul", [f(4), f(2, 4, 5)]),
    Case("MatMul-dynamic-batch", "MatMul", [f(5, 4), K(f(4, 3))], dynamic={0: ["n", 4]}),
    Case("Gemm-transB-bias", "Gemm", [f(3, 4), K(f(5, 4)), K(f(5))], {"transB": 1}),
    Case("Gemm-transA-alpha-beta", "Gemm", [f(4, 3), f(4, 5), f(3, 5)],
         {"transA": 1, "alpha": 0.5, "beta": 2.0}),
    Case("Gemm-no-bias", "Gemm", [f(3, 4), f(4, 5)]),
    Case("Einsum", "Einsum", [f(2, 3, 4), f(2, 4, 5)], {"equation": "bij,bjk->bik"}),
    # convolution and pooling
    Case("Conv-bias-pads", "Conv", [IMG, K(f(4, 3, 3, 3)), K(f(4))], {"pads": [1, 1, 1, 1]}),
    Case("Conv-stride-dilation", "Conv", [IMG, K(f(4, 3, 3, 3))],
         {"strides": [2, 2], "dilations": [2, 1]}),
    Case("Conv-depthwise", "Conv", [IMG, K(f(3, 1, 3, 3))], {"group": 3, "pads": [1] * 4}),
    Case("Conv-asymmetric-pads", "Conv", [IMG, K(f(2, 3, 2, 2))], {"pads": [0, 1, 1, 0]}),
    Case("Conv-same-upper", "Conv", [IMG, K(f(2, 3, 3, 3))],
         {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    Case("Conv-same-lower", "Conv", [IMG, K(f(2, 3, 4, 4))], {"auto_pad": "SAME_LOWER"}),
    Case("Conv-valid", "Conv", [IMG, K(f(2, 3, 3, 3))], {"auto_pad": "VALID"}),
    Case("Conv-1d", "Conv", [f(2, 3, 9), K(f(4, 3, 3)), K(f(4))], {"pads": [1, 1],
                                                                    "strides": [2]}),
    Case("Conv-dynamic-batch-and-size", "Conv", [IMG, K(f(4, 3, 3, 3))], {"pads": [1] * 4},
         dynamic={0: ["n", 3, "h", "w"]}),
    Case("ConvTranspose-stride-pads-outpad", "ConvTranspose", [IMG, K(f(3, 2, 3, 3)), K(f(2))],
         {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    Case("ConvTranspose-group", "ConvTranspose", [f(1, 4, 5, 5), K(f(4, 1, 2, 2))],
         {"strides": [2, 2], "group": 2}),
    Case("ConvTranspose-output-shape", "ConvTranspose", [IMG, K(f(3, 2, 3, 3))],
         {"strides": [2, 2], "output_shape": [14, 14]}),
    Case("ConvTranspose-asymmetric-pads", "ConvTranspose", [IMG, K(f(3, 2, 3, 3))],
         {"strides": [2, 2], "pads": [0, 1, 1, 0]}),
    Case("ConvTranspose-1d", "ConvTranspose", [f(2, 3, 5), K(f(3, 2, 4))], {"strides": [2]}),
    Case("MaxPool", "MaxPool", [IMG], {"kernel_shape": [3, 3], "strides": [2, 2],
                                       "pads": [1, 1, 1, 1]}),
    Case("MaxPool-ceil", "MaxPool", [IMG], {"kernel_shape": [2, 2], "strides": [2, 2],
                                            "ceil_mode": 1}),
    Case("MaxPool-dilations-asym-pads", "MaxPool", [IMG], {"kernel_shape": [2, 2],
                                                           "dilations": [2, 2],
                                                           "pads": [0, 1, 1, 0]}),
    Case("MaxPool-same-upper", "MaxPool", [IMG], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                  "auto_pad": "SAME_UPPER"}),
    Case("MaxPool-1d", "MaxPool", [f(2, 3, 9)], {"kernel_shape": [3], "strides": [2]}),
    Case("AveragePool-exclude-pad", "AveragePool", [IMG], {"kernel_shape": [3, 3],
                                                           "pads": [1, 1, 1, 1]}),
    Case("AveragePool-include-pad", "AveragePool", [IMG], {"kernel_shape": [3, 3],
                                                           "strides": [2, 2],
                                                           "pads": [1, 1, 1, 1],
                                                           "count_include_pad": 1}),
    Case("AveragePool-ceil", "AveragePool", [IMG], {"kernel_shape": [2, 2], "strides": [2, 2],
                                                    "ceil_mode": 1}),
    Case("AveragePool-ceil-pad", "AveragePool", [f(2, 3, 8, 9)], {
        "kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    Case("AveragePool-ceil-pad-include", "AveragePool", [f(2, 3, 8, 9)], {
        "kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 1, 1, 1], "ceil_mode": 1,
        "count_include_pad": 1}),
    Case("AveragePool-asym-pads", "AveragePool", [IMG], {"kernel_shape": [2, 2],
                                                         "pads": [1, 0, 0, 1]}),
    Case("AveragePool-1d", "AveragePool", [f(2, 3, 9)], {"kernel_shape": [3], "strides": [2]}),
    Case("GlobalAveragePool", "GlobalAveragePool", [IMG]),
    Case("GlobalMaxPool", "GlobalMaxPool", [IMG]),
    # normalization and softmax
    Case("BatchNormalization", "BatchNormalization",
         [IMG, K(f(3)), K(f(3)), K(f(3)), K(f(3, lo=0.5, hi=2.0))], {"epsilon": 1e-3}),
    Case("InstanceNormalization", "InstanceNormalization", [IMG, K(f(3)), K(f(3))]),
    Case("LayerNormalization", "LayerNormalization", [X, K(f(4)), K(f(4))]),
    Case("LayerNormalization-axis1", "LayerNormalization", [X, K(f(3, 4))], {"axis": 1,
                                                                            "epsilon": 1e-3}),
    Case("LayerNormalization-broadcast-scale", "LayerNormalization", [X, K(f(1, 4))],
         {"axis": 1}),
    Case("Softmax-axis1", "Softmax", [X], {"axis": 1}),
    Case("Softmax-dynamic", "Softmax", [X], dynamic={0: ["b", "s", 4]}),
    Case("LogSoftmax", "LogSoftmax", [X]),
    # Resize
    Case("Resize-nearest-asymmetric-floor", "Resize", [IMG, None, K(np.float32([1, 1, 2, 2]))],
         {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
          "nearest_mode": "floor"}),
    Case("Resize-nearest-sizes", "Resize", [IMG, None, None, K(i64(2, 3, 10, 5))],
         {"mode": "nearest"}),
    Case("Resize-linear-half-pixel", "Resize", [IMG, None, K(np.float32([1, 1, 2, 2]))],
         {"mode": "linear"}),
    Case("Resize-linear-align-corners", "Resize", [IMG, None, None, K(i64(2, 3, 12, 9))],
         {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    Case("Resize-linear-pytorch-half-pixel-down", "Resize",
         [IMG, None, K(np.float32([1, 1, 0.5, 0.5]))],
         {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
    Case("Resize-linear-asymmetric", "Resize", [IMG, None, K(np.float32([1, 1, 1.5, 2]))],
         {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}),
    # shapes and movement
    Case("Shape-start", "Shape", [X], {"start": 1}, opset=15),
    Case("Size", "Size", [X]),
    Case("Reshape-zero-and-minus-one", "Reshape", [X, K(i64(0, -1))]),
    Case("Reshape-dynamic", "Reshape", [X, K(i64(-1, 4))], dynamic={0: ["b", 3, 4]}),
    Case("Flatten-axis2", "Flatten", [X], {"axis": 2}),
    Case("Squeeze", "Squeeze", [f(2, 1, 4, 1), K(i64(1, -1))]),
    Case("Squeeze-all", "Squeeze", [f(2, 1, 4, 1)]),
    Case("Unsqueeze", "Unsqueeze", [X, K(i64(0, -1))]),
    Case("Transpose", "Transpose", [X], {"perm": [2, 0, 1]}),
    Case("Transpose-default", "Transpose", [X]),
    Case("Concat", "Concat", [X, f(2, 3, 1), f(2, 3, 2)], {"axis": -1}),
    Case("Split-sizes", "Split", [f(2, 6), K(i64(1, 2, 3))], {"axis": 1}, outputs=3),
    Case("Split-equal", "Split", [f(6, 2)], outputs=3, opset=13),
    Case("Split-num-outputs-uneven", "Split", [f(2, 7)], {"axis": 1, "num_outputs": 3},
         outputs=3, opset=18),
    Case("Slice", "Slice", [f(5, 6, 4), K(i64(1, 0)), K(i64(4, 100)), K(i64(0, 2)),
                            K(i64(2, 1))]),
    Case("Slice-negative-step", "Slice", [f(5, 6), K(i64(-1)), K(i64(-100)), K(i64(1)),
                                          K(i64(-2))]),
    Case("Slice-negative-bounds", "Slice", [f(5, 6), K(i64(-4)), K(i64(-1))]),
    Case("Gather-axis1-matrix-indices", "Gather", [X, K(i64([[0, 2], [1, -1]]))], {"axis": 1}),
    Case("Gather-scalar-index", "Gather", [X, K(np.int64(-1))], {"axis": 2}),
    Case("Gather-runtime-indices", "Gather", [f(10, 3), i64([[1, 9], [-2, 0]])]),
    Case("GatherElements", "GatherElements", [X, RNG.integers(-3, 3, (2, 3, 4))], {"axis": 1}),
    Case("Expand-bidirectional", "Expand", [f(3, 1), K(i64(2, 1, 4))]),
    Case("Tile", "Tile", [X, K(i64(1, 2, 3))]),
    Case("Pad-constant", "Pad", [IMG, K(i64(0, 0, 1, 2, 0, 0, 2, 1)), K(np.float32(0.5))]),
    Case("Pad-reflect", "Pad", [IMG, K(i64(0, 0, 2, 1, 0, 0, 1, 2))], {"mode": "reflect"}),
    Case("Pad-edge", "Pad", [IMG, K(i64(0, 0, 2, 1, 0, 0, 1, 2))], {"mode": "edge"}),
    Case("Pad-wrap", "Pad", [IMG, K(i64(0, 0, 2, 1, 0, 0, 1, 2))], {"mode": "wrap"}, opset=19),
    Case("Pad-negative-crops", "Pad", [IMG, K(i64(0, 0, -1, 2, 0, 0, 1, -2))]),
    Case("Pad-axes", "Pad", [IMG, K(i64(1, 2, 3, 0)), None, K(i64(-1, 2))], opset=18),
    Case("ConstantOfShape", "ConstantOfShape", [K(i64(2, 3))],
         {"value": helper.make_tensor("v", 1, [1], [1.5])}),
    Case("Range", "Range", [K(np.float32(1)), K(np.float32(4)), K(np.float32(0.5))]),
    Case("Range-int", "Range", [K(np.int64(10)), K(np.int64(1)), K(np.int64(-3))]),
    Case("Trilu-upper-k", "Trilu", [f(2, 4, 5), K(np.int64(1))]),
    Case("Trilu-lower", "Trilu", [f(4, 5)], {"upper": 0}),
    Case("CumSum", "CumSum", [X, K(np.int64(1))]),
    Case("CumSum-exclusive-reverse", "CumSum", [X, K(np.int64(-1))],
         {"exclusive": 1, "reverse": 1}),
    Case("TopK", "TopK", [f(3, 8), K(i64(3))], outputs=2),
    Case("TopK-smallest-axis0", "TopK", [f(6, 4), K(i64(2))], {"axis": 0, "largest": 0},
         outputs=2),
    Case("ArgMax", "ArgMax", [X], {"axis": 1, "keepdims": 0}),
    Case("ArgMin-last-index", "ArgMin", [np.array([[1, 0, 0, 2], [3, 3, 1, 1]], np.float32)],
         {"axis": 1, "select_last_index": 1}),
]
CASES += [
    Case("GroupNormalization-per-group", "GroupNormalization", [f(2, 4, 3, 3), K(f(2)), K(f(2))],
         {"num_groups": 2}, opset=18),
    Case("GroupNormalization-per-channel", "GroupNormalization",
         [f(2, 4, 3, 3), K(f(4)), K(f(4))], {"num_groups": 2, "epsilon": 1e-3}, opset=21),
    Case("LpNormalization-p2", "LpNormalization", [X], {"axis": 1}),
    Case("LpNormalization-p1", "LpNormalization", [X], {"p": 1}),
    Case("DepthToSpace-DCR", "DepthToSpace", [f(1, 8, 2, 3)], {"blocksize": 2}),
    Case("DepthToSpace-CRD", "DepthToSpace", [f(1, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"}),
    Case("SpaceToDepth", "SpaceToDepth", [f(1, 2, 4, 6)], {"blocksize": 2}),
    Case("GatherND", "GatherND", [X, ix([[0, 1], [1, -1]])]),
    Case("GatherND-full-index", "GatherND", [X, ix([[[0, 1, 2]], [[1, 2, 3]]])]),
    Case("ScatterND", "ScatterND", [X, K(ix([[1, 0], [0, 2]])), f(2, 4)]),
    Case("ScatterND-add", "ScatterND", [X, K(ix([[1], [1]])), f(2, 3, 4)],
         {"reduction": "add"}),
    Case("ScatterElements", "ScatterElements", [f(3, 4), ix([[1, 0, 2, 0], [2, 1, 0, 1]]),
                                                f(2, 4)]),
    Case("ScatterElements-add-axis1", "ScatterElements",
         [f(3, 4), ix([[1, 1], [0, -1], [3, 3]]), f(3, 2)], {"axis": 1, "reduction": "add"}),
    Case("OneHot", "OneHot", [ix([[0, 2], [-1, 1]]), K(i64(3)), K(np.float32([0.5, 2.0]))]),
    Case("OneHot-axis0", "OneHot", [ix([0, 2, 1]), K(np.int64(4)), K(i64(0, 7))],
         {"axis": 0}),
]
for _op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
            "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"]:
    CASES.append(Case(f"{_op}-axes-input", _op, [X, K(i64(0, -1))], opset=18))
    CASES.append(Case(f"{_op}-all-keepdims0", _op, [X], {"keepdims": 0}, opset=18))
    if _op != "ReduceSum":
        CASES.append(Case(f"{_op}-axes-attr", _op, [X], {"axes": [1]}, opset=13))
CASES += [
    Case("ReduceSum-axes-input-opset13", "ReduceSum", [X, K(i64(1))], opset=13),
    Case("ReduceMean-noop-empty-axes", "ReduceMean", [X], {"noop_with_empty_axes": 1},
         opset=18),
]

# operators added for onnx's backend suite (issue 44), and attributes of older opsets
_U8 = np.array([[1, 2, 16], [255, 7, 128]], np.uint8)
CASES += [
    Case("Acosh", "Acosh", [f(2, 3, 4, lo=1.1, hi=4.0)]),
    Case("Asinh", "Asinh", [X]),
    Case("Atanh", "Atanh", [UNIT]),
    Case("BitShift-left", "BitShift", [_U8, K(np.array([1, 2, 3], np.uint8))],
         {"direction": "LEFT"}),
    Case("BitShift-right", "BitShift", [_U8, K(np.array([1, 2, 3], np.uint8))],
         {"direction": "RIGHT"}),
    Case("BitwiseAnd", "BitwiseAnd", [INTS, K(i64(5, 1, 3, 6, 2, 8))], opset=18),
    Case("BitwiseOr", "BitwiseOr", [INTS, K(i64(5, 1, 3, 6, 2, 8))], opset=18),
    Case("BitwiseXor", "BitwiseXor", [INTS, K(i64(5, 1, 3, 6, 2, 8))], opset=18),
    Case("BitwiseNot", "BitwiseNot", [INTS], opset=18),
    Case("Compress-axis", "Compress", [X, K(np.array([True, False, True]))], {"axis": 1}),
    Case("Compress-flat", "Compress", [X, K(np.array([False, True, True, False, True]))]),
    Case("CumProd", "CumProd", [X, K(np.int64(1))], opset=26),
    Case("CumProd-exclusive-reverse", "CumProd", [X, K(np.int64(-1))],
         {"exclusive": 1, "reverse": 1}, opset=26),
    Case("CumSum-int32", "CumSum", [np.arange(12, dtype=np.int32).reshape(3, 4),
                                    K(np.int64(1))]),
    Case("EyeLike", "EyeLike", [f(3, 5)], {"k": 1}),
    Case("EyeLike-dtype", "EyeLike", [f(4, 4)], {"dtype": 7, "k": -1}),
    Case("Hardmax", "Hardmax", [X]),
    Case("Hardmax-opset11", "Hardmax", [X], {"axis": 1}, opset=11),
    Case("Softmax-opset11-coerced", "Softmax", [X], {"axis": 1}, opset=11),
    Case("LogSoftmax-opset11-default-axis", "LogSoftmax", [X], opset=11),
    Case("MeanVarianceNormalization", "MeanVarianceNormalization", [IMG]),
    Case("NegativeLogLikelihoodLoss", "NegativeLogLikelihoodLoss",
         [f(4, 5), K(i64(0, 4, 2, 1))], {"reduction": "mean"}),
    Case("NegativeLogLikelihoodLoss-weight-ignore", "NegativeLogLikelihoodLoss",
         [f(3, 5, 2), K(ix([[0, 4], [2, 1], [3, 3]])), K(f(5, lo=0.1, hi=1.0))],
         {"reduction": "mean", "ignore_index": 3}),
    Case("SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLoss", [f(4, 5), K(i64(0, 4, 2, 1))],
         {"reduction": "sum"}, outputs=2),
    Case("NonZero", "NonZero", [np.array([[1.0, 0.0], [0.0, 3.0]], np.float32)], opset=13),
    Case("RMSNormalization", "RMSNormalization", [X, K(f(4))], opset=23),
    Case("LayerNormalization-stats", "LayerNormalization", [X, K(f(4)), K(f(4))],
         outputs=3),
    Case("ReduceLogSum", "ReduceLogSum", [POS], {"axes": [1]}, opset=13),
    Case("ReduceMax-empty", "ReduceMax", [np.zeros((2, 0, 3), np.float32), K(i64(1))],
         opset=18),
    Case("ReverseSequence", "ReverseSequence", [f(4, 3, 2), K(i64(4, 2, 1))],
         {"batch_axis": 1, "time_axis": 0}),
    Case("Shrink", "Shrink", [X], {"lambd": 0.7, "bias": 0.2}),
    Case("Swish", "Swish", [X], {"alpha": 0.8}, opset=24),
    Case("LpNormalization-zero-slice", "LpNormalization",
         [np.array([[0.0, 0.0], [3.0, 4.0]], np.float32)], {"axis": 1}),
    Case("Shape-start-below-rank", "Shape", [X], {"start": -10}, opset=15),
    Case("Clip-opset10-attributes", "Clip", [X], {"min": -0.5, "max": 0.4}, opset=10),
    Case("Slice-opset9-attributes", "Slice", [f(5, 6)], {"starts": [1, 0], "ends": [4, 100],
                                                          "axes": [0, 1]}, opset=9),
    Case("TopK-opset9-attribute", "TopK", [X], {"k": 2, "axis": 1}, outputs=2, opset=9),
    Case("Upsample-opset9", "Upsample", [IMG, K(np.array([1, 1, 2, 3], np.float32))],
         {"mode": "nearest"}, opset=9),
    Case("Resize-opset10-linear", "Resize", [IMG, K(np.array([1, 1, 2, 1.5], np.float32))],
         {"mode": "linear"}, opset=10),
    Case("Attention-3d-gqa-causal", "Attention", [f(2, 5, 32), f(2, 5, 16), f(2, 5, 16)],
         {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1}, opset=23),
    Case("Attention-4d-boolmask-past", "Attention",
         [f(2, 4, 3, 8), f(2, 4, 2, 8), f(2, 4, 2, 6), RNG.random((3, 5)) > 0.3,
          f(2, 4, 3, 8), f(2, 4, 3, 6)], outputs=3, opset=23),
    Case("Attention-4d-floatmask-softcap-scale", "Attention",
         [f(1, 2, 4, 8), f(1, 2, 6, 8), f(1, 2, 6, 8), f(1, 2, 4, 6)],
         {"softcap": 2.0, "scale": 0.5}, opset=23),
    Case("Attention-4d-qk-output-softmax", "Attention",
         [f(1, 2, 4, 8), f(1, 2, 6, 8), f(1, 2, 6, 8)],
         {"qk_matmul_output_mode": 3, "is_causal": 1}, outputs=4, opset=23),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_matches_onnxruntime(case: Case, device: str) -> None:
    model, feeds = case.model()
    check(model, feeds, device)


def test_every_supported_op_has_a_case() -> None:
    import importlib

    from test_ops_more import CASES as MORE, NUMPY_CHECKED

    covered = {c.op for c in CASES + MORE} | {"Constant", *NUMPY_CHECKED}
    for mod in ("test_control", "test_rnn", "test_sample"):  # families tested on their own
        try:
            covered |= importlib.import_module(mod).COVERED
        except ModuleNotFoundError:
            pass
    missing = sorted(set(ember.onnx.supported_ops()) - covered)
    assert not missing, f"supported ops without a test case: {missing}"
