"""One client's state on the server: its tensors by id, its memory, its first pending error.

A session only ever looks ids up in its own table, so a client cannot name another client's
tensors.  Every record is checked before it runs (schema, ids, op name, arity, params, dtypes,
the result's shape and size against the limits) and its result after (shape and dtype as the
rules say), so a hostile or malformed message is an error reported at the next sync, never a
crash, a hang or a silently wrong tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from ember import DType, Tensor, from_numpy, ops
from ember.backend import Device, numpy_dtype

from . import _costs
from ._limits import Limits, check_params, show
from ._protocol import ProtocolError, dtype_named, pack, unpack
from ._shapes import RULES, Shape, numel

if TYPE_CHECKING:
    from ember.ops import Op

__all__ = ["Limits", "Session"]

_MAX_ID = 1 << 62
#: a remembered signature holds at most this many param items and inputs (bounds the cache)
_MAX_WEIGHT = 64
#: the reason a failed id keeps is cut to this many characters, an error reply's message to
#: this many
_MAX_REASON, _MAX_MESSAGE = 300, 4000
_NO_PARAMS: dict[str, Any] = {}
#: what the checks of a coded op concluded: op, result shapes, dtypes, bytes, total bytes,
#: numpy dtypes of the results' payloads, and the results' ``(shape, dtype)`` (kept as they
#: are, so that keys built from them compare by identity)
Checked = tuple["Op", tuple[Shape, ...], tuple[DType, ...], tuple[int, ...], int, tuple[Any, ...],
                tuple[tuple[Shape, DType], ...]]
_SYNC = ("get", "shape", "sync")


class _Reads(dict[str, Any]):
    """An op's params that note which of them a shape or dtype rule read."""

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(params)
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> Any:
        self.read.add(name)
        return super().__getitem__(name)

    def get(self, name: str, default: Any = None) -> Any:
        self.read.add(name)
        return super().get(name, default)

    def __contains__(self, name: object) -> bool:
        self.read.add(name)  # type: ignore[arg-type]  # params are named by strings
        return super().__contains__(name)


class OpFailed(Exception):
    """The error an op raised, with the op's name: reported at the next sync."""

    def __init__(self, op: str, exc: BaseException) -> None:
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.op, self.exc = op, exc


def _check_id(value: Any) -> int:
    if type(value) is not int or not 0 < value < _MAX_ID:
        raise ProtocolError(f"a tensor id must be an int in [1, 2**62), got {show(value)}")
    return value


def _shape(value: Any) -> Shape:
    if not isinstance(value, tuple) or len(value) > 64 \
            or not all(type(n) is int and n >= 0 for n in value):
        raise ProtocolError(f"a shape must be a tuple of at most 64 ints >= 0, got "
                            f"{show(value)}")
    return value


