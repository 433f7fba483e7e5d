"""`ember.compile` programs replayed as recorded dispatches (``Backend.capture_program``).

A WebGPU command buffer runs once (``GPUCommandBuffer`` cannot be submitted again, and
WebGPU has no bundles of compute commands), so what a replay reuses is everything a dispatch
needs but its encoding: the pipelines, the bind groups and the parameter words.  The trace
(``ember.compile``'s first call) builds the pipelines; the first replay records the program:
its kernels run as Python once more, but each dispatch is kept
(its pipeline, the buffers it binds and its parameter words) instead of being encoded, the
parameter words go into one buffer of the recording's own, each dispatch gets its bind group
once, and the buffers the recorded kernels allocate are the recording's (one the program
is done with is reused by its later kernels, which run in the same order at every replay;
they go back to the device's pool when the recording is dropped).  Each replay
copies the program's inputs into the buffers the recording reads (only those whose array is
not the one copied there last time), encodes the recorded dispatches (three calls each, no Python
kernel code), and copies the results out into new arrays, so no tensor ember handed out is
ever written again (tensors are values; the optimizer's updated parameters arrive as new
arrays, as they do without the recording).

A program whose host numbers change (a learning rate) is recorded again, or, once three
recordings were replayed fewer than twice each on average, runs as Python; programs with
random ops (their counter advances at every call) and programs that read values back to
the host run as Python, as does everything on ``EMBER_COMPILE_REPLAY=0``.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import numpy as np

from ember.backend import CaptureError

from .runtime import Block, Runtime, WGArray
from .strided import copy_into

__all__ = ["ProgramReplay", "capture_program"]


def _same(a: WGArray, b: WGArray) -> bool:
    """Whether ``a`` is the very view ``b`` (same buffer, place and layout)."""
    return a is b or (a.block is b.block and a.offset == b.offset and a.shape == b.shape
                      and a.strides == b.strides and a.dtype == b.dtype)


class _Recorded:
    """The dispatches of one recording, ready to encode: (pipeline, bind group, groups).

    It owns every buffer its kernels allocated: those freed during the recording (``pool``,
    reused there by later kernels) and those of blocks still alive (``blocks``: the results);
    when it is dropped they go back to the runtime's pool."""

    def __init__(self, rt: Runtime, log: list[tuple[Any, list[Any], int, list[int],
                                                    tuple[int, int, int]]],
                 pool: dict[int, list[Any]], blocks: weakref.WeakSet[Block]) -> None:
        align = rt.offset_alignment
        offsets, size = [], 0
        for _, _, _, words, _ in log:
            offsets.append(size)
            size += -(-max(len(words) * 4, 16) // align) * align
        data = np.zeros(max(size, 16) // 4, np.int32)
        for (_, _, _, words, _), at in zip(log, offsets, strict=True):
            data[at // 4:at // 4 + len(words)] = np.asarray(words, np.int64).astype(np.int32)
        self.params = rt.device.create_buffer_with_data(
            data=data, usage=rt.wgpu.BufferUsage.STORAGE)
        self.steps = []
        for (pipe, buffers, n_read, words, _groups), at in zip(log, offsets, strict=True):
            nbytes = -(-max(len(words) * 4, 16) // 4) * 4
            bg = rt._bind(buffers, n_read, {"buffer": self.params, "offset": at,
                                            "size": nbytes})
            self.steps.append((pipe, bg, _groups))
        #: the distinct buffers the recorded kernels bind
        self.buffers = len({id(b) for _, buffers, _, _, _ in log for b in buffers})
        self.pool = pool
        #: arrays the kernels uploaded while recorded: written once, so never reused
        self.uploaded: list[WGArray] = []
        weakref.finalize(self, _release, rt, pool, blocks)


def _release(rt: Runtime, pool: dict[int, list[Any]], blocks: weakref.WeakSet[Block]) -> None:
    """A dropped recording's buffers back to the runtime's pool, now and as its blocks die."""
    for block in list(blocks):
        block.pool = rt._pool
    for nbytes, buffers in pool.items():
        rt._pool.setdefault(nbytes, []).extend(buffers)
    pool.clear()


class ProgramReplay:
    """Runs an `ember.compile` program (``ember._program.Program``) from its recorded
    dispatches (see the module docstring)."""

    def __init__(self, program: Any, rt: Runtime) -> None:
        self.program = program
        self.rt = rt
        self.recorded: _Recorded | None = None
        self.static: list[WGArray] = []
        self.results: list[WGArray] = []
        #: per input, the array last copied into the recording's buffer for it
        self.seen: list[WGArray | None] = []
        self.dyn: tuple[Any, ...] | None = None
        #: recordings made (a changed host number makes a new one)
        self.records = 0
        #: replays run from a recording
        self.replays = 0

    def __call__(self, ext: list[Any]) -> Any:
        dyn = tuple(g() for g in self.program.dynamic)
        if self.recorded is None or dyn != self.dyn:
            if self.records >= 3 and self.replays < 2 * self.records:
                # its host numbers change at nearly every call (a learning rate scheduled
                # step by step): recording each time costs more than it saves
                self.program.runner = self.program._program
                return self.program._program(ext)
            try:
                self._record(ext, dyn)
            except CaptureError:
                self.program.runner = self.program._program  # as Python from now on
                return self.program._program(ext)
        return self._replay(ext)

    def _record(self, ext: list[Any], dyn: tuple[Any, ...]) -> None:
        rt = self.rt
        # the recording reads its inputs from buffers of its own, which replays refill
        static = [copy_into(rt, rt.empty(a.shape, a.dtype), a) for a in ext]
        log: list[Any] = []
        pool: dict[int, list[Any]] = {}
        blocks: weakref.WeakSet[Block] = weakref.WeakSet()
        uploaded: list[WGArray] = []
        rt.capture, rt.capture_pool, rt.capture_blocks = log, pool, blocks
        rt.capture_keep = uploaded
        try:
            res = self.program._program(static)
        except Exception as exc:
            _release(rt, pool, blocks)
            if isinstance(exc, CaptureError):
                raise
            raise CaptureError(f"the compiled program could not be recorded for replay "
                               f"({type(exc).__name__}: {exc})") from exc
        finally:
            rt.capture = rt.capture_pool = rt.capture_blocks = rt.capture_keep = None
        self.recorded = _Recorded(rt, log, pool, blocks)
        self.recorded.uploaded = uploaded  # host data the kernels uploaded once
        self.static, self.results, self.dyn = static, list(res), dyn
        self.seen = list(ext)
        self.records += 1

    def _replay(self, ext: list[Any]) -> tuple[WGArray, ...]:
        rt, rec = self.rt, self.recorded
        assert rec is not None
        seen = self.seen
        for i, (cur, static) in enumerate(zip(ext, self.static, strict=True)):
            # arrays are values (no kernel writes into one it did not make): the array
            # copied last time holds the same numbers still (kept alive here, so its
            # identity cannot pass to another)
            if cur is not seen[i] and not _same(cur, static):
                copy_into(rt, static, cur)
                seen[i] = cur
        rt.encode(rec.steps)
        self.replays += 1
        # results copied out: the next replay writes the recording's buffers again
        return tuple(copy_into(rt, rt.empty(r.shape, r.dtype), r) for r in self.results)


def capture_program(rt: Runtime) -> Any:
    """``Backend.capture_program`` for a ``wgpu:N`` backend: a `ProgramReplay` per program
    (``None``, Python replay, for programs with random ops or ``EMBER_COMPILE_REPLAY=0``)."""
    return lambda program: (
        None if program.advancing or os.environ.get("EMBER_COMPILE_REPLAY", "1") == "0"
        else ProgramReplay(program, rt))
