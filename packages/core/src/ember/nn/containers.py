"""Containers: `Sequential`, `ModuleList`, `ModuleDict` (submodules named "0", "1", ... or keys)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Self, overload

from .module import Module

__all__ = ["ModuleDict", "ModuleList", "Sequential"]


class _ModuleSequence(Module):
    """What `Sequential` and `ModuleList` share: length, iteration over the modules, and
    indexing (a slice gives a container of the same kind, made by ``_of``)."""

    def _of(self, items: list[tuple[str, Module]]) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return (m for m in self._modules.values() if m is not None)

    @overload
    def __getitem__(self, idx: int) -> Module: ...
    @overload
    def __getitem__(self, idx: slice) -> Self: ...

    def __getitem__(self, idx: int | slice) -> Module:
        items = list(self._modules.items())
        if isinstance(idx, slice):
            out: Module = self._of([(k, m) for k, m in items[idx] if m is not None])
            return out
        m = items[idx][1]
        assert m is not None
        return m


class Sequential(_ModuleSequence):
    """Modules applied one after another; parameters are named ``"0.weight"`` and so on.

    Accepts modules as arguments or one mapping of names to modules.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> net = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    >>> net(ember.ones(2, 3)).shape
    (2, 4)
    """

    def __init__(self, *modules: Module | Mapping[str, Module]) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, mod in enumerate(modules):
                if not isinstance(mod, Module):
                    raise TypeError(f"Sequential: argument {i} is a {type(mod).__name__}, "
                                    "not a Module")
                self.add_module(str(i), mod)

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            if m is not None:
                x = m(x)
        return x

    def append(self, module: Module) -> Sequential:
        self.add_module(str(len(self._modules)), module)
        return self

    def _of(self, items: list[tuple[str, Module]]) -> Any:
        return Sequential(dict(items))  # a slice keeps the names


class ModuleList(_ModuleSequence):
    """A list of modules, registered under ``"0"``, ``"1"``, ...

    Examples
    --------
    >>> from ember import nn
    >>> blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    >>> len(blocks), len(list(blocks.parameters()))
    (3, 6)
    """

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> ModuleList:
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList holds Modules, got {type(module).__name__}")
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def _of(self, items: list[tuple[str, Module]]) -> Any:
        return ModuleList([m for _, m in items])  # a slice is numbered afresh

    def __setitem__(self, idx: int, module: Module) -> None:
        key = list(self._modules)[idx]
        self._modules[key] = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleList has no forward(); iterate over its modules")


class ModuleDict(Module):
    """A dict of modules, registered under their keys.

    Examples
    --------
    >>> from ember import nn
    >>> heads = nn.ModuleDict({"cls": nn.Linear(4, 3), "reg": nn.Linear(4, 1)})
    >>> [n for n, _ in heads.named_parameters()]
    ['cls.weight', 'cls.bias', 'reg.weight', 'reg.bias']
    """

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        super().__init__()
        for k, m in (modules or {}).items():
            self[k] = m

    def __getitem__(self, key: str) -> Module:
        m = self._modules[key]
        assert m is not None
        return m

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"ModuleDict holds Modules, got {type(module).__name__}")
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def keys(self) -> list[str]:
        return list(self._modules)

    def values(self) -> list[Module]:
        return [m for m in self._modules.values() if m is not None]

    def items(self) -> list[tuple[str, Module]]:
        return [(k, m) for k, m in self._modules.items() if m is not None]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleDict has no forward(); call its modules by key")
