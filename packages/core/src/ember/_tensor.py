"""`Tensor`: a device, a dtype and the backend's payload.  Methods follow PyTorch's names."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Self

from . import _capture, _dtype as dt
from ._device import Device, device as as_device
from ._host import from_host, to_host
from ._printing import format_tensor
from .ops import elementwise as _ewops

if TYPE_CHECKING:
    import numpy as np

    # the op modules, which import Tensor: at run time `bind` sets these names
    from . import (
        _apply,
        _creation,
        _elementwise as _ew,
        _indexing as _ix,
        _linalg as _la,
        _manipulation as _mv,
        _matrix as _mat,
        _pointwise as _pw,
        _reduction as _red,
        _set,
        _stacking as _stk,
        _statistics as _stat,
        _windows as _win,
        functional as _fn,
    )
    from ._random import Generator
    from ._reduction import ValuesIndices

__all__ = ["Tensor"]

Dim = int | Sequence[int] | None


class Tensor:
    """An n-dimensional array on a device.

    Tensors are values: ops return new tensors, and ``x[i] = v`` rebinds ``x`` to a new value.
    ``backward`` exists only on tensors of an autodiff device (``ember_autodiff.AutodiffTensor``).

    Examples
    --------
    >>> import ember
    >>> x = ember.tensor([[2., 3.], [4., 5.]])
    >>> (x + 1).tolist()
    [[3.0, 4.0], [5.0, 6.0]]
    """

    __slots__ = ("__weakref__", "_data", "_device", "_dtype")
    __array_priority__ = 1000  # numpy scalars defer to our reflected operators

    _data: Any
    _device: Device
    _dtype: dt.DType

    # The public names of the three slots (the decorator contract, docs/writing-a-decorator.md):
    # ``payload``, ``device`` and ``dtype`` are the slots' own descriptors under a second name
    # (set below the class), so a read costs what ``_data`` costs; a property would add ~70 ns
    # to every read on a decorator's per-op path.  Read-only by contract: a tensor is a value.
    if TYPE_CHECKING:
        @property
        def payload(self) -> Any:
            """What the device's backend stores for this tensor: a primitive backend's array,
            a decorator's own record (Autodiff's cell, Fusion's handle)."""

        @property
        def dtype(self) -> dt.DType: ...

        @property
        def device(self) -> Device: ...

        @classmethod
        def _make(cls, data: Any, device: Device, dtype: dt.DType) -> Tensor:
            """Core's own spelling of `from_payload` (the same classmethod object)."""

    @classmethod
    def from_payload(cls, payload: Any, device: Device, dtype: dt.DType) -> Self:
        """A tensor of ``device`` holding ``payload`` (what ``device``'s backend stores) with
        dtype ``dtype``: how a backend or decorator makes tensors (call it on
        ``device.tensor_type``).  No check and no copy: the caller vouches that the payload
        fits the device, its ``shape`` and the dtype.

        Examples
        --------
        >>> import ember
        >>> x = ember.tensor([1.0, 2.0])
        >>> y = x.device.tensor_type.from_payload(x.payload, x.device, x.dtype)
        >>> y.tolist(), y.payload is x.payload
        ([1.0, 2.0], True)
        """
        t = object.__new__(cls)
        t._data = payload
        t._device = device
        t._dtype = dtype
        return t

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("create tensors with ember.tensor(...), ember.zeros(...) and friends")

    # -- attributes -----------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: int | None = None) -> Any:
        shape = self.shape
        return shape if dim is None else shape[dim]

    def numel(self) -> int:
        return math.prod(self._data.shape)

    @property
    def T(self) -> Tensor:  # PyTorch's name
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> Tensor:  # PyTorch's name
        return self.transpose(-1, -2)

    @property
    def requires_grad(self) -> bool:
        return False

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if requires_grad:
            raise RuntimeError(
                f"requires_grad needs an autodiff device; this tensor is on {self._device}: "
                f"create it on 'autodiff<{self._device}>'")
        return self

    def detach(self) -> Tensor:
        return self

    @property
    def grad(self) -> NoReturn:
        # Note: PyTorch accumulates into .grad; ember returns gradients from backward()
        raise AttributeError(
            "ember tensors have no .grad: gradients are values that backward() returns, so "
            "write `grads = loss.backward()`, read `grads[p]`, and step with "
            "`opt.step(grads)`")

    if not TYPE_CHECKING:  # to a type checker a plain Tensor has no backward at all
        def __getattr__(self, name: str) -> NoReturn:
            if name == "backward":
                # Note: PyTorch's tensors all have backward(); ember's only on autodiff devices
                raise AttributeError(
                    f"'{type(self).__name__}' object has no attribute 'backward': backward() "
                    f"exists only on tensors of an autodiff device, and this one is on "
                    f"{self._device}: create the inputs that need gradients with "
                    f"device=\"autodiff<{self._device}>\" and requires_grad=True, then write "
                    "`grads = loss.backward()`")
            prop = getattr(type(self), name, None)
            if isinstance(prop, property) and prop.fget is not None:
                prop.fget(self)  # a property that raised AttributeError (.grad): its message
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def is_floating_point(self) -> bool:
        return self._dtype.kind == "f"

    # -- host and device transfer ---------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """A host numpy array with this tensor's values (a copy, or a read-only view)."""
        return to_host(self)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def item(self) -> Any:
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor of one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        arr = self.numpy()
        if self._dtype is dt.bfloat16:
            arr = arr.astype("float32")
        return arr.tolist()

    def to(self, target: Any = None, dtype: Any = None) -> Tensor:
        """Move to a device and/or cast to a dtype: ``x.to("cpu")``, ``x.to(ember.float16)``."""
        out = self
        if isinstance(target, (dt.DType, type)) or (isinstance(target, str) and
                                                     target in dt.BY_NAME):
            target, dtype = None, target
        if target is not None:
            dev = target if isinstance(target, Device) else as_device(target)
            if dev is not self._device:
                out = from_host(self.numpy(), self._dtype, dev)
        if dtype is not None:
            out = _apply.cast(out, dt.as_dtype(dtype))
        return out

    def cpu(self) -> Tensor:
        """This tensor on the ``cpu`` device: itself where its hardware already is the cpu
        (``cpu``, ``autodiff<cpu>``, ``fusion<cpu>``, ...: the graph is kept, as PyTorch's
        ``.cpu()`` of a CPU tensor returns it), else a copy on plain ``cpu``.

        Where no ``cpu`` device is installed (core with OpenCL only, say), it raises a
        ``ValueError`` naming the package to install; ``.numpy()``, ``.tolist()`` and
        ``.item()`` read a tensor of any device to the host without it.

        Examples
        --------
        >>> import ember
        >>> x = ember.tensor([1.0, 2.0], device="autodiff<cpu>", requires_grad=True)
        >>> x.cpu() is x
        True
        """
        if self._device.base.name == "cpu":
            return self
        try:
            cpu = as_device("cpu")
        except (ValueError, RuntimeError) as exc:
            # Note: PyTorch always has its CPU backend; ember's is a plugin
            raise type(exc)(
                f"Tensor.cpu(): {exc}. To read this tensor of {self._device} to the host "
                "without a cpu device, use .numpy(), .tolist() or .item()") from None
        return self.to(cpu)

    def type_as(self, other: Tensor) -> Tensor:
        return self.to(dtype=other._dtype)

    def clone(self) -> Tensor:
        return _mv.contiguous(self)

    def contiguous(self) -> Tensor:
        """This tensor in a dense row-major layout: itself where its payload has one, else a
        copy (what ``_data`` or a DLPack consumer then sees), as in PyTorch."""
        return _mv.contiguous(self)

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._device.inner is None:
            capsule = self._device.backend.to_dlpack(self._data, stream)
            if capsule is not None:
                return capsule
        return self.numpy().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device.backend.dlpack_device() if self._device.inner is None else (1, 0)

    # -- Python protocols -----------------------------------------------------------------------

    def __repr__(self) -> str:
        return format_tensor(self)

    __str__ = __repr__

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return int(self._data.shape[0])

    def __iter__(self) -> Iterator[Tensor]:
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(len(self)))

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous; "
                             "use .any() or .all()")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self._dtype.kind not in "iu" or self.numel() != 1:
            raise TypeError("only integer tensors of one element can be used as an index")
        return int(self.item())

    __hash__ = object.__hash__

    def __getitem__(self, key: Any) -> Tensor:
        return _ix.getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        new = _ix.setitem(self, key, value)
        _capture.replace(self, new._data)

    # -- operators ------------------------------------------------------------------------------

    def __add__(self, o: Any) -> Tensor:
        return _ew._binary(_ewops.add, self, o, "number")

    def __radd__(self, o: Any) -> Tensor:
        return _ew.add(o, self)

    def __sub__(self, o: Any) -> Tensor:
        return _ew._binary(_ewops.sub, self, o, "number")

    def __rsub__(self, o: Any) -> Tensor:
        return _ew.sub(o, self)

    def __mul__(self, o: Any) -> Tensor:
        return _ew._binary(_ewops.mul, self, o, "number")

    def __rmul__(self, o: Any) -> Tensor:
        return _ew.mul(o, self)

    def __truediv__(self, o: Any) -> Tensor:
        return _ew._binary(_ewops.div, self, o, "float")

    def __rtruediv__(self, o: Any) -> Tensor:
        return _ew.div(o, self)

    def __floordiv__(self, o: Any) -> Tensor:
        return _ew.floordiv(self, o)

    def __rfloordiv__(self, o: Any) -> Tensor:
        return _ew.floordiv(o, self)

    def __mod__(self, o: Any) -> Tensor:
        return _ew.remainder(self, o)

    def __rmod__(self, o: Any) -> Tensor:
        return _ew.remainder(o, self)

    def __pow__(self, o: Any) -> Tensor:
        return _ew.pow(self, o)

    def __rpow__(self, o: Any) -> Tensor:
        return _ew.pow(o, self)

    def __matmul__(self, o: Tensor) -> Tensor:
        return _la.matmul(self, o)

    def __rmatmul__(self, o: Tensor) -> Tensor:
        return _la.matmul(o, self)

    def __neg__(self) -> Tensor:
        return _ew.neg(self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        return _ew.abs(self)

    def __invert__(self) -> Tensor:
        return _ew.bitwise_not(self)

    def __and__(self, o: Any) -> Tensor:
        return _ew.bitwise_and(self, o)

    def __rand__(self, o: Any) -> Tensor:
        return _ew.bitwise_and(o, self)

    def __or__(self, o: Any) -> Tensor:
        return _ew.bitwise_or(self, o)

    def __ror__(self, o: Any) -> Tensor:
        return _ew.bitwise_or(o, self)

    def __xor__(self, o: Any) -> Tensor:
        return _ew.bitwise_xor(self, o)

    def __rxor__(self, o: Any) -> Tensor:
        return _ew.bitwise_xor(o, self)

    def __lshift__(self, o: Any) -> Tensor:
        return _ew.left_shift(self, o)

    def __rshift__(self, o: Any) -> Tensor:
        return _ew.right_shift(self, o)

    def __eq__(self, o: Any) -> Tensor:  # type: ignore[override]  # elementwise, as PyTorch
        if not isinstance(o, (Tensor, int, float)):
            return NotImplemented
        return _ew.eq(self, o)

    def __ne__(self, o: Any) -> Tensor:  # type: ignore[override]  # elementwise, as PyTorch
        if not isinstance(o, (Tensor, int, float)):
            return NotImplemented
        return _ew.ne(self, o)

    def __lt__(self, o: Any) -> Tensor:
        return _ew.lt(self, o)

    def __le__(self, o: Any) -> Tensor:
        return _ew.le(self, o)

    def __gt__(self, o: Any) -> Tensor:
        return _ew.gt(self, o)

    def __ge__(self, o: Any) -> Tensor:
        return _ew.ge(self, o)

    # -- elementwise methods --------------------------------------------------------------------

    def add(self, o: Any, *, alpha: float = 1) -> Tensor:
        return _ew.add(self, o if alpha == 1 else o * alpha)

    def sub(self, o: Any, *, alpha: float = 1) -> Tensor:
        return _ew.sub(self, o if alpha == 1 else o * alpha)

    def mul(self, o: Any) -> Tensor:
        return _ew.mul(self, o)

    def div(self, o: Any, *, rounding_mode: str | None = None) -> Tensor:
        return _ew.div(self, o, rounding_mode=rounding_mode)

    divide = div

    def pow(self, o: Any) -> Tensor:
        return _ew.pow(self, o)

    def maximum(self, o: Any) -> Tensor:
        return _ew.maximum(self, o)

    def minimum(self, o: Any) -> Tensor:
        return _ew.minimum(self, o)

    def exp(self) -> Tensor:
        return _ew.exp(self)

    def expm1(self) -> Tensor:
        return _ew.expm1(self)

    def log(self) -> Tensor:
        return _ew.log(self)

    def log1p(self) -> Tensor:
        return _ew.log1p(self)

    def sqrt(self) -> Tensor:
        return _ew.sqrt(self)

    def rsqrt(self) -> Tensor:
        return _ew.rsqrt(self)

    def sin(self) -> Tensor:
        return _ew.sin(self)

    def cos(self) -> Tensor:
        return _ew.cos(self)

    def tan(self) -> Tensor:
        return _ew.tan(self)

    def tanh(self) -> Tensor:
        return _ew.tanh(self)

    def asin(self) -> Tensor:
        return _ew.asin(self)

    def acos(self) -> Tensor:
        return _ew.acos(self)

    def atan(self) -> Tensor:
        return _ew.atan(self)

    def asinh(self) -> Tensor:
        return _ew.asinh(self)

    def acosh(self) -> Tensor:
        return _ew.acosh(self)

    def atanh(self) -> Tensor:
        return _ew.atanh(self)

    arcsinh, arccosh, arctanh = asinh, acosh, atanh

    def copysign(self, o: Any) -> Tensor:
        return _ew.copysign(self, o)

    def sinh(self) -> Tensor:
        return _ew.sinh(self)

    def cosh(self) -> Tensor:
        return _ew.cosh(self)

    def erf(self) -> Tensor:
        return _ew.erf(self)

    def sigmoid(self) -> Tensor:
        return _ew.sigmoid(self)

    def reciprocal(self) -> Tensor:
        return _ew.reciprocal(self)

    def neg(self) -> Tensor:
        return _ew.neg(self)

    def abs(self) -> Tensor:
        return _ew.abs(self)

    def sign(self) -> Tensor:
        return _ew.sign(self)

    def floor(self) -> Tensor:
        return _ew.floor(self)

    def ceil(self) -> Tensor:
        return _ew.ceil(self)

    def round(self) -> Tensor:
        return _ew.round(self)

    def trunc(self) -> Tensor:
        return _ew.trunc(self)

    def logical_not(self) -> Tensor:
        return _ew.logical_not(self)

    def isnan(self) -> Tensor:
        return _ew.isnan(self)

    def isinf(self) -> Tensor:
        return _ew.isinf(self)

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:
        return _ew.clamp(self, min, max)

    clip = clamp

    def where(self, condition: Tensor, other: Any) -> Tensor:
        return _ew.where(condition, self, other)

    def relu(self) -> Tensor:
        return _fn.relu(self)

    def gelu(self, approximate: str = "none") -> Tensor:
        return _fn.gelu(self, approximate)

    def silu(self) -> Tensor:
        return _fn.silu(self)

    def softmax(self, dim: int = -1) -> Tensor:
        return _fn.softmax(self, dim)

    def log_softmax(self, dim: int = -1) -> Tensor:
        return _fn.log_softmax(self, dim)

    def logsumexp(self, dim: int | Sequence[int], keepdim: bool = False) -> Tensor:
        return _fn.logsumexp(self, dim, keepdim)

    # -- reductions -----------------------------------------------------------------------------

    def sum(self, dim: Dim = None, keepdim: bool = False, *, dtype: Any = None,
            axis: Dim = None) -> Tensor:
        return _red.sum(self, dim, keepdim, dtype=dtype, axis=axis)

    def prod(self, dim: Dim = None, keepdim: bool = False, *, dtype: Any = None,
             axis: Dim = None) -> Tensor:
        return _red.prod(self, dim, keepdim, dtype=dtype, axis=axis)

    def mean(self, dim: Dim = None, keepdim: bool = False, *, dtype: Any = None,
             axis: Dim = None) -> Tensor:
        return _red.mean(self, dim, keepdim, dtype=dtype, axis=axis)

    def amax(self, dim: Dim = None, keepdim: bool = False, *, axis: Dim = None) -> Tensor:
        return _red.amax(self, dim, keepdim, axis=axis)

    def amin(self, dim: Dim = None, keepdim: bool = False, *, axis: Dim = None) -> Tensor:
        return _red.amin(self, dim, keepdim, axis=axis)

    def max(self, dim: Any = None, keepdim: bool = False, *, axis: int | None = None) -> Any:
        return _red.max(self, dim, keepdim, axis=axis)

    def min(self, dim: Any = None, keepdim: bool = False, *, axis: int | None = None) -> Any:
        return _red.min(self, dim, keepdim, axis=axis)

    def argmax(self, dim: int | None = None, keepdim: bool = False, *,
               axis: int | None = None) -> Tensor:
        return _red.argmax(self, dim, keepdim, axis=axis)

    def argmin(self, dim: int | None = None, keepdim: bool = False, *,
               axis: int | None = None) -> Tensor:
        return _red.argmin(self, dim, keepdim, axis=axis)

    def any(self, dim: Dim = None, keepdim: bool = False, *, axis: Dim = None) -> Tensor:
        return _red.any(self, dim, keepdim, axis=axis)

    def all(self, dim: Dim = None, keepdim: bool = False, *, axis: Dim = None) -> Tensor:
        return _red.all(self, dim, keepdim, axis=axis)

    def var(self, dim: Dim = None, keepdim: bool = False, *, correction: int = 1,
            unbiased: bool | None = None, axis: Dim = None) -> Tensor:
        return _red.var(self, dim, keepdim, correction=correction, unbiased=unbiased, axis=axis)

    def std(self, dim: Dim = None, keepdim: bool = False, *, correction: int = 1,
            unbiased: bool | None = None, axis: Dim = None) -> Tensor:
        return _red.std(self, dim, keepdim, correction=correction, unbiased=unbiased, axis=axis)

    def norm(self, p: float = 2, dim: Dim = None, keepdim: bool = False) -> Tensor:
        if p == 2:
            return (self * self).sum(dim, keepdim).sqrt()
        if p == 1:
            return self.abs().sum(dim, keepdim)
        if p == float("inf"):
            return self.abs().amax(dim, keepdim)
        return (self.abs() ** p).sum(dim, keepdim) ** (1.0 / p)

    def cumsum(self, dim: int, *, dtype: Any = None) -> Tensor:
        return _red.cumsum(self, dim, dtype=dtype)

    def cumprod(self, dim: int, *, dtype: Any = None) -> Tensor:
        return _red.cumprod(self, dim, dtype=dtype)

    # -- movement -------------------------------------------------------------------------------

    def reshape(self, *shape: Any) -> Tensor:
        return _mv.reshape(self, *shape)

    view = reshape

    def view_as(self, other: Tensor) -> Tensor:
        return _mv.reshape(self, other.shape)

    reshape_as = view_as

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        return _mv.flatten(self, start_dim, end_dim)

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        return _mv.unflatten(self, dim, sizes)

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        return _mv.squeeze(self, dim)

    def unsqueeze(self, dim: int) -> Tensor:
        return _mv.unsqueeze(self, dim)

    def permute(self, *dims: Any) -> Tensor:
        return _mv.permute(self, *dims)

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        return _mv.transpose(self, dim0, dim1)

    swapaxes = transpose

    def t(self) -> Tensor:
        return self if self.ndim < 2 else _mv.transpose(self, 0, 1)

    def expand(self, *shape: Any) -> Tensor:
        return _mv.expand(self, *shape)

    def expand_as(self, other: Tensor) -> Tensor:
        return _mv.expand(self, other.shape)

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        return _mv.expand(self, tuple(shape))

    def repeat(self, *reps: Any) -> Tensor:
        return _mv.repeat(self, *reps)

    def flip(self, dims: int | Sequence[int]) -> Tensor:
        return _mv.flip(self, dims)

    def roll(self, shifts: int | Sequence[int],
             dims: int | Sequence[int] | None = None) -> Tensor:
        return _mv.roll(self, shifts, dims)

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        return _mv.narrow(self, dim, start, length)

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> list[Tensor]:
        return _mv.split(self, split_size, dim)

    def chunk(self, chunks: int, dim: int = 0) -> list[Tensor]:
        return _mv.chunk(self, chunks, dim)

    def gather(self, dim: int, index: Tensor) -> Tensor:
        return _mv.gather(self, dim, index)

    def scatter(self, dim: int, index: Tensor, src: Any) -> Tensor:
        return _mv.scatter(self, dim, index, src)

    def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        return _mv.scatter_add(self, dim, index, src)

    def index_copy(self, dim: int, index: Tensor, source: Tensor) -> Tensor:
        return _mv.index_copy(self, dim, index, source)

    def index_copy_(self, dim: int, index: Tensor, source: Tensor) -> Tensor:
        """``index_copy`` in place: this tensor takes the result (as ``x[key] = v`` does)."""
        new = _mv.index_copy(self, dim, index, source)
        if self.requires_grad and getattr(self, "is_leaf", False):
            self[...] = new  # the autodiff tensor's check for leaves that require grad
        else:
            _capture.replace(self, new._data)
        return self

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        return _mv.index_select(self, dim, index)

    def masked_fill(self, mask: Tensor, value: float) -> Tensor:
        return _mv.masked_fill(self, mask, value)

    def tril(self, diagonal: int = 0) -> Tensor:
        return _mv.tril(self, diagonal)

    def triu(self, diagonal: int = 0) -> Tensor:
        return _mv.triu(self, diagonal)

    def nonzero(self) -> Any:
        return _mv.nonzero(self)

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
        return _mv.sort(self, dim, descending, stable)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
        return _mv.argsort(self, dim, descending, stable)

    def topk(self, k: int, dim: int = -1, largest: bool = True,
             sorted: bool = True) -> ValuesIndices:
        return _mv.topk(self, k, dim, largest, sorted)

    def matmul(self, o: Tensor) -> Tensor:
        return _la.matmul(self, o)

    def bmm(self, o: Tensor) -> Tensor:
        return _la.bmm(self, o)

    def isclose(self, o: Any, rtol: float = 1e-05, atol: float = 1e-08,
                equal_nan: bool = False) -> Tensor:
        return _ew.isclose(self, o, rtol, atol, equal_nan)

    def allclose(self, o: Any, rtol: float = 1e-05, atol: float = 1e-08,
                 equal_nan: bool = False) -> bool:
        return _ew.allclose(self, o, rtol, atol, equal_nan)

    def unfold(self, dimension: int, size: int, step: int) -> Tensor:
        return _win.unfold(self, dimension, size, step)

    def diff(self, n: int = 1, dim: int = -1, prepend: Tensor | None = None,
             append: Tensor | None = None) -> Tensor:
        return _mv.diff(self, n, dim, prepend, append)

    def movedim(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
        return _mv.movedim(self, source, destination)

    def repeat_interleave(self, repeats: int | Tensor, dim: int | None = None, *,
                          output_size: int | None = None) -> Tensor:
        return _mv.repeat_interleave(self, repeats, dim, output_size=output_size)

    def unique(self, sorted: bool = True, return_inverse: bool = False,
               return_counts: bool = False, dim: int | None = None) -> Any:
        return _set.unique(self, sorted, return_inverse, return_counts, dim)

    def bincount(self, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
        return _set.bincount(self, weights, minlength)

    def dropout(self, p: float = 0.5, training: bool = True,
                generator: Generator | None = None) -> Tensor:
        return _fn.dropout(self, p, training, generator)


    # -- PyTorch's other names: composites (`_pointwise`, `_matrix`, `_stacking`, ...) ---------

    def square(self) -> Tensor:
        return _pw.square(self)

    absolute = abs
    negative = neg
    sgn = sign  # Note: ember has no complex dtypes, where sgn and sign differ
    fix = trunc

    def subtract(self, o: Any, *, alpha: float = 1) -> Tensor:
        return self.sub(o, alpha=alpha)

    def true_divide(self, o: Any) -> Tensor:
        return _ew.div(self, o)

    def floor_divide(self, o: Any) -> Tensor:
        return _ew.floordiv(self, o)

    def remainder(self, o: Any) -> Tensor:
        return _ew.remainder(self, o)

    def fmod(self, o: Any) -> Tensor:
        return _pw.fmod(self, o)

    def frac(self) -> Tensor:
        return _pw.frac(self)

    def exp2(self) -> Tensor:
        return _pw.exp2(self)

    def log2(self) -> Tensor:
        return _pw.log2(self)

    def log10(self) -> Tensor:
        return _pw.log10(self)

    def isfinite(self) -> Tensor:
        return _pw.isfinite(self)

    def isposinf(self) -> Tensor:
        return _pw.isposinf(self)

    def isneginf(self) -> Tensor:
        return _pw.isneginf(self)

    def hypot(self, o: Any) -> Tensor:
        return _pw.hypot(self, o)

    def logaddexp(self, o: Any) -> Tensor:
        return _pw.logaddexp(self, o)

    def lerp(self, end: Any, weight: Any) -> Tensor:
        return _pw.lerp(self, end, weight)

    def xlogy(self, o: Any) -> Tensor:
        return _pw.xlogy(self, o)

    def logit(self, eps: float | None = None) -> Tensor:
        return _pw.logit(self, eps)

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None,
                   neginf: float | None = None) -> Tensor:
        return _pw.nan_to_num(self, nan, posinf, neginf)

    def deg2rad(self) -> Tensor:
        return _pw.deg2rad(self)

    def rad2deg(self) -> Tensor:
        return _pw.rad2deg(self)

    def heaviside(self, values: Any) -> Tensor:
        return _pw.heaviside(self, values)

    def float_power(self, o: Any) -> Tensor:
        return _pw.float_power(self, o)

    def addcmul(self, t1: Tensor, t2: Tensor, *, value: float = 1) -> Tensor:
        return _pw.addcmul(self, t1, t2, value=value)

    def addcdiv(self, t1: Tensor, t2: Tensor, *, value: float = 1) -> Tensor:
        return _pw.addcdiv(self, t1, t2, value=value)

    def atan2(self, o: Any) -> Tensor:
        return _ew.atan2(self, o)

    def eq(self, o: Any) -> Tensor:
        return _ew.eq(self, o)

    def ne(self, o: Any) -> Tensor:
        return _ew.ne(self, o)

    def lt(self, o: Any) -> Tensor:
        return _ew.lt(self, o)

    def le(self, o: Any) -> Tensor:
        return _ew.le(self, o)

    def gt(self, o: Any) -> Tensor:
        return _ew.gt(self, o)

    def ge(self, o: Any) -> Tensor:
        return _ew.ge(self, o)

    def bitwise_and(self, o: Any) -> Tensor:
        return _ew.bitwise_and(self, o)

    def bitwise_or(self, o: Any) -> Tensor:
        return _ew.bitwise_or(self, o)

    def bitwise_xor(self, o: Any) -> Tensor:
        return _ew.bitwise_xor(self, o)

    def bitwise_not(self) -> Tensor:
        return _ew.bitwise_not(self)

    def logical_and(self, o: Any) -> Tensor:
        return _ew.logical_and(self, o)

    def logical_or(self, o: Any) -> Tensor:
        return _ew.logical_or(self, o)

    def logical_xor(self, o: Any) -> Tensor:
        return _ew.logical_xor(self, o)

    def nansum(self, dim: Dim = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        return _pw.nansum(self, dim, keepdim, dtype=dtype)

    def nanmean(self, dim: Dim = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        return _pw.nanmean(self, dim, keepdim, dtype=dtype)

    def count_nonzero(self, dim: Dim = None) -> Tensor:
        return _pw.count_nonzero(self, dim)

    def aminmax(self, *, dim: int | None = None, keepdim: bool = False) -> Any:
        return _stat.aminmax(self, dim=dim, keepdim=keepdim)

    def median(self, dim: int | None = None, keepdim: bool = False) -> Any:
        return _stat.median(self, dim, keepdim)

    def quantile(self, q: Any, dim: int | None = None, keepdim: bool = False, *,
                 interpolation: str = "linear") -> Tensor:
        return _stat.quantile(self, q, dim, keepdim, interpolation=interpolation)

    def mm(self, o: Tensor) -> Tensor:
        return _mat.mm(self, o)

    def mv(self, v: Tensor) -> Tensor:
        return _mat.mv(self, v)

    def dot(self, o: Tensor) -> Tensor:
        return _mat.dot(self, o)

    vdot = dot

    # Note: no `inner` method: an autodiff tensor's `.inner` is its value on the inner device;
    # PyTorch's `x.inner(y)` is `ember.inner(x, y)`

    def outer(self, o: Tensor) -> Tensor:
        return _la.outer(self, o)

    def addmm(self, m1: Tensor, m2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
        return _mat.addmm(self, m1, m2, beta=beta, alpha=alpha)

    def addmv(self, mat: Tensor, vec: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
        return _mat.addmv(self, mat, vec, beta=beta, alpha=alpha)

    def baddbmm(self, b1: Tensor, b2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
        return _mat.baddbmm(self, b1, b2, beta=beta, alpha=alpha)

    def addbmm(self, b1: Tensor, b2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
        return _mat.addbmm(self, b1, b2, beta=beta, alpha=alpha)

    def kron(self, o: Tensor) -> Tensor:
        return _mat.kron(self, o)

    def cross(self, o: Tensor, dim: int | None = None) -> Tensor:
        return _mat.cross(self, o, dim)

    def trace(self) -> Tensor:
        return _mat.trace(self)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        return _mat.diagonal(self, offset, dim1, dim2)

    def diag(self, diagonal: int = 0) -> Tensor:
        return _mat.diag(self, diagonal)

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        return _stk.unbind(self, dim)

    def select(self, dim: int, index: int) -> Tensor:
        return _stk.select(self, dim, index)

    def take(self, index: Tensor) -> Tensor:
        return _stk.take(self, index)

    def take_along_dim(self, indices: Tensor, dim: int | None = None) -> Tensor:
        return _stk.take_along_dim(self, indices, dim)

    def tile(self, *dims: Any) -> Tensor:
        reps = tuple(dims[0]) if len(dims) == 1 and not isinstance(dims[0], int) else dims
        return _stk.tile(self, reps)

    def fliplr(self) -> Tensor:
        return _stk.fliplr(self)

    def flipud(self) -> Tensor:
        return _stk.flipud(self)

    def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
        return _stk.rot90(self, k, dims)

    def masked_select(self, mask: Tensor) -> Tensor:
        return _stk.masked_select(self, mask)

    def argwhere(self) -> Tensor:
        return _stk.argwhere(self)

    def equal(self, o: Tensor) -> bool:
        """True if ``o`` has this shape and the same values (nan never equals nan)."""
        return self.shape == o.shape and bool(_red.all(_ew.eq(self, o)).item())

    def nelement(self) -> int:
        return self.numel()

    def ndimension(self) -> int:
        return self.ndim

    def element_size(self) -> int:
        return self._dtype.itemsize

    def new_tensor(self, data: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
        return _creation.tensor(data, dtype=dtype or self._dtype, device=device or self._device)

    def new_full(self, size: Sequence[int], fill_value: Any, *, dtype: Any = None,
                 device: Any = None) -> Tensor:
        return _creation.full(tuple(size), fill_value, dtype=dtype or self._dtype,
                              device=device or self._device)

    def new_zeros(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return self.new_full(_size(size), 0, dtype=dtype, device=device)

    def new_ones(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return self.new_full(_size(size), 1, dtype=dtype, device=device)

    def new_empty(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return self.new_full(_size(size), 0, dtype=dtype, device=device)

    # conversions last: their names shadow builtins in the class body
    def type(self, dtype: Any) -> Tensor:
        return self.to(dtype=dtype)

    def float(self) -> Tensor:
        return self.to(dtype=dt.float32)

    def double(self) -> Tensor:
        return self.to(dtype=dt.float64)

    def half(self) -> Tensor:
        return self.to(dtype=dt.float16)

    def bfloat16(self) -> Tensor:
        return self.to(dtype=dt.bfloat16)

    def long(self) -> Tensor:
        return self.to(dtype=dt.int64)

    def int(self) -> Tensor:
        return self.to(dtype=dt.int32)

    def bool(self) -> Tensor:
        return self.to(dtype=dt.bool_)

# the slots' public names (see the comment at the top of Tensor)
for _public, _slot in (("payload", "_data"), ("device", "_device"), ("dtype", "_dtype"),
                       ("_make", "from_payload")):
    setattr(Tensor, _public, Tensor.__dict__[_slot])
del _public, _slot


def _size(size: tuple[Any, ...]) -> tuple[int, ...]:
    """``new_zeros(2, 3)`` and ``new_zeros((2, 3))`` alike."""
    if len(size) == 1 and not isinstance(size[0], int):
        return tuple(size[0])
    return tuple(size)


def bind() -> None:
    """Give Tensor's methods the op modules; ``ember/__init__.py`` calls this once, when it has
    imported them all.

    Every op module imports ``Tensor`` from here, so this module imports none of them at its
    top (that would be an import cycle).  The methods read each op module from a global that
    this sets: one module-global look-up per call, as a top-level import would give.
    """
    global _apply, _creation, _ew, _ix, _la, _mv, _mat, _pw, _red, _set, _stk, _stat, _win, _fn
    from . import (
        _apply,
        _creation,
        _elementwise as _ew,
        _indexing as _ix,
        _linalg as _la,
        _manipulation as _mv,
        _matrix as _mat,
        _pointwise as _pw,
        _reduction as _red,
        _set,
        _stacking as _stk,
        _statistics as _stat,
        _windows as _win,
        functional as _fn,
    )
