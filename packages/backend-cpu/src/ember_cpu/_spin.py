"""A bounded busy-wait without the GIL: how a helper thread (`_workers`) waits a short while
for the next job before it sleeps.

A helper that sleeps between two layers is woken by the kernel, and on the development VM a
sleeping virtual CPU took 25 us to wake in half the cases and over 100 us in one in ten (a
batch-1 ResNet-18 on two threads, 2026-12-06: the caller waited 1.7 ms an inference for helpers
that started late).  Spinning on a counter the caller bumps after each job it posts keeps the
core awake: the helper sees the job within a microsecond.  The loop is compiled (numba) and
releases the GIL; it reads the counter with an atomic load (a plain one may be hoisted out of
the loop) and runs ``pause`` between reads on x86.
"""

from __future__ import annotations

import functools
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["posted", "spin", "spin_on"]

#: the caller bumps ``posted[0]`` after it queues a job (`_workers.run`); its value means
#: nothing, only that it changed
posted = np.zeros(1, np.int64)


@functools.cache
def _loop() -> tuple[Callable[[Any, int, int], bool], float]:
    """The compiled wait and how many of its rounds take a microsecond."""
    import numba
    from llvmlite import ir  # type: ignore[import-untyped]  # numba's own, no stubs
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    x86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")

    @intrinsic
    def load_acquire(typingctx: Any, arr: Any, idx: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            ptr = cgutils.get_item_pointer(  # type: ignore[no-untyped-call]
                context, builder, sig.args[0], ary, [args[1]])
            return builder.load_atomic(ptr, "acquire", 8)
        return arr.dtype(arr, idx), codegen

    @intrinsic
    def pause(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            if x86:  # the spin-wait hint: frees the core's resources, saves power
                fnty = ir.FunctionType(ir.VoidType(), [])
                fn = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
                    builder.module, fnty, "llvm.x86.sse2.pause")
                builder.call(fn, [])
            return context.get_dummy_value()
        return types.void(), codegen

    @numba.njit(nogil=True, cache=True)
    def wait(flag: Any, seen: int, rounds: int) -> bool:
        for _ in range(rounds):
            if load_acquire(flag, 0) != seen:  # type: ignore[call-arg]  # numba passes the context
                return True
            pause()
        return False

    probe = np.zeros(1, np.int64)
    wait(probe, 0, 10)
    rounds = 200_000
    t0 = time.perf_counter()
    wait(probe, 0, rounds)
    per_us = rounds / max((time.perf_counter() - t0) * 1e6, 1e-3)
    return wait, per_us


def spin(seen: int, microseconds: float) -> bool:
    """Wait up to ``microseconds`` (GIL released) for ``posted[0]`` to differ from
    ``seen``; whether it did."""
    return spin_on(posted, seen, microseconds)


def spin_on(flag: np.ndarray, seen: int, microseconds: float) -> bool:
    """Wait up to ``microseconds`` (GIL released) for ``flag[0]`` (int64) to differ from
    ``seen``; whether it did."""
    wait, per_us = _loop()
    return bool(wait(flag, seen, max(1, int(microseconds * per_us))))
