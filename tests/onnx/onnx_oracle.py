"""The ONNX tests' oracle: onnxruntime runs the same model; outputs must agree to
1e-4 * (1 + max|ref|) in float32 and exactly for integers and booleans."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ember  # noqa: E402
import ember.onnx  # noqa: E402

NP_TO_ONNX = {np.dtype("float32"): TensorProto.FLOAT, np.dtype("float64"): TensorProto.DOUBLE,
              np.dtype("int64"): TensorProto.INT64, np.dtype("int32"): TensorProto.INT32,
              np.dtype("bool"): TensorProto.BOOL, np.dtype("uint8"): TensorProto.UINT8,
              np.dtype("int8"): TensorProto.INT8, np.dtype("int16"): TensorProto.INT16,
              np.dtype("float16"): TensorProto.FLOAT16}


def graph_model(nodes: list[Any], inputs: dict[str, Any], outputs: list[str],
                inits: dict[str, np.ndarray] | None = None, opset: int = 17,
                dynamic: dict[str, list[Any]] | None = None) -> Any:
    """A model of ``nodes``; ``inputs`` maps a graph input to an example array (its shape,
    or the symbolic dims in ``dynamic``), ``inits`` become initializers."""
    ins = []
    for name, arr in inputs.items():
        dims = (dynamic or {}).get(name, list(arr.shape))
        ins.append(helper.make_tensor_value_info(name, NP_TO_ONNX[arr.dtype], dims))
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    g = helper.make_graph(nodes, "test", ins, outs, init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def reference(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in sess.run(None, feeds)]


def assert_close(got: np.ndarray, ref: np.ndarray, what: str) -> None:
    assert got.shape == ref.shape, f"{what}: shape {got.shape} vs onnxruntime {ref.shape}"
    if ref.dtype.kind in "fc":
        assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} vs {ref.dtype}"
        finite = np.isfinite(ref)
        assert np.array_equal(np.isnan(got), np.isnan(ref)), f"{what}: NaNs differ"
        assert np.array_equal(got[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)]), \
            f"{what}: infinities differ"
        if finite.any():
            err = float(np.max(np.abs(got[finite].astype(np.float64) - ref[finite])))
            tol = 1e-4 * (1 + float(np.max(np.abs(ref[finite]))))
            assert err <= tol, f"{what}: max abs error {err:.3g} > {tol:.3g}"
    else:
        assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} vs {ref.dtype}"
        np.testing.assert_array_equal(got, ref, err_msg=what)


def run_ember(model: Any, feeds: dict[str, np.ndarray], device: str) -> list[np.ndarray]:
    m = ember.onnx.load(model, device=device)
    out = m(**{k: ember.tensor(v, device=device) for k, v in feeds.items()})
    out = out if isinstance(out, tuple) else (out,)
    return [o.numpy() for o in out]


def check(model: Any, feeds: dict[str, np.ndarray], device: str) -> list[np.ndarray]:
    """ember on ``device`` against onnxruntime; returns the reference outputs."""
    ref = reference(model, feeds)
    got = run_ember(model, feeds, device)
    assert len(got) == len(ref)
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        assert_close(g, r, f"output {i} on {device}")
    return ref
