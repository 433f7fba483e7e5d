"""`Module`: a tree of layers whose parameters and buffers are found from its attributes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _capture
from .._device import Device, device as _device
from .._dtype import DType, as_dtype
from .._errors import RecordError
from .._tensor import Tensor
from ._values import as_leaf, describe, rebind

__all__ = ["IncompatibleKeys", "Module", "Parameter", "ParameterMarker"]


class ParameterMarker:
    """Marks a tensor assigned to a module attribute as a trainable parameter.

    The attribute then reads back as the tensor itself (there is no wrapper type at run time):
    ``self.weight = Parameter(ember.zeros(3))`` makes ``self.weight`` an ``ember.Tensor`` listed
    by `Module.named_parameters`.  ``requires_grad=False`` registers it frozen.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> class Scale(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.gain = nn.Parameter(ember.ones(3))
    ...     def forward(self, x):
    ...         return x * self.gain
    >>> [name for name, _ in Scale().named_parameters()]
    ['gain']
    """

    __slots__ = ("data", "requires_grad")

    # Note: not a Tensor subclass as in PyTorch: a tensor's class is chosen by its device
    # (AutodiffTensor on autodiff<...>), so the marker only lives until Module.__setattr__.

    def __init__(self, data: Tensor, requires_grad: bool = True) -> None:
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter needs an ember.Tensor, got {type(data).__name__}")
        self.data = data
        self.requires_grad = requires_grad


if TYPE_CHECKING:
    def Parameter(data: Tensor, requires_grad: bool = True) -> Tensor:
        """Type checkers see the tensor that the attribute reads back as."""
        ...
else:
    Parameter = ParameterMarker


class IncompatibleKeys(NamedTuple):
    """What `Module.load_state_dict` left out: keys the module lacks and keys the state lacks."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class of layers and models.

    Assigning a `Parameter`, a `Module`, a list or dict of modules, or a buffer registered with
    :meth:`register_buffer` to an attribute registers it; parameters are then found by
    :meth:`named_parameters` under dotted paths (``"layers.0.weight"``), moved by :meth:`to`,
    saved by :meth:`state_dict`.  Subclasses implement ``forward``; calling the module calls it.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> model.num_params()
    58
    >>> model(ember.zeros(3, 4)).shape
    (3, 2)
    """

    training: bool
    _parameters: dict[str, Tensor | None]
    _buffers: dict[str, Tensor | None]
    _modules: dict[str, Module | None]
    _trainable: dict[str, bool]
    _non_persistent: set[str]

    def __init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "training", True)
        set_(self, "_parameters", {})
        set_(self, "_buffers", {})
        set_(self, "_modules", {})
        set_(self, "_trainable", {})
        set_(self, "_non_persistent", set())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # -- attribute registration -----------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        if "_parameters" not in d:
            if isinstance(value, (ParameterMarker, Module, Tensor)):
                raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                     f"assigning {name!r}")
            object.__setattr__(self, name, value)
            return
        value = _as_container(value)
        params, buffers, modules = self._parameters, self._buffers, self._modules
        if isinstance(value, (ParameterMarker, Module)) or name in params or name in buffers:
            _capture.invalidate()  # compiled functions must not read the tensor it replaces
        if isinstance(value, ParameterMarker):
            self._forget(name)
            self._trainable[name] = value.requires_grad
            params[name] = as_leaf(value.data, value.requires_grad)
        elif isinstance(value, Module):
            self._forget(name)
            modules[name] = value
        elif name in params:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} to parameter {name!r} "
                                "(a Tensor or None expected)")
            params[name] = None if value is None else as_leaf(value, self._trainable[name])
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} to buffer {name!r} "
                                "(a Tensor or None expected)")
            buffers[name] = value
        elif name in modules:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} to submodule {name!r} "
                                "(a Module or None expected)")
            modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails: parameters, buffers and submodules live here
        d = self.__dict__
        params = d.get("_parameters")  # the common case (a layer reading its weights) first
        if params is not None and name in params:
            return params[name]
        for table in ("_buffers", "_modules"):
            entries = d.get(table)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        if not self._forget(name):
            object.__delattr__(self, name)

    def _forget(self, name: str) -> bool:
        found = False
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                found = True
        self._trainable.pop(name, None)
        self._non_persistent.discard(name)
        self.__dict__.pop(name, None)
        return found

    def register_parameter(self, name: str, value: Tensor | None,
                           requires_grad: bool = True) -> None:
        """Register ``value`` as parameter ``name`` (``None`` reserves the name, as ``bias``)."""
        if value is None:
            self._forget(name)
            self._trainable[name] = requires_grad
            self._parameters[name] = None
        else:
            setattr(self, name, ParameterMarker(value, requires_grad))

    def register_buffer(self, name: str, value: Tensor | None, persistent: bool = True) -> None:
        """Register a tensor that is state but not trained (running statistics, masks).

        Persistent buffers are part of :meth:`state_dict`.
        """
        self._forget(name)
        self._buffers[name] = value
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    # -- traversal ------------------------------------------------------------------------------

    def named_modules(self, prefix: str = "", memo: set[int] | None = None,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """This module and every submodule, with dotted paths.

        A module reachable by several paths is listed once, at its first path, unless
        ``remove_duplicate=False`` (then once per path), as in PyTorch.
        """
        if remove_duplicate:
            memo = set() if memo is None else memo
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(f"{prefix}.{name}" if prefix else name, memo,
                                           remove_duplicate)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def _named(self, table: str, prefix: str, recurse: bool, remove_duplicate: bool = True,
               persistent_only: bool = False) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        mods = (self.named_modules(prefix, remove_duplicate=remove_duplicate) if recurse
                else iter([(prefix, self)]))
        for path, m in mods:
            entries: dict[str, Tensor | None] = getattr(m, table)
            for name, t in entries.items():
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                if persistent_only and name in m._non_persistent:
                    continue
                seen.add(id(t))
                yield (f"{path}.{name}" if path else name), t

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """``(dotted path, tensor)`` of every parameter.

        A parameter shared by several modules (tied embeddings) is listed once, at its first
        path, unless ``remove_duplicate=False`` (then once per path), as in PyTorch; so
        ``parameters()`` gives an optimizer each parameter once.

        Examples
        --------
        >>> from ember import nn
        >>> [n for n, _ in nn.Sequential(nn.Linear(2, 2)).named_parameters()]
        ['0.weight', '0.bias']
        >>> emb, head = nn.Embedding(5, 2), nn.Linear(2, 5, bias=False)
        >>> head.weight = emb.weight                       # weight tying
        >>> [n for n, _ in nn.Sequential(emb, head).named_parameters()]
        ['0.weight']
        >>> [n for n, _ in nn.Sequential(emb, head).named_parameters(remove_duplicate=False)]
        ['0.weight', '1.weight']
        """
        return self._named("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every parameter, a shared one once (see :meth:`named_parameters`)."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def trainable_parameters(self) -> Iterator[Tensor]:
        """The parameters that are not frozen (a shared one once)."""
        seen: set[int] = set()
        for m in self.modules():
            for name, p in m._parameters.items():
                if p is not None and m._trainable.get(name, True) and id(p) not in seen:
                    seen.add(id(p))
                    yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """``(dotted path, tensor)`` of every buffer (a shared one once, as parameters)."""
        return self._named("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def num_params(self, trainable_only: bool = False) -> int:
        """How many scalars the parameters hold (frozen ones left out if ``trainable_only``)."""
        params = self.trainable_parameters() if trainable_only else self.parameters()
        return sum(p.numel() for p in params)

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every submodule (children first) and on this module."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # -- modes, freezing, devices ---------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Set training mode (dropout active, batch norm updating its statistics) everywhere."""
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode: ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (``False``) or unfreeze every parameter; frozen ones get no gradient.

        A parameter shared by several of the submodules stays one tensor.
        """
        done: dict[int, tuple[Tensor, Tensor]] = {}  # as in `to`: old tensors kept alive
        for m in self.modules():
            for name, p in m._parameters.items():
                m._trainable[name] = requires_grad
                if p is not None:
                    seen = done.get(id(p))
                    if seen is None:
                        seen = done[id(p)] = (p, as_leaf(p, requires_grad))
                    m._parameters[name] = seen[1]
        return self

    def freeze(self) -> Module:
        """Freeze every parameter: ``requires_grad_(False)``."""
        return self.requires_grad_(False)

    def unfreeze(self) -> Module:
        return self.requires_grad_(True)

    def to(self, device: str | Device | DType | None = None,
           dtype: DType | str | None = None) -> Module:
        """Move parameters and buffers to ``device`` and/or cast floating ones to ``dtype``.

        Parameters become new tensors (create optimizers after moving, as in PyTorch); on an
        autodiff device the trainable ones are leaves that require grad.
        """
        if isinstance(device, DType):
            device, dtype = None, device
        dev = None if device is None else _device(device)
        dt = None if dtype is None else as_dtype(dtype)

        def move(t: Tensor) -> Tensor:
            out = t if dev is None else t.to(dev)
            if dt is not None and out.is_floating_point():
                out = out.to(dtype=dt)
            return out

        # a tensor shared by several modules (tied embeddings) stays one tensor; the old
        # tensors are kept in ``done`` so that no id is reused while it runs
        done: dict[int, tuple[Tensor, Tensor]] = {}
        for m in self.modules():
            for table, param in ((m._parameters, True), (m._buffers, False)):
                for name, t in table.items():
                    if t is None:
                        continue
                    seen = done.get(id(t))
                    if seen is None:
                        new = (as_leaf(move(t.detach()), m._trainable.get(name, True))
                               if param else move(t))
                        seen = done[id(t)] = (t, new)
                    table[name] = seen[1]
        return self

    def cpu(self) -> Module:
        return self.to("cpu")

    def float(self) -> Module:
        from .._dtype import float32

        return self.to(dtype=float32)

    def double(self) -> Module:
        from .._dtype import float64

        return self.to(dtype=float64)

    def half(self) -> Module:
        from .._dtype import float16

        return self.to(dtype=float16)

    def bfloat16(self) -> Module:
        from .._dtype import bfloat16

        return self.to(dtype=bfloat16)

    @property
    def device(self) -> Device | None:
        """The device of the first parameter or buffer (``None`` for a module without any)."""
        for t in self.parameters():
            return t.device
        for t in self.buffers():
            return t.device
        return None

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self, prefix: str = "") -> dict[str, Tensor]:
        """Parameters and persistent buffers by dotted path, in PyTorch's order.

        Values are the module's tensors themselves (immutable values, so nothing needs copying).
        """
        out: dict[str, Tensor] = {}
        self._state_into(out, prefix)
        return out

    def _state_into(self, out: dict[str, Tensor], prefix: str) -> None:
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b
        for name, m in self._modules.items():
            if m is not None:
                m._state_into(out, f"{prefix}{name}.")

    def _state_slots(self) -> dict[str, tuple[Module, str, str]]:
        """``path -> (owning module, local name, "param" | "buffer")``, as state_dict orders."""
        slots: dict[str, tuple[Module, str, str]] = {}
        for path, m in self.named_modules():
            pre = f"{path}." if path else ""
            for name, p in m._parameters.items():
                if p is not None:
                    slots.setdefault(pre + name, (m, name, "param"))
            for name, b in m._buffers.items():
                if b is not None and name not in m._non_persistent:
                    slots.setdefault(pre + name, (m, name, "buffer"))
        return slots

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True,
                        cast: bool = False) -> IncompatibleKeys:
        """Load parameter and buffer values by path; on any mismatch, change nothing.

        Parameters
        ----------
        state
            ``path -> Tensor`` (or numpy array), as :meth:`state_dict` returns.
        strict
            Missing and unexpected keys are errors (else they are reported in the result).
        cast
            Convert values of another dtype to the module's dtype instead of failing.

        Returns
        -------
        IncompatibleKeys
            The keys left out (empty lists when ``strict``).

        Raises
        ------
        RecordError
            Naming every mismatching key with the module's value and the state's value.
            Parameters keep their identity: optimizers built before loading keep working.

        Examples
        --------
        >>> from ember import nn
        >>> a, b = nn.Linear(3, 2), nn.Linear(3, 2)
        >>> _ = b.load_state_dict(a.state_dict())
        >>> a.weight.tolist() == b.weight.tolist()
        True
        """
        values = prepare_state(self, state, strict=strict, cast=cast)
        return assign_state(self, values, state)

    # -- printing -------------------------------------------------------------------------------

    def extra_repr(self) -> str:
        """The text inside this module's parentheses in ``repr`` (subclasses override)."""
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, m in self._modules.items():
            text = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {text}")
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        head = f"{type(self).__name__}({extra}" if extra else f"{type(self).__name__}("
        return head + ("\n" if not extra else ",\n") + "\n".join(lines) + "\n)"

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._parameters, *self._buffers, *self._modules})


