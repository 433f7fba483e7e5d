"""One client's state on the server: its tensors by id, its memory, its first pending error.

A session only ever looks ids up in its own table, so a client cannot name another client's
tensors.  Every record is checked before it runs (schema, ids, op name, arity, params, dtypes,
the result's shape and size against the limits) and its result after (shape and dtype as the
rules say), so a hostile or malformed message is an error reported at the next sync, never a
crash, a hang or a silently wrong tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from ember import DType, Tensor, from_numpy, ops
from ember.backend import Device, numpy_dtype

from ._protocol import ProtocolError, dtype_named, pack, unpack
from ._shapes import RULES, Shape, numel

if TYPE_CHECKING:
    from ember.ops import Op

__all__ = ["Limits", "Session"]

_MAX_ID = 1 << 62
#: signatures a session remembers as checked (a hostile client cannot grow it without end)
_MAX_CHECKED = 1 << 14
_NO_PARAMS: dict[str, Any] = {}
#: what the checks of a coded op concluded: op, result shapes, dtypes, bytes, total bytes,
#: numpy dtypes of the results' payloads, and the results' ``(shape, dtype)`` (kept as they
#: are, so that keys built from them compare by identity)
Checked = tuple["Op", tuple[Shape, ...], tuple[DType, ...], tuple[int, ...], int, tuple[Any, ...],
                tuple[tuple[Shape, DType], ...]]
_SYNC = ("get", "shape", "sync")


@dataclass(frozen=True)
class Limits:
    """What one client may send and keep (bytes)."""

    max_message: int = 256 << 20
    max_tensor: int = 1 << 30
    max_client: int = 4 << 30
    max_tensors: int = 1 << 20


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
        raise ProtocolError(f"a tensor id must be an int in [1, 2**62), got {value!r}")
    return value


def _shape(value: Any) -> Shape:
    if not isinstance(value, tuple) or not all(type(n) is int and n >= 0 for n in value) \
            or len(value) > 64:
        raise ProtocolError(f"a shape must be a tuple of at most 64 ints >= 0, got {value!r}")
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
        #: ids whose op failed -> why (a later read of one names the op that failed)
        self.failed: dict[int, str] = {}
        self.bytes = 0
        self.error: OpFailed | None = None

    # -- messages ----------------------------------------------------------------------------

    def handle(self, data: bytes) -> bytes | None:
        """Run one message; the reply to send, or ``None`` (a batch without a sync)."""
        msg = unpack(data, max_bytes=self.limits.max_message)  # ProtocolError: caller closes
        if msg[0] != "batch" or len(msg) != 2 or not isinstance(msg[1], tuple):
            raise ProtocolError(f"expected ['batch', records], got a {msg[0]!r} message")
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
                    raise ProtocolError(f"unknown record kind {head!r}")
            except OpFailed as exc:
                self._fail_op(exc)
            except Exception as exc:  # a bad record is reported, the session goes on
                self._fail(str(rec[1]) if head == "op" and len(rec) > 1 else head, exc)
        return None

    def close(self) -> None:
        """Drop every tensor of this session (the client disconnected)."""
        self.tensors.clear()
        self.sizes.clear()
        self.sigs.clear()
        self.failed.clear()
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
        return pack(["error", type(err.exc).__name__, str(err.exc), err.op])

    # -- records -----------------------------------------------------------------------------

    def _tensor(self, tid: Any) -> Tensor | None:
        """The tensor ``tid`` names, ``None`` if its op failed; an error if there is none."""
        tid = _check_id(tid)
        t = self.tensors.get(tid)
        if t is None:
            if tid in self.failed:
                return None
            raise ProtocolError(f"unknown tensor id {tid}: this session has no such tensor "
                                "(it was freed, or never made here)")
        return t

    def _store(self, tid: int, t: Tensor) -> None:
        if tid in self.tensors or tid in self.failed:
            raise ProtocolError(f"tensor id {tid} is in use")
        if len(self.tensors) >= self.limits.max_tensors:
            raise MemoryError(f"this client holds {len(self.tensors)} tensors, the limit")
        shape = tuple(t.shape)
        size = numel(shape) * t.dtype.itemsize
        self.tensors[tid] = t
        self.sizes[tid] = size
        self.sigs[tid] = (shape, t.dtype)
        self.bytes += size

    def _admit(self, what: str, shapes: list[Shape], dtypes: list[DType]) -> None:
        """Refuse a result over the size limits before it is made."""
        total = 0
        for s, d in zip(shapes, dtypes, strict=True):
            n = numel(s) * d.itemsize
            if n > self.limits.max_tensor:
                raise MemoryError(f"{what}: a result of shape {s} {d.name} ({n} bytes) is over "
                                  f"the server's tensor limit of {self.limits.max_tensor} bytes")
            total += n
        if self.bytes + total > self.limits.max_client:
            raise MemoryError(f"{what}: this client would hold {self.bytes + total} bytes, over "
                              f"the server's per-client limit of {self.limits.max_client}")

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
        elif type(tid) is not int:
            raise ProtocolError(f"a tensor id must be an int in [1, 2**62), got {tid!r}")

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
                op, shapes, dtypes, _, size, npds, made = self.checked[key]
            except Exception:  # new inputs, a missing input, or a malformed record
                self._coded_in_full(rec)
                return
            tensors, failed = self.tensors, self.failed
            if not 0 < out < _MAX_ID:
                raise ProtocolError(f"a tensor id must be an int in [1, 2**62), got {out!r}")
            if out in tensors or out in failed:
                raise ProtocolError(f"{op.name}: tensor id {out} is in use")
            try:
                if self.bytes + size > self.limits.max_client:
                    self._admit(op.name, list(shapes), list(dtypes))  # raises, with the figures
                if len(tensors) >= self.limits.max_tensors:
                    raise MemoryError(f"this client holds {len(tensors)} tensors, the limit")
                result = self.device.dispatch(op, [tensors[a] for a in args], _NO_PARAMS)
                data = result._data
                shape = data.shape
                if (shape != shapes[0] and tuple(shape) != shapes[0]) \
                        or result._dtype is not dtypes[0]:
                    raise RuntimeError(
                        f"{op.name}: its result has shape {tuple(shape)} {result._dtype.name}, "
                        f"its rule says {shapes[0]} {dtypes[0].name} (a bug in ember_remote or "
                        "the backend)")
                held = getattr(data, "dtype", None)
                if held is not None and held is not npds[0] and held != npds[0]:
                    raise RuntimeError(f"{op.name}: its result holds {held}, declared "
                                       f"{dtypes[0].name}")
            except Exception as exc:
                failed[out] = f"op {op.name!r} failed: {type(exc).__name__}: {exc}"
                raise OpFailed(op.name, exc) from exc
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
            op, shapes, dtypes, sizes, size, npds, made = known[key]
        except Exception:  # new params or inputs, a missing input, or a malformed record
            self._coded_in_full(rec)
            return
        tensors, failed = self.tensors, self.failed
        n = len(shapes)
        for o in outs:
            if type(o) is not int or not 0 < o < _MAX_ID:
                raise ProtocolError(f"a tensor id must be an int in [1, 2**62), got {o!r}")
            if o in tensors or o in failed:
                raise ProtocolError(f"{op.name}: tensor id {o} is in use")
        if len(outs) != n or (n > 1 and len(set(outs)) != n):
            raise ProtocolError(f"{op.name} has {n} result(s), got ids {outs}")
        try:
            if self.bytes + size > self.limits.max_client:
                self._admit(op.name, list(shapes), list(dtypes))  # raises, with the figures
            if len(tensors) + n > self.limits.max_tensors:
                raise MemoryError(f"this client holds {len(tensors)} tensors, the limit")
            result = self.device.dispatch(op, [tensors[a] for a in ids], params)
            results = (result,) if op.outputs == 1 else result
            if len(results) != n:
                raise RuntimeError(f"{op.name} gave {len(results)} result(s), its rule says {n}")
            for i in range(n):
                t = results[i]
                data = t._data
                shape = data.shape
                if (shape != shapes[i] and tuple(shape) != shapes[i]) or t._dtype is not dtypes[i]:
                    raise RuntimeError(
                        f"{op.name}: result {i} has shape {tuple(shape)} {t._dtype.name}, its "
                        f"rule says {shapes[i]} {dtypes[i].name} (a bug in ember_remote or the "
                        "backend)")
                held = getattr(data, "dtype", None)
                if held is not None and held is not npds[i] and held != npds[i]:
                    raise RuntimeError(f"{op.name}: result {i} holds {held}, declared "
                                       f"{dtypes[i].name}")
        except Exception as exc:
            for o in outs:
                failed[o] = f"op {op.name!r} failed: {type(exc).__name__}: {exc}"
            raise OpFailed(op.name, exc) from exc
        self.bytes += size
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
        if self.n_checked < _MAX_CHECKED and type(params) in (dict, type(None)):
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
        entry = (op, tuple(expected), tuple(dtypes), sizes, sum(sizes),
                 tuple(numpy_dtype(d) for d in dtypes), tuple(results))
        if params is None:
            self.checked[(code, None, *inputs)] = entry
        else:
            names = tuple(params)
            # a name the rules looked for and did not find is in `names` already; ``dtype`` is
            # checked against the device by `_run`
            read = (seen.read | {"dtype"}) & set(names)
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
            raise ProtocolError(f"unknown op {name!r}")
        if not isinstance(arg_ids, tuple) or not isinstance(out_ids, tuple) or not out_ids \
                or not isinstance(params, dict):
            raise ProtocolError(f"{name}: expected arg ids, a params map and out ids")
        outs = [_check_id(o) for o in out_ids]
        for o in outs:
            if o in self.tensors or o in self.failed:
                raise ProtocolError(f"{name}: tensor id {o} is in use")
        try:
            args = [self._tensor(a) for a in arg_ids]
            if any(a is None for a in args):  # an input's op failed (reported already)
                why = next(self.failed[a] for a in arg_ids if a in self.failed)
                for o in outs:
                    self.failed[o] = why  # a later read names the op that failed first
                return
            out = self._run(op, args, params, len(outs))  # type: ignore[arg-type]  # no None
        except Exception as exc:
            for o in outs:
                self.failed[o] = f"op {name!r} failed: {type(exc).__name__}: {exc}"
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
                raise ProtocolError(f"{op.name}: unknown params {sorted(unknown)}")
            if "dtype" in params:
                if not isinstance(params["dtype"], DType):
                    raise ProtocolError(f"{op.name}: dtype must be an ember dtype")
                if not self.device.supports(params["dtype"]):
                    raise ProtocolError(f"device {self.device} does not support "
                                        f"{params['dtype'].name}")
        if op.group == "elementwise" and len(args) > 1:
            same = args[1:] if op.name == "where" else args
            first = same[0].dtype
            if any(a.dtype is not first for a in same):
                raise ProtocolError(f"{op.name}: inputs of different dtypes "
                                    f"{[a.dtype.name for a in same]}")
        rule = RULES.get(op)
        expected: list[Shape] | None = None
        got: Any = None
        if rule is not None:
            try:
                got = rule([tuple(a.shape) for a in args], params)
            except KeyError:  # a param left to the kernel's default: checked after the run
                got = None
        if rule is not None and got is not None:
            expected = got if isinstance(got, list) else [got]
            if len(expected) != n_out:
                raise ProtocolError(f"{op.name} has {len(expected)} result(s), got "
                                    f"{n_out} ids")
            dtypes = op.result_rule(args, params)
            self._admit(op.name, expected, list(dtypes) if isinstance(dtypes, tuple)
                        else [dtypes] * n_out)
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
            payload_dtype = getattr(t._data, "dtype", None)
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
                return pack(["ok", {"bytes": self.bytes, "tensors": len(self.tensors)}])
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
