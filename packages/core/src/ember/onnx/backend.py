"""ember as an ONNX backend (`onnx.backend.base.Backend`): run onnx's own conformance suite.

``onnx.backend.test.BackendTest(ember.onnx.backend, __name__)`` turns the suite that ships
with the ``onnx`` package into unittest cases run by ember.  The module itself is the backend
(as ``onnxruntime.backend`` is): ``prepare``, ``run_model``, ``run_node``, ``supports_device``
and ``is_compatible``.  Devices are ember's device strings (``"cpu"``, ``"opencl:0"``,
``"fusion<cpu>"``); onnx's names ``"CPU"`` and ``"CUDA"`` mean ember's ``cpu`` and
``cuda:0``.

Examples
--------
>>> import numpy as np, onnx, ember.onnx.backend as backend
>>> from onnx import helper, TensorProto
>>> node = helper.make_node("Relu", ["x"], ["y"])
>>> backend.run_node(node, [np.array([-1.0, 2.0], np.float32)])[0].tolist()
[0.0, 2.0]
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep

from ember import Tensor, device as _device

from ._carried import from_carrier
from ._load import OnnxModel, load
from ._registry import OPSET_MAX, OPSET_MIN

__all__ = ["EmberBackend", "EmberRep", "ember_device", "is_compatible", "prepare",
           "run_model", "run_node", "supports_device"]

#: onnx's device names and the ember device each one means
ONNX_DEVICES = {"CPU": "cpu", "CUDA": "cuda:0"}


def ember_device(device: str) -> str:
    """ember's device string for ``device`` (an ember string, or onnx's ``CPU``/``CUDA``)."""
    return ONNX_DEVICES.get(device, device)


class EmberRep(BackendRep):
    """A prepared model: ``run(inputs)`` takes numpy arrays (a list in the graph's input order,
    or a dict by name) and returns the outputs as numpy arrays, in the graph's order."""

    def __init__(self, model: OnnxModel) -> None:
        self.model = model

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            out = self.model(**inputs)
        else:
            if isinstance(inputs, np.ndarray | Tensor):
                inputs = [inputs]
            out = self.model(*inputs)
        outs = out if isinstance(out, tuple) else (out,)
        carried = getattr(self.model, "carried", [None] * len(outs))
        # a type ember carries in a wider dtype goes back to its own numpy dtype
        return tuple(_host(t) if code is None or t is None or isinstance(t, list)
                     else from_carrier(t.numpy(), code)
                     for t, code in zip(outs, carried, strict=True))


def _host(v: Any) -> Any:
    """An output on the host: an array, a list of arrays (a sequence), None (an empty
    optional)."""
    if isinstance(v, list):
        return [_host(e) for e in v]
    if v is None or isinstance(v, np.ndarray):  # an empty optional, or strings
        return v
    return np.asarray(v.numpy())


class EmberBackend(Backend):
    """ember as an `onnx.backend.base.Backend` (the module-level functions call these)."""

    @classmethod
    def is_compatible(cls, model: Any, device: str = "CPU", **kwargs: Any) -> bool:
        return True  # an incompatible model fails in prepare with the reason

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> EmberRep:
        if kwargs:
            raise TypeError(f"ember.onnx.backend.prepare: unknown option(s) {sorted(kwargs)}")
        return EmberRep(load(model, ember_device(device)))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: Any, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run one node on ``inputs`` (numpy arrays, in the node's input order): a graph of
        that node alone is built at ``opset_version`` (default: the newest ember reads)."""
        opset = int(kwargs.pop("opset_version", OPSET_MAX))
        if not OPSET_MIN <= opset <= OPSET_MAX:
            raise ValueError(f"ember.onnx.backend.run_node: opset {opset} is outside "
                             f"{OPSET_MIN}-{OPSET_MAX}")
        from onnx import helper

        names = [n for n in node.input if n]
        arrays = [np.asarray(a) for a in inputs]
        if len(arrays) != len(names):
            raise ValueError(f"{node.op_type}: {len(names)} input(s) named, {len(arrays)} given")
        value_infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(
            a.dtype), a.shape) for n, a in zip(names, arrays, strict=True)]
        outs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = helper.make_graph([node], f"{node.op_type}_node", value_infos, outs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(node.domain or "",
                                                                             opset)])
        return cls.prepare(model, device, **kwargs).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Whether ``device`` names an ember device that is available here."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an absent plugin's warning: the answer is False
            try:
                _device(ember_device(device))
            except Exception:
                return False
        return True


is_compatible = EmberBackend.is_compatible
prepare = EmberBackend.prepare
run_model = EmberBackend.run_model
run_node = EmberBackend.run_node
supports_device = EmberBackend.supports_device