def prepare_state(module: Module, state: Mapping[str, Any], *, strict: bool, cast: bool,
                  source: str = "state") -> dict[str, Tensor]:
    """Check ``state`` against ``module`` and return the values to assign, on the right devices.

    Every problem is collected first and raised together, so nothing is assigned on failure.
    """
    slots = module._state_slots()
    problems: list[str] = []
    values: dict[str, Tensor] = {}
    for path, (owner, name, kind) in slots.items():
        current = (owner._parameters if kind == "param" else owner._buffers)[name]
        assert current is not None
        if path not in state:
            if strict:
                problems.append(f"missing key {path!r}: the module has {describe(current)}, "
                                f"the {source} has no such key")
            continue
        raw = state[path]
        value = raw if isinstance(raw, Tensor) else _from_array(raw, path, problems)
        if value is None:
            continue
        if tuple(value.shape) != tuple(current.shape):
            problems.append(f"key {path!r}: shape mismatch: the module has "
                            f"{describe(current)}, the {source} has {describe(value)}")
            continue
        if value.dtype is not current.dtype:
            if not cast:
                problems.append(f"key {path!r}: dtype mismatch: the module has "
                                f"{describe(current)}, the {source} has {describe(value)} "
                                "(pass cast=True to convert)")
                continue
            value = value.to(dtype=current.dtype)
        value = value.detach()
        if value.device is not current.device:
            value = value.to(current.device)
        values[path] = value
    if strict:
        for path in state:
            if path not in slots:
                value = state[path]
                problems.append(f"unexpected key {path!r}: the {source} has {describe(value)}, "
                                "the module has no such parameter or buffer")
    if problems:
        raise RecordError(f"cannot load the {source} into {type(module).__name__}: "
                          + "; ".join(problems))
    return values


