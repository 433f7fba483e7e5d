"""The table of ONNX operators ember imports: one `OpRule` per op type.

Each rule has a device function (ember ops on any device stack: these run the model) and,
for the operators that do shape arithmetic, a host function on numpy arrays.  A node whose
inputs are all known on the host (constants, and values computed from ``Shape``) runs its host
function: shapes, slice bounds and reshape targets stay plain numbers, so a graph with dynamic
batch and sequence dimensions never reads a tensor back from the device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ember import Device, Tensor

__all__ = ["MODULE", "MODULES", "OPSET_MAX", "OPSET_MIN", "OPS", "Node", "OpRule", "Run", "op",
           "supported_ops"]

#: the default-domain opsets ember reads (onnx 1.23 knows opsets up to 28); older models are
#: refused, except opset 6, which `onnx.version_converter` moves to 7 (see `_load._opset`)
OPSET_MIN, OPSET_MAX = 7, 28

Value = Any  # an ember Tensor (on the run's device) or a numpy array (known on the host)


@dataclass
class Node:
    """One graph node, its attributes decoded to Python values."""

    op_type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    opset: int

    def where(self) -> str:
        return f"{self.op_type} node {self.name!r} (opset {self.opset})"

    def reads(self) -> list[str]:
        """The values the node reads: its inputs, then what its subgraphs read from the
        scopes around them (`_control.Subgraph.outer`)."""
        extra = [name for v in self.attrs.values() for name in getattr(v, "outer", ())]
        return self.inputs + [n for n in extra if n not in self.inputs]


@dataclass
class OpRule:
    op_type: str
    device: Callable[..., Any]
    host: Callable[..., Any] | None = None
    #: input positions read as host numbers (shapes, axes, bounds), never trained
    host_inputs: tuple[int, ...] = ()
    #: input positions that are state but not trained (BatchNormalization's statistics)
    state_inputs: tuple[int, ...] = ()
    #: input positions whose gradient is not defined here (integer indices, conditions)
    note: str = ""
    aliases: list[str] = field(default_factory=list)


OPS: dict[str, OpRule] = {}

#: op type -> a builder that imports a node as a module of its own (an LSTM node as an
#: `ember.nn.LSTM`): ``build(node, params, device)`` returns the module and the names of the
#: initializers it now holds as its parameters, or None where the node's attributes need
#: the op's general rule; the module is given to the device function as
#: ``node.attrs[MODULE]``
MODULES: dict[str, Callable[..., Any]] = {}
MODULE = "ember.module"


def op(*names: str, host: Callable[..., Any] | None = None, host_inputs: Sequence[int] = (),
       state_inputs: Sequence[int] = (), note: str = "") -> Callable[[Callable[..., Any]],
                                                                     Callable[..., Any]]:
    """Register the decorated device function for the op types ``names``."""
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for n in names:
            OPS[n] = OpRule(n, fn, host, tuple(host_inputs), tuple(state_inputs), note)
        return fn
    return register


def supported_ops() -> dict[str, str]:
    """Every supported op type and its note (what of the spec is not covered), sorted."""
    return {name: OPS[name].note for name in sorted(OPS)}


class Run:
    """What device functions need while the model runs: the device and value conversions."""

    def __init__(self, device: Device, consts: dict[int, Tensor]) -> None:
        self.device = device
        self.consts = consts  # id(host constant) -> its buffer on the model's device
        #: the values in scope by name (what a subgraph reads from around it)
        self.scope: Mapping[str, Any] = {}
        #: the ONNX element type of each value of a type ember carries in a wider dtype
        #: (`_carried`), by name
        self.types: Mapping[str, int] = {}

    def tensor(self, v: Value, node: Node | None = None) -> Tensor:
        """``v`` as a tensor on the run's device (constants come from their buffers)."""
        from ember import Tensor as _Tensor, tensor as _tensor

        if isinstance(v, _Tensor):
            return v
        t = self.consts.get(id(v))
        if t is not None:
            return t
        v = np.asarray(v)
        return _tensor(v if v.flags.c_contiguous else v.copy(), device=self.device)

    def host(self, v: Value) -> np.ndarray:
        """``v`` as a numpy array (a device tensor is read back: a synchronisation)."""
        if isinstance(v, np.ndarray):
            return v
        return v.numpy()  # type: ignore[no-any-return]  # a Tensor

    def ints(self, v: Value) -> list[int]:
        return [int(i) for i in self.host(v).reshape(-1)]


def is_host(v: Value) -> bool:
    return isinstance(v, np.ndarray)
