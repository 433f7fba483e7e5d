"""The plugin contract: everything a backend or decorator package takes from core.

ember's plugins (``ember_cpu``, ``ember_opencl``, ``ember_triton``, ``ember_cuda``,
``ember_rocm``, ``ember_autodiff``, ``ember_fusion``, ``ember_remote``) and third-party backends
import core's machinery from this module only, never from ``ember._*`` (``nox -s lint`` checks
it with ``scripts/check_plugin_api.py``).  What is here is kept stable; what is not here may
change without notice.

**Backends and decorators** — a *primitive backend* subclasses `Backend`, fills its table
``kernels: {Op: Kernel}`` and moves data with ``from_numpy``/``to_numpy``; a *decorator*
subclasses `Decorator` and overrides ``dispatch`` (docs/writing-a-decorator.md).  Optional
hooks (``record_error``, ``to_dlpack``/``from_dlpack``/``dlpack_device``, ``peek``,
``tensor_type``) are declared on `Backend`/`Decorator` with their defaults.  A plugin reads a
tensor through its public ``payload``, ``device`` and ``dtype`` and makes one with
``device.tensor_type.from_payload(payload, device, dtype)``, never through ``Tensor._*``
(``scripts/check_plugin_api.py`` checks it); `lower`, `lower_to` and `lift` move a tensor
down and up a decorator stack, and `set_payload` swaps a deferred payload for its value.
`DeviceSpec` and `DecoratorSpec` are what a plugin's ``ember_devices``/``ember_decorators``
hooks return (see `ember.hookspecs`); `Device` is the object core builds from them.

**Data types** — `DType`, `ALL_DTYPES`, and the numpy dtype of each (`numpy_dtype`,
`dtype_of_numpy`).

**Errors** — what kernels raise for bad input (`ShapeError`, `DTypeError`), a missing device
(`DeviceUnavailableError`), and an allocation that failed (`allocation_error` builds an
`OutOfMemoryError` naming shape, dtype, bytes and device).

**Ops on tensors** — `Tensor`, `apply` (run an op on tensors through their device stack: what a
decorator's rule or a custom op calls), `scalar_tensor`, `broadcast_shapes`, `ones_like`, and
`GRAD_MODE` (this thread's grad mode: ``GRAD_MODE.enabled``).

**Tracing and capture** — `TRACE` is the stack of open `ember.compile` traces (a decorator that
defers work records it there; `HostFloat`/`HostInt` are host numbers a trace re-reads at each
replay); `capturing` and `CaptureError` let a backend record device work (a CUDA graph) while
core's in-place writes are redirected.

**Kernel IR** — `ir`: every elementwise op's semantics as a small expression DAG that each
backend renders in its own language (see `ember.backend.ir`).

**Strided views** — `strided`: the host-side planning of strided device arrays that the
device backends share (dense strides, broadcast views, merging contiguous axes, reshape
without copies, and `strided.StridedView`, the one base of their array classes; see
`ember.backend.strided`); `movement`: `movement.StridedKernels`, the movement, embedding,
interpolation and convolution planning over those views, given a backend's primitives.

**nn geometry** — `geometry`: what a pooling window or an interpolation reads, planned on the
host the same way for every backend (`geometry.pool_output_size`, `geometry.interpolate` over
`geometry.nearest_index` / `geometry.linear_weights`), and the check of attention's operands
(`geometry.attention_operands_ok`).

**Fused groups** — `FusedGroup` (with `GroupNode`): what the Fusion decorator hands a
backend's fusion compiler, the one description of a fused kernel that each backend renders;
`FusedKernel` is what a compiler returns; `op_by_op` (the group unfused) and `HeadFirst` (a
matmul head by the backend's kernel, then the rest) are runners compilers share (see
`ember.backend.fused`).

**Row-kernel scheduling** — `schedule`: the one scheduling loop of the C-like fusion
renderers (a group's outer space, values hoisted to the outermost loop scope that can hold
them, flat counters unravelled, targets stored); a language subclasses
`schedule.RowSchedule` and supplies only its spelling (see `ember.backend.schedule`).

**Kernel guards** — `guard_kernels` wraps a backend's table entries for the ops of
`GUARDED_OPS` (kernels that compute addresses from params or read index tensors) so that a
direct call runs the op's shape rule and checks index values, as dispatch does (see
`ember.backend.guard`); `install_kernels` builds a device backend's table from its op groups'
tables, the kernels other plugins registered for it, and the guards.

**Plugins** — `plugin_manager` (the pluggy manager), `extra_kernels` (kernels other plugins
registered for a backend), `conformance_skips` (a device's declared skips) and `lazy_exports`
(a package ``__getattr__`` importing its public names on first access).
"""

from __future__ import annotations

from .._apply import apply, broadcast_shapes, scalar_tensor
from .._backend import (
    Backend,
    Decorator,
    Kernel,
    adopt_everywhere,
    adopt_rows_everywhere,
    lift,
    lower,
    lower_to,
    set_payload,
)
from .._capture import CaptureError, capturing
from .._creation import ones_like
from .._device import DecoratorSpec, Device, DeviceSpec
from .._dtype import ALL_DTYPES, DType
from .._errors import (
    DeviceUnavailableError,
    DTypeError,
    OutOfMemoryError,
    ShapeError,
    allocation_error,
)
from .._grad_mode import STATE as GRAD_MODE
from .._host import dtype_of_numpy, numpy_dtype
from .._plugins import conformance_skips, extra_kernels, lazy_exports, plugin_manager
from .._tensor import Tensor
from .._trace import TRACE, HostFloat, HostInt
from . import geometry, ir, movement, row_kernels, rows, schedule, strided
from .fused import DeviceCompiler, FusedGroup, FusedKernel, GroupNode, HeadFirst, op_by_op
from .guard import GUARDED_OPS, guard_kernels, guarded, install_kernels

__all__ = [
    # backends and decorators
    "Backend", "Decorator", "Kernel", "Device", "DeviceSpec", "DecoratorSpec",
    # decorator stacks: what lies behind a tensor, and a tensor seen through a stack
    "lower", "lower_to", "lift", "set_payload",
    # data types
    "DType", "ALL_DTYPES", "numpy_dtype", "dtype_of_numpy",
    # errors
    "ShapeError", "DTypeError", "DeviceUnavailableError", "OutOfMemoryError", "allocation_error",
    # ops on tensors
    "Tensor", "apply", "scalar_tensor", "broadcast_shapes", "ones_like", "GRAD_MODE",
    # tracing and capture
    "TRACE", "HostFloat", "HostInt", "capturing", "CaptureError",
    # fused groups (`ember.backend.fused`)
    "DeviceCompiler", "FusedGroup", "GroupNode", "FusedKernel", "HeadFirst", "op_by_op",
    # kernel guards (`ember.backend.guard`)
    "GUARDED_OPS", "guard_kernels", "guarded", "install_kernels",
    # plugins
    "plugin_manager", "extra_kernels", "conformance_skips", "lazy_exports",
    # the kernel IR (`ember.backend.ir`)
    "ir",
    "rows",
    "row_kernels",
    # strided views and index planning (`ember.backend.strided`)
    "strided",
    # movement, embedding, interpolation and convolution planning (`ember.backend.movement`)
    "movement",
    # host-side geometry of the nn ops (`ember.backend.geometry`)
    "geometry",
    # the scheduling loop of the C-like fusion renderers (`ember.backend.schedule`)
    "schedule",
]

ir.on_define(adopt_everywhere)
rows.on_define(adopt_rows_everywhere)