def assign_state(module: Module, values: Mapping[str, Tensor],
                 state: Mapping[str, Any]) -> IncompatibleKeys:
    """Give the module the checked ``values`` (from `prepare_state`); parameters keep identity."""
    slots = module._state_slots()
    for path, value in values.items():
        owner, name, kind = slots[path]
        if kind == "param":
            current = owner._parameters[name]
            assert current is not None
            rebind(current, value)
        else:
            owner._buffers[name] = value
    missing = [k for k in slots if k not in state]
    unexpected = [k for k in state if k not in slots]
    return IncompatibleKeys(missing, unexpected)


def _from_array(raw: Any, path: str, problems: list[str]) -> Tensor | None:
    from .._creation import tensor

    try:
        return tensor(raw)
    except (TypeError, ValueError) as exc:
        problems.append(f"key {path!r}: cannot make a tensor of {type(raw).__name__}: {exc}")
        return None


def _as_container(value: Any) -> Any:
    """Lists/tuples of modules become a ModuleList, dicts of modules a ModuleDict."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Module) for v in value):
        from .containers import ModuleList

        return ModuleList(value)
    if isinstance(value, dict) and value and all(
            isinstance(k, str) and isinstance(v, Module) for k, v in value.items()):
        from .containers import ModuleDict

        return ModuleDict(value)
    return value