class Session:
    """The tensors and pending error of one authenticated connection."""

    def __init__(self, device: Device, limits: Limits, table: Sequence[str] = ()) -> None:
        self.device = device
        self.limits = limits
        #: the op table sent with the hello: a coded record's ``code`` is a position in it
        self.table: list[Op | None] = [ops.registry.get(name) for name in table]
        self.tensors: dict[int, Tensor] = {}
        self.sizes: dict[int, int] = {}
        #: ``(shape, dtype)`` of each tensor: what a coded op's checks depend on
        self.sigs: dict[int, tuple[Shape, DType]] = {}
        #: ``(code, None, *input sigs)`` of a coded op without params -> what its checks
        #: concluded (`Checked`); an op whose rule gives its results' shapes is checked in full
        #: the first time only
        self.checked: dict[tuple[Any, ...], Checked] = {}
        #: for a coded op with params: ``(code, param names)`` -> the params its rules read,
        #: and ``(their values, *input sigs)`` -> what its checks concluded
        self.reads: dict[tuple[int, tuple[str, ...]],
                         tuple[tuple[str, ...], dict[tuple[Any, ...], Checked]]] = {}
        self.n_checked = 0
        #: ids whose op failed -> why (a later read of one names the op that failed); each
        #: counts like a tensor against ``max_tensors`` and ``overhead`` bytes
        self.failed: dict[int, str] = {}
        #: failed ids not kept because the client held ``max_tensors`` tensors and failed ids
        self.lost = 0
        self.bytes = 0
        self.error: OpFailed | None = None

    # -- messages ----------------------------------------------------------------------------

    def handle(self, data: bytes) -> bytes | None:
        """Run one message; the reply to send, or ``None`` (a batch without a sync)."""
        msg = unpack(data, max_bytes=self.limits.max_message,  # ProtocolError: caller closes
                     max_items=self.limits.max_items)
        if msg[0] != "batch" or len(msg) != 2 or not isinstance(msg[1], tuple):
            raise ProtocolError(f"expected ['batch', records], got a {show(msg[0])} message")
        records = msg[1]
        last = len(records) - 1
        tensors, sizes, sigs, failed = self.tensors, self.sizes, self.sigs, self.failed
        for i, rec in enumerate(records):
            kind = type(rec)
            if kind is int:  # a free, the most common record (`_drop` spelled out)
                if tensors.pop(rec, None) is not None:
                    self.bytes -= sizes.pop(rec)
                    del sigs[rec]
                elif rec in failed:
                    del failed[rec]
                    self.bytes -= self.limits.overhead
                continue
            if kind is not tuple or not rec:
                self._fail("?", ProtocolError("a record is an id or an array"))
                continue
            head = rec[0]
            if type(head) is int:  # a coded op
                try:
                    self._coded(rec)
                except OpFailed as exc:
                    self._fail_op(exc)
                except Exception as exc:  # a malformed record: reported, the session goes on
                    self._fail(self._name(head), exc)
                continue
            if not isinstance(head, str):
                self._fail("?", ProtocolError("a record is an id or an array whose first item "
                                              "is an op code or names the record"))
                continue
            if head in _SYNC:
                if i != last:
                    self._fail(head, ProtocolError("a sync record must end its batch"))
                    continue
                return self._sync(rec)
            try:
                if head == "op":
                    self._op(rec)
                elif head == "put":
                    self._put(rec)
                elif head == "free":
                    self._free(rec)
                else:
                    raise ProtocolError(f"unknown record kind {show(head)}")
            except OpFailed as exc:
                self._fail_op(exc)
            except Exception as exc:  # a bad record is reported, the session goes on
                name = rec[1] if head == "op" and len(rec) > 1 else head
                self._fail(name if type(name) is str and len(name) <= 64 else show(name), exc)
        return None

    def close(self) -> None:
        """Drop every tensor of this session (the client disconnected)."""
        self.tensors.clear()
        self.sizes.clear()
        self.sigs.clear()
        self.failed.clear()
        self.lost = 0
        self.checked.clear()
        self.reads.clear()
        self.bytes = 0

    # -- errors ------------------------------------------------------------------------------

    def _fail(self, what: str, exc: BaseException) -> None:
        self._fail_op(OpFailed(what, exc))

    def _fail_op(self, err: OpFailed) -> None:
        if self.error is None:
            self.error = err

    def _error_reply(self, err: OpFailed) -> bytes:
        text = str(err.exc)
        if len(text) > _MAX_MESSAGE:  # a kernel's or rule's message quoting a client's value
            text = text[:_MAX_MESSAGE] + "..."
        return pack(["error", type(err.exc).__name__, text, err.op])

    # -- records -----------------------------------------------------------------------------

    def _tensor(self, tid: Any) -> Tensor | None:
        """The tensor ``tid`` names, ``None`` if its op failed; an error if there is none."""
        tid = _check_id(tid)
        t = self.tensors.get(tid)
        if t is None:
            if tid in self.failed:
                return None
            lost = (f"; {self.lost} failed id(s) were not kept, the client holding the "
                    f"server's limit of {self.limits.max_tensors} tensors and failed ids "
                    "(max_tensors)") if self.lost else ""
            raise ProtocolError(f"unknown tensor id {tid}: this session has no such tensor "
                                f"(it was freed, or never made here{lost})")
        return t

    def _full(self, n: int) -> MemoryError | None:
        """The error for ``n`` more tensors or failed ids over ``max_tensors``, if they are."""
        held = len(self.tensors) + len(self.failed)
        if held + n <= self.limits.max_tensors:
            return None
        return MemoryError(f"this client holds {len(self.tensors)} tensors and "
                           f"{len(self.failed)} failed ids, the server's limit is "
                           f"{self.limits.max_tensors} (max_tensors; free some)")

    def _mark_failed(self, outs: Sequence[int], why: str) -> None:
        """Remember that ``outs`` were not computed, and why (counted like tensors)."""
        if len(why) > _MAX_REASON:
            why = why[:_MAX_REASON] + "..."
        failed, overhead = self.failed, self.limits.overhead
        for o in outs:
            if o in failed or o in self.tensors:
                continue
            full = self._full(1)
            if full is None and self.bytes + overhead > self.limits.max_client:
                full = MemoryError(f"this client holds {self.bytes} bytes, the server's "
                                   f"per-client limit is {self.limits.max_client} (max_client; "
                                   "free some)")
            if full is not None:
                self.lost += 1
                self._fail_op(OpFailed("?", full))
                continue
            failed[o] = why
            self.bytes += overhead

    def _store(self, tid: int, t: Tensor) -> None:
        if tid in self.tensors or tid in self.failed:
            raise ProtocolError(f"tensor id {tid} is in use")
        full = self._full(1)
        if full is not None:
            raise full
        shape = tuple(t.shape)
        size = numel(shape) * t.dtype.itemsize + self.limits.overhead
        self.tensors[tid] = t
        self.sizes[tid] = size
        self.sigs[tid] = (shape, t.dtype)
        self.bytes += size

    def _over(self, what: str, need: int) -> None:
        raise MemoryError(f"{what}: this client would hold {self.bytes + need} bytes (results "
                          "and work buffers), over the server's per-client limit of "
                          f"{self.limits.max_client}")

    def _admit(self, what: str, shapes: list[Shape], dtypes: list[DType],
               work: _costs.Cost = (0, 0)) -> int:
        """Refuse results (and an op's work buffers, ``work``: the largest and the total
        bytes) over the size limits before they are made; the bytes they need in all."""
        limit = self.limits.max_tensor
        total = work[1]
        for s, d in zip(shapes, dtypes, strict=True):
            n = numel(s) * d.itemsize
            if n > limit:
                raise MemoryError(f"{what}: a result of shape {show(s)} {d.name} ({n} bytes) is "
                                  f"over the server's tensor limit of {limit} bytes")
            total += n + self.limits.overhead
        if work[0] > limit:
            raise MemoryError(f"{what}: it needs a work buffer of about {work[0]} bytes, over "
                              f"the server's tensor limit of {limit} bytes")
        if self.bytes + total > self.limits.max_client:
            self._over(what, total)
        return total

    def _put(self, rec: tuple[Any, ...]) -> None:
        if len(rec) != 5:
            raise ProtocolError("expected ['put', id, dtype, shape, data]")
        _, tid, dname, shape, data = rec
        tid, dtype, shape = _check_id(tid), dtype_named(dname), _shape(shape)
        if not isinstance(data, bytes):
            raise ProtocolError("put: the data must be bytes")
        if not self.device.supports(dtype):
            raise ProtocolError(f"device {self.device} does not support dtype {dtype.name}")
        self._admit("put", [shape], [dtype])
        npd = numpy_dtype(dtype)
        if len(data) != numel(shape) * npd.itemsize:
            raise ProtocolError(f"put: {len(data)} bytes for shape {shape} {dtype.name} (needs "
                                f"{numel(shape) * npd.itemsize})")
        arr = np.frombuffer(data, dtype=np.uint8 if dtype.name == "bool" else npd)
        if dtype.name == "bool":  # any byte but 0 is True, as numpy's own bools hold only 0/1
            arr = arr != 0
        self._store(tid, from_numpy(arr.reshape(shape), device=self.device))

    def _free(self, rec: tuple[Any, ...]) -> None:
        if len(rec) != 2 or not isinstance(rec[1], tuple):
            raise ProtocolError("expected ['free', ids]")
        for tid in rec[1]:
            self._drop(tid)

    def _drop(self, tid: Any) -> None:
        """The client dropped tensor ``tid``."""
        if self.tensors.pop(tid, None) is not None:
            self.bytes -= self.sizes.pop(tid)
            del self.sigs[tid]
        elif tid in self.failed:
            del self.failed[tid]
            self.bytes -= self.limits.overhead
        elif type(tid) is not int:
            raise ProtocolError(f"a tensor id must be an int in [1, 2**62), got {show(tid)}")

    def _name(self, code: int) -> str:
        op = self.table[code] if 0 <= code < len(self.table) else None
        return op.name if op is not None else f"op code {code}"

    def _coded(self, rec: tuple[Any, ...]) -> None:
        """``(code, out, *args)`` or ``(code, outs, args, params)``: checked in full the first
        time its op meets these params and input shapes and dtypes (`_coded_in_full`), then
        from what those checks concluded (`checked`); the result is still checked after the
        kernel."""
        out = rec[1]
        sigs = self.sigs
        if type(out) is int:  # no params, one result: the common case, spelled out
            try:
                if len(rec) == 4:
                    args: Any = (rec[2], rec[3])
                    key: Any = (rec[0], None, sigs[rec[2]], sigs[rec[3]])
                else:
                    args = rec[2:]
                    key = (rec[0], None, *[sigs[a] for a in args])
                op, shapes, dtypes, sizes, need, npds, made = self.checked[key]
            except Exception:  # new inputs, a missing input, or a malformed record
                self._coded_in_full(rec)
                return
            tensors, failed = self.tensors, self.failed
            if not 0 < out < _MAX_ID:
                raise ProtocolError(f"a tensor id must be an int in [1, 2**62), got {out!r}")
            if out in tensors or out in failed:
                raise ProtocolError(f"{op.name}: tensor id {out} is in use")
            try:
                if self.bytes + need > self.limits.max_client:
                    self._over(op.name, need)
                if len(tensors) + len(failed) >= self.limits.max_tensors:
                    raise self._full(1)  # type: ignore[misc]  # over the limit: an error
                result = self.device.dispatch(op, [tensors[a] for a in args], _NO_PARAMS)
                data = result.payload
                shape = data.shape
                if (shape != shapes[0] and tuple(shape) != shapes[0]) \
                        or result.dtype is not dtypes[0]:
                    raise RuntimeError(
                        f"{op.name}: its result has shape {tuple(shape)} {result.dtype.name}, "
                        f"its rule says {shapes[0]} {dtypes[0].name} (a bug in ember_remote or "
                        "the backend)")
                held = getattr(data, "dtype", None)
                if held is not None and held is not npds[0] and held != npds[0]:
                    raise RuntimeError(f"{op.name}: its result holds {held}, declared "
                                       f"{dtypes[0].name}")
            except Exception as exc:
                self._mark_failed((out,), f"op {op.name!r} failed: {type(exc).__name__}: {exc}")
                raise OpFailed(op.name, exc) from exc
            size = sizes[0]
            tensors[out] = result
            self.sizes[out] = size
            sigs[out] = made[0]
            self.bytes += size
            return
        try:  # the checks depend on the params' names and the values the rules read
            outs, ids, params = out, rec[2], rec[3]
            if type(params) is not dict or type(ids) is not tuple or type(outs) is not tuple:
                raise TypeError("a malformed record")  # the full checks say what is wrong
            reads, known = self.reads[(rec[0], tuple(params))]
            key = (tuple([params[n] for n in reads]), *[sigs[a] for a in ids])
            op, shapes, dtypes, sizes, need, npds, made = known[key]
        except Exception:  # new params or inputs, a missing input, or a malformed record
            self._coded_in_full(rec)
            return
        tensors, failed = self.tensors, self.failed
        n = len(shapes)
        for o in outs:
            if type(o) is not int or not 0 < o < _MAX_ID:
                raise ProtocolError(f"a tensor id must be an int in [1, 2**62), got {show(o)}")
            if o in tensors or o in failed:
                raise ProtocolError(f"{op.name}: tensor id {o} is in use")
        if len(outs) != n or (n > 1 and len(set(outs)) != n):
            raise ProtocolError(f"{op.name} has {n} result(s), got ids {show(outs)}")
        try:
            if self.bytes + need > self.limits.max_client:
                self._over(op.name, need)
            if len(tensors) + len(failed) + n > self.limits.max_tensors:
                raise self._full(n)  # type: ignore[misc]  # over the limit: an error
            result = self.device.dispatch(op, [tensors[a] for a in ids], params)
            results = (result,) if op.outputs == 1 else result
            if len(results) != n:
                raise RuntimeError(f"{op.name} gave {len(results)} result(s), its rule says {n}")
            for i in range(n):
                t = results[i]
                data = t.payload
                shape = data.shape
                if (shape != shapes[i] and tuple(shape) != shapes[i]) or t.dtype is not dtypes[i]:
                    raise RuntimeError(
                        f"{op.name}: result {i} has shape {tuple(shape)} {t.dtype.name}, its "
                        f"rule says {shapes[i]} {dtypes[i].name} (a bug in ember_remote or the "
                        "backend)")
                held = getattr(data, "dtype", None)
                if held is not None and held is not npds[i] and held != npds[i]:
                    raise RuntimeError(f"{op.name}: result {i} holds {held}, declared "
                                       f"{dtypes[i].name}")
        except Exception as exc:
            self._mark_failed(outs, f"op {op.name!r} failed: {type(exc).__name__}: {exc}")
            raise OpFailed(op.name, exc) from exc
        self.bytes += sum(sizes)
        for i, o in enumerate(outs):
            tensors[o] = results[i]
            self.sizes[o] = sizes[i]
            sigs[o] = made[i]

    def _coded_in_full(self, rec: tuple[Any, ...]) -> None:
        """A coded op whose signature was not seen yet, or a malformed one: every check."""
        code, out = rec[0], rec[1]
        op = self.table[code] if 0 <= code < len(self.table) else None
        if op is None:
            raise ProtocolError(f"unknown op code {code} (the op table has {len(self.table)} "
                                "ops)")
        if type(out) is int:
            outs: Any = (out,)
            ids: Any = rec[2:]
            params: Any = None
        elif len(rec) != 4:
            raise ProtocolError(f"{op.name}: expected [code, out_ids, arg_ids, params]")
        else:
            outs, ids, params = out, rec[2], rec[3]
        self._op(("op", op.name, ids, _NO_PARAMS if params is None else params, outs))
        if self.n_checked < self.limits.max_checked and type(params) in (dict, type(None)):
            self._remember(op, code, ids, params, outs)

    def _remember(self, op: Op, code: int, ids: Any, params: dict[str, Any] | None,
                  outs: Any) -> None:
        """After a coded op ran, checked in full: what later ops can skip whose params have
        the same names and the same values where the rules read them (``seed`` or ``lr``
        change no shape), and whose inputs have the same shapes and dtypes.  Only where the
        op's rule gave the results' shapes before it ran."""
        sigs = self.sigs
        rule = RULES.get(op)
        if rule is None:
            return
        seen = _Reads(params or _NO_PARAMS)
        try:
            results = [sigs[o] for o in outs]
            inputs = [sigs[a] for a in ids]
            got = rule([s for s, _ in inputs], seen)
            expected = got if isinstance(got, list) else [got]
            dtypes = op.result_rule([self.tensors[a] for a in ids], seen)
            if not isinstance(dtypes, tuple):
                dtypes = (dtypes,) * len(outs)
            if [s for s, _ in results] != expected or list(dtypes) != [d for _, d in results]:
                return
        except Exception:  # a failed op, or a rule that needs a param left to the kernel
            return
        sizes = tuple(self.sizes[o] for o in outs)
        ins = [s for s, _ in inputs]
        need = sum(sizes) + _costs.scratch(op, ins, expected, params or _NO_PARAMS)[1]
        entry = (op, tuple(expected), tuple(dtypes), sizes, need,
                 tuple(numpy_dtype(d) for d in dtypes), tuple(results))
        if params is None:
            if len(inputs) > _MAX_WEIGHT:
                return
            self.checked[(code, None, *inputs)] = entry
        else:
            names = tuple(params)
            # a name the rules looked for and did not find is in `names` already; ``dtype`` is
            # checked against the device by `_run`
            read = (seen.read | {"dtype"}) & set(names)
            # a key holds the values read: a long one is not worth its memory (bounds the
            # cache at max_checked entries of a few KiB)
            weight = len(inputs) + sum(len(v) if type(v) is tuple else 1
                                       for n, v in params.items() if n in read)
            if weight > _MAX_WEIGHT:
                return
            reads, known = self.reads.get((code, names), ((), {}))
            if not known or not read <= set(reads):  # new, or a rule read more: earlier
                reads, known = tuple(sorted(read | set(reads))), {}  # entries keyed on less
                self.reads[(code, names)] = (reads, known)
            key = (tuple([params[n] for n in reads]), *inputs)
            try:
                known[key] = entry
            except TypeError:  # a param value that cannot be a key
                return
        self.n_checked += 1

    def _op(self, rec: tuple[Any, ...]) -> None:
        if len(rec) != 5:
            raise ProtocolError("expected ['op', name, arg_ids, params, out_ids]")
        _, name, arg_ids, params, out_ids = rec
        op = ops.registry.get(name) if isinstance(name, str) else None
        if op is None:
            raise ProtocolError(f"unknown op {show(name)}")
        if not isinstance(arg_ids, tuple) or not isinstance(out_ids, tuple) or not out_ids \
                or not isinstance(params, dict):
            raise ProtocolError(f"{name}: expected arg ids, a params map and out ids")
        if op.outputs > 0 and len(out_ids) != op.outputs:
            raise ProtocolError(f"{name} has {op.outputs} result(s), got {len(out_ids)} ids")
        outs = [_check_id(o) for o in out_ids]
        for o in outs:
            if o in self.tensors or o in self.failed:
                raise ProtocolError(f"{name}: tensor id {o} is in use")
        try:
            args = [self._tensor(a) for a in arg_ids]
            if any(a is None for a in args):  # an input's op failed (reported already)
                why = next(self.failed[a] for a in arg_ids if a in self.failed)
                self._mark_failed(outs, why)  # a later read names the op that failed first
                return
            full = self._full(len(outs))
            if full is not None:
                raise full
            out = self._run(op, args, params, len(outs))  # type: ignore[arg-type]  # no None
        except Exception as exc:
            self._mark_failed(outs, f"op {name!r} failed: {type(exc).__name__}: {exc}")
            raise OpFailed(name, exc) from exc
        results = out if isinstance(out, tuple) else (out,)
        for o, t in zip(outs, results, strict=True):
            self._store(o, t)

    def _run(self, op: Any, args: list[Tensor], params: dict[str, Any], n_out: int) -> Any:
        """Check ``op`` against its declaration and the limits, run it, check its result."""
        if op.arity >= 0 and len(args) != op.arity:
            raise ProtocolError(f"{op.name} takes {op.arity} tensor(s), got {len(args)}")
        if params:
            unknown = set(params) - set(op.params)
            if unknown:
                raise ProtocolError(f"{op.name}: unknown params {show(sorted(unknown))}")
            if "dtype" in params:
                if not isinstance(params["dtype"], DType):
                    raise ProtocolError(f"{op.name}: dtype must be an ember dtype")
                if not self.device.supports(params["dtype"]):
                    raise ProtocolError(f"device {self.device} does not support "
                                        f"{params['dtype'].name}")
            check_params(op.name, params)
        if op.group == "elementwise" and len(args) > 1:
            same = args[1:] if op.name == "where" else args
            first = same[0].dtype
            if any(a.dtype is not first for a in same):
                raise ProtocolError(f"{op.name}: inputs of different dtypes "
                                    f"{[a.dtype.name for a in same]}")
        rule = RULES.get(op)
        expected: list[Shape] | None = None
        ins = [tuple(a.shape) for a in args]
        if rule is not None:
            try:
                got = rule(ins, params)
            except KeyError as exc:  # Note: no kernel default is trusted with the size
                raise ProtocolError(f"{op.name}: param {exc} is missing (the server needs it "
                                    "to bound the result before running the op)") from None
            expected = got if isinstance(got, list) else [got]
            if len(expected) != n_out:
                raise ProtocolError(f"{op.name} has {len(expected)} result(s), got "
                                    f"{n_out} ids")
            dtypes = op.result_rule(args, params)
            self._admit(op.name, expected, list(dtypes) if isinstance(dtypes, tuple)
                        else [dtypes] * n_out, _costs.scratch(op, ins, expected, params))
        else:  # results and work buffers bounded from the inputs, or the op is refused
            bound = _costs.unruled(op, ins, params)
            if bound is None:
                raise ProtocolError(f"{op.name} has no shape rule, so the server cannot bound "
                                    "what it allocates: it is not served")
            self._admit(op.name, [], [], bound)
        out = self.device.dispatch(op, args, params)
        results = out if isinstance(out, tuple) else (out,)
        if len(results) != n_out:
            raise ProtocolError(f"{op.name} gave {len(results)} result(s), the client expected "
                                f"{n_out}")
        for i, t in enumerate(results):
            shape = tuple(t.shape)
            if expected is not None and shape != expected[i]:
                raise RuntimeError(f"{op.name}: result {i} has shape {shape}, its rule says "
                                   f"{expected[i]} (a bug in ember_remote or the backend)")
            payload_dtype = getattr(t.payload, "dtype", None)
            if payload_dtype is not None and payload_dtype != numpy_dtype(t.dtype):
                raise RuntimeError(f"{op.name}: result {i} holds {payload_dtype}, declared "
                                   f"{t.dtype.name}")
        if expected is None:
            self._admit(op.name, [tuple(t.shape) for t in results], [t.dtype for t in results])
        return out

    # -- sync points -------------------------------------------------------------------------

    def _sync(self, rec: tuple[Any, ...]) -> bytes:
        err = self.error
        if err is not None:
            self.error = None
            return self._error_reply(err)
        kind = rec[0]
        try:
            if kind == "sync":
                self.device.synchronize()
                return pack(["ok", {"bytes": self.bytes, "tensors": len(self.tensors),
                                    "failed": len(self.failed), "checked": self.n_checked}])
            if len(rec) != 2:
                raise ProtocolError(f"expected [{kind!r}, id]")
            t = self._tensor(rec[1])
            if t is None:
                raise RuntimeError(f"tensor {rec[1]} was not computed: "
                                   f"{self.failed[rec[1]]}")
            if kind == "shape":
                return pack(["shape", tuple(t.shape)])
            # Note: ascontiguousarray makes a 0-d array 1-d: the shape is the tensor's
            arr = np.ascontiguousarray(t.numpy()).reshape(-1)
            return pack(["data", t.dtype.name, tuple(t.shape), arr.view(np.uint8).data])
        except Exception as exc:
            return self._error_reply(OpFailed(kind, exc))
