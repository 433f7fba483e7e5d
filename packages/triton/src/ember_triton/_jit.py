"""Kernel libraries per execution mode: compiled for a GPU, or run by Triton's interpreter.

``@triton.jit`` decides at decoration time whether a function is compiled or interpreted (the
``TRITON_INTERPRET`` knob).  ember therefore never imports kernel modules directly: each mode
executes the kernel sources (``ember_triton/kernels/*.py`` and the generated elementwise
kernels) into its own namespace with the knob set for that mode, so a process may hold both a
``triton-interpret`` and a ``cuda:0`` device.  Generated sources are registered with
``linecache`` because Triton reads a kernel's source back through ``inspect``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import linecache
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["KernelLibrary", "enable_interpreter"]

_KERNEL_DIR = Path(__file__).parent / "kernels"
_LOCK = threading.RLock()
_LIBRARIES: dict[bool, KernelLibrary] = {}


def enable_interpreter() -> None:
    """Make this process run Triton kernels in the interpreter.

    Triton decides when ``triton.language`` is imported whether its own library functions
    (``tl.sum``, ``tl.zeros``, ...) are interpreted, so ``TRITON_INTERPRET=1`` must be set
    before that import.  The interpreter device calls this when it is first created; a
    process therefore runs either the interpreter or GPU devices, not both: where triton came
    in compiled first, the interpreter device is unavailable (`DeviceUnavailableError`, a
    RuntimeError, saying why).
    """
    import os
    import sys

    if "triton.language" in sys.modules:
        from triton.language import standard
        from triton.runtime.interpreter import InterpretedFunction

        if not isinstance(standard.zeros, InterpretedFunction):
            from ember.backend import DeviceUnavailableError

            raise DeviceUnavailableError(
                "device 'triton-interpret' needs Triton's interpreter, but triton was imported "
                "in compiled mode in this process; set TRITON_INTERPRET=1 before importing "
                "triton (or create the interpreter device first)")
        return
    os.environ["TRITON_INTERPRET"] = "1"


class _interpret_knob:
    """Set Triton's interpret knob while kernels are defined."""

    def __init__(self, interpret: bool) -> None:
        self.interpret = interpret

    def __enter__(self) -> None:
        from triton import knobs

        self.old = knobs.runtime.interpret
        knobs.runtime.interpret = self.interpret

    def __exit__(self, *exc: object) -> None:
        from triton import knobs

        knobs.runtime.interpret = self.old


class KernelLibrary:
    """The kernels of one mode: modules by name, and a cache of generated kernels."""

    def __init__(self, interpret: bool) -> None:
        self.interpret = interpret
        self.mode = "interpret" if interpret else "compiled"
        self._modules: dict[str, ModuleType] = {}
        self._generated: dict[Any, Any] = {}
        #: id(kernel) -> how to rebuild it in another mode (see `ember_triton._aot`)
        self.origins: dict[int, tuple[str, ...]] = {}

    @classmethod
    def get(cls, interpret: bool) -> KernelLibrary:
        with _LOCK:
            lib = _LIBRARIES.get(interpret)
            if lib is None:
                lib = _LIBRARIES[interpret] = cls(interpret)
            return lib

    def module(self, name: str) -> ModuleType:
        """The kernel module ``kernels/<name>.py`` defined in this mode."""
        mod = self._modules.get(name)
        if mod is not None:
            return mod
        with _LOCK:
            mod = self._modules.get(name)
            if mod is None:
                path = _KERNEL_DIR / f"{name}.py"
                spec = importlib.util.spec_from_file_location(
                    f"ember_triton.kernels._{self.mode}_{name}", path)
                assert spec is not None and spec.loader is not None
                mod = importlib.util.module_from_spec(spec)
                with _interpret_knob(self.interpret):
                    spec.loader.exec_module(mod)
                for attr, value in vars(mod).items():
                    if hasattr(value, "arg_names"):
                        self.origins[id(value)] = ("module", name, attr)
                self._modules[name] = mod
        return mod

    def scope(self) -> dict[str, Any]:
        """Globals of generated kernels in this mode: triton, tl and the device math functions
        of ``kernels/mathlib.py``."""
        import triton
        import triton.language as tl

        scope = {k: v for k, v in vars(self.module("mathlib")).items()
                 if not k.startswith("__")}
        scope.update(triton=triton, tl=tl)
        return scope

    def generated(self, key: Any, name: str, source: str | Callable[[], str],
                  scope: dict[str, Any] | Callable[[], dict[str, Any]]) -> Any:
        """The kernel ``name`` defined by ``source`` (cached by ``key``).

        ``source`` and ``scope`` may be callables: they are then only called on a cache miss,
        which keeps code generation off the per-launch path.
        """
        fn = self._generated.get(key)
        if fn is not None:
            return fn
        with _LOCK:
            fn = self._generated.get(key)
            if fn is None:
                if callable(source):
                    source = source()
                if callable(scope):
                    scope = scope()
                digest = hashlib.sha1(source.encode()).hexdigest()[:12]
                filename = f"<ember_triton generated {self.mode} {name} {digest}>"
                lines = source.splitlines(keepends=True)
                linecache.cache[filename] = (len(source), None, lines, filename)
                # a module name: Triton's front end reads every called helper's __module__
                namespace: dict[str, Any] = {**scope, "__name__": f"ember_triton.generated.{name}"}
                with _interpret_knob(self.interpret):
                    exec(compile(source, filename, "exec"), namespace)  # generated kernels
                fn = self._generated[key] = namespace[name]
                self.origins[id(fn)] = ("generated", name, source)
        return fn
