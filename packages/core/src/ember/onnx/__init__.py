"""ONNX import and export (needs the ``onnx`` package: ``pip install 'ember[onnx]'``).

``ember.onnx.load(path, device)`` runs an ONNX graph as an `ember.nn.Module` on any device
stack; ``ember.onnx.export(module, example_inputs, path)`` writes one by tracing ember ops.
``supported_ops()`` lists the operators ember imports (opsets ``OPSET_MIN``-``OPSET_MAX``).
"""

from __future__ import annotations

from ._export import export as export
from ._load import (
    OnnxModel as OnnxModel,
    UnsupportedOperatorError as UnsupportedOperatorError,
    load as load,
)
from ._registry import (
    OPSET_MAX as OPSET_MAX,
    OPSET_MIN as OPSET_MIN,
    supported_ops as supported_ops,
)

__all__ = [
    "load",
    "export",
    "supported_ops",
    "OnnxModel",
    "UnsupportedOperatorError",
    "OPSET_MIN",
    "OPSET_MAX",
]
