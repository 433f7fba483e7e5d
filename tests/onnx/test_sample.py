"""GridSample and AffineGrid against onnxruntime; GridSample's gradients by finite
differences."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx_oracle import check, helper

import ember
import ember.onnx

RNG = np.random.default_rng(11)
COVERED = {"GridSample", "AffineGrid"}


def _model(op: str, feeds: dict[str, np.ndarray], opset: int = 20, **attrs: Any) -> Any:
    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                         list(v.shape)) for k, v in feeds.items()]
    g = helper.make_graph([node], "g", ins, [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


@pytest.mark.parametrize("mode,padding,align", [
    ("linear", "zeros", 0), ("linear", "border", 1), ("linear", "reflection", 0),
    ("nearest", "zeros", 1), ("nearest", "border", 0), ("nearest", "reflection", 1),
    ("cubic", "zeros", 0), ("cubic", "border", 1), ("cubic", "reflection", 0)])
def test_grid_sample_2d(device: str, mode: str, padding: str, align: int) -> None:
    # Note: cubic taps of grid points outside [-1, 1] with border or reflection padding
    # differ between onnxruntime (PyTorch's rule: pad each tap) and the ONNX reference
    # (clamp or reflect the point first), which ember follows with the backend suite
    reach = 1.0 if mode == "cubic" and padding != "zeros" else 1.4
    feeds = {"x": RNG.standard_normal((2, 3, 5, 4)).astype(np.float32),
             "grid": RNG.uniform(-reach, reach, (2, 6, 3, 2)).astype(np.float32)}
    check(_model("GridSample", feeds, mode=mode, padding_mode=padding, align_corners=align),
          feeds, device)


def test_grid_sample_3d_linear(device: str) -> None:
    feeds = {"x": RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32),
             "grid": RNG.uniform(-1.2, 1.2, (1, 2, 3, 2, 3)).astype(np.float32)}
    check(_model("GridSample", feeds, mode="linear", padding_mode="border"), feeds, device)


@pytest.mark.parametrize("size,align", [([2, 3, 4, 5], 0), ([1, 2, 3, 4, 2], 1)])
def test_affine_grid(device: str, size: list[int], align: int) -> None:
    nd = len(size) - 2
    feeds = {"theta": RNG.standard_normal((size[0], nd, nd + 1)).astype(np.float32)}
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"], align_corners=align)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "theta", 1, list(feeds["theta"].shape))], [helper.make_empty_tensor_value_info("y")],
        [helper.make_tensor("size", 7, [len(size)], size)])
    check(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9),
          feeds, device)


def test_grid_sample_gradients_match_finite_differences() -> None:
    x = RNG.standard_normal((1, 1, 4, 4))
    grid = RNG.uniform(-0.9, 0.9, (1, 3, 2, 2))
    feeds = {"x": x.astype(np.float64), "grid": grid.astype(np.float64)}
    model = ember.onnx.load(_model("GridSample", feeds, mode="linear"),
                            device="autodiff<cpu>")
    w = RNG.standard_normal((1, 1, 3, 2))

    def loss(xv: np.ndarray, gv: np.ndarray) -> float:
        y = ember.onnx.load(_model("GridSample", feeds, mode="linear"))(
            ember.tensor(xv), ember.tensor(gv)).numpy()
        return float((y * w).sum())

    xt = ember.tensor(x, device="autodiff<cpu>", requires_grad=True)
    gt = ember.tensor(grid, device="autodiff<cpu>", requires_grad=True)
    grads = (model(xt, gt) * ember.tensor(w, device="autodiff<cpu>")).sum().backward()
    eps = 1e-6
    for arr, t, is_x in ((x, xt, True), (grid, gt, False)):
        fd = np.zeros_like(arr)
        for k in np.ndindex(arr.shape):
            up, down = arr.copy(), arr.copy()
            up[k] += eps
            down[k] -= eps
            fd[k] = ((loss(up, grid) - loss(down, grid)) if is_x else
                     (loss(x, up) - loss(x, down))) / (2 * eps)
        np.testing.assert_allclose(grads[t].numpy(), fd, rtol=1e-5, atol=1e-7)


def _resize(feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray],
            **attrs: Any) -> Any:
    names = ["x", *(k if k in consts else "" for k in ("roi", "scales", "sizes"))]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Resize", names, ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", 1, list(feeds["x"].shape))], [helper.make_empty_tensor_value_info("y")],
        [helper.make_tensor(k, 1 if v.dtype == np.float32 else 7, list(v.shape),
                            v.reshape(-1).tolist()) for k, v in consts.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


F32, I64 = np.float32, np.int64


@pytest.mark.parametrize("consts,attrs", [
    ({"scales": np.array([1, 1, 0.6, 1.7], F32)},
     {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}),
    ({"scales": np.array([1, 1, 1.5, 2], F32)},
     {"mode": "cubic", "coordinate_transformation_mode": "align_corners"}),
    ({"sizes": np.array([1, 2, 3, 4], I64)}, {"mode": "linear", "antialias": 1}),
    ({"scales": np.array([1, 1, 0.5, 0.6], F32)}, {"mode": "cubic", "antialias": 1}),
    ({"scales": np.array([1, 1, 1.3, 0.7], F32)},
     {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}),
    ({"sizes": np.array([9, 4], I64)}, {"mode": "nearest", "axes": [3, 2],
                                        "keep_aspect_ratio_policy": "not_larger"}),
    ({"roi": np.array([0.2, -0.3, 0.9, 1.2], F32), "sizes": np.array([4, 5], I64)},
     {"mode": "linear", "axes": [2, 3], "coordinate_transformation_mode": "tf_crop_and_resize",
      "extrapolation_value": 3.0}),
])
def test_resize_modes(device: str, consts: dict[str, np.ndarray],
                      attrs: dict[str, Any]) -> None:
    feeds = {"x": RNG.standard_normal((1, 2, 6, 7)).astype(np.float32)}
    check(_resize(feeds, consts, **attrs), feeds, device)


def test_resize_of_integers_rounds_and_saturates(device: str) -> None:
    # Note: onnxruntime truncates the weighted sums of uint8 inputs; the ONNX reference
    # rounds them (and saturates), and so does ember: the oracle here is the reference
    from onnx.reference import ReferenceEvaluator

    x = RNG.integers(0, 256, (1, 1, 4, 5)).astype(np.uint8)
    x[0, 0, :, 1:4] = [[0, 255, 0], [255, 0, 255], [0, 255, 0], [255, 0, 255]]  # overshoots
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="cubic")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 2, [1, 1, 4, 5])],
                          [helper.make_empty_tensor_value_info("y")],
                          [helper.make_tensor("scales", 1, [4], [1, 1, 1.5, 1.7])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = ember.onnx.load(model, device=device)(ember.tensor(x, device=device)).numpy()
    assert got.dtype == np.uint8 and (want == 255).any() and (want == 0).any()
    np.testing.assert_array_equal(got, want)


def test_grid_sample_of_integers_samples_in_float_and_truncates() -> None:
    x = RNG.integers(-50, 50, (1, 2, 4, 5)).astype(np.int32)
    grid = RNG.uniform(-1.1, 1.1, (1, 3, 2, 2)).astype(np.float32)
    as_int = ember.onnx.load(_model("GridSample", {"x": x, "grid": grid}))(
        ember.tensor(x), ember.tensor(grid)).numpy()
    xf = x.astype(np.float32)
    as_float = ember.onnx.load(_model("GridSample", {"x": xf, "grid": grid}))(
        ember.tensor(xf), ember.tensor(grid)).numpy()
    assert as_int.dtype == np.int32
    np.testing.assert_array_equal(as_int, np.trunc(as_float).astype(np.int32))
