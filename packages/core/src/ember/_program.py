"""The program a trace becomes: straight-line Python calling the recorded kernels.

`Program` turns a `ember._trace.Tracer`'s calls into the source of one function: externals
are read from the new arguments and from the tensors that hold them, every kernel is called
on the slots of its inputs, an intermediate is deleted after its last use, and the function
returns the payloads of the results and of the tensors the call updated in place.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

from . import _trace
from ._tensor import Tensor

__all__ = ["Program", "base_payload", "maker", "putter"]


class Program:
    """A trace turned into straight-line code (see the module docstring)."""

    def __init__(self, tr: _trace.Tracer, arg_payloads: dict[int, int],
                 outputs: list[tuple[int, Any]], writes: list[tuple[int, Tensor, Any]],
                 out_tree: Any, out_leaves: list[Any],
                 unflatten: Callable[[Any, list[Any]], Any], inplace: Any = None) -> None:
        self.kernels = len(tr.calls)
        self.out_tree = out_tree
        self.out_leaves = out_leaves
        self.unflatten = unflatten
        values = tr.values
        # externals: read from an argument, from a holder tensor, or kept as a constant
        readers: list[tuple[str, Any]] = []
        held: dict[int, int] = {}  # id(holder tensor) -> the external slot of its value
        names: dict[int, str] = {}
        ns: dict[str, Any] = {}
        self._constants = ns
        self.constants = 0
        for s in sorted(tr.external):
            payload = values[s]
            arg = arg_payloads.get(id(payload))
            if arg is not None:
                names[s] = f"E[{len(readers)}]"
                readers.append(("arg", arg))
                continue
            holder = tr.holder.get(id(payload))
            if holder is not None:
                names[s] = f"E[{len(readers)}]"
                readers.append(("tensor", holder))
                held[id(holder)] = s
                continue
            names[s] = f"C{s}"
            ns[f"C{s}"] = payload
            self.constants += 1
        self.readers = readers
        # last use of every slot, so intermediates die as soon as they can
        last: dict[int, int] = {}
        for i, c in enumerate(tr.calls):
            for s in c.ins:
                last[s] = i
        final = [s for s, _ in outputs] + [s for s, _, _ in writes]
        end = len(tr.calls)
        for s in final:
            last[s] = end
        reuse = _plan_inplace(tr, last, set(final), inplace) if inplace is not None else {}
        self.inplace = len(reuse)
        ext_names = {s: names[s] for s in tr.external}
        self._program = self._generate(tr, names, last, final, reuse, {})
        #: the program again with the updates it can make in place written into the buffers
        #: they replace (``Backend.inplace.can_update``), for a backend that keeps those
        #: buffers (a CUDA graph): ``updating(E)`` returns what ``_program(E)`` does, the
        #: updated writes being the buffers they read; ``None`` where there are none
        self.updating: Callable[[list[Any]], Any] | None = None
        #: per write: whether ``updating`` writes it into the buffer it replaces
        self.updated = [False] * len(writes)
        can_update = getattr(inplace, "can_update", None)
        if can_update is not None:
            into = _plan_updates(tr, last, held, writes, inplace, self.updated)
            if into:
                self.updating = self._generate(tr, dict(ext_names), last, final, reuse, into)
        self.n_out = len(outputs)
        self.outputs = [(make, where) for _, (make, where) in outputs]
        self.writes = [(t, put) for _, t, put in writes]
        self.host_writes = list(tr.host_writes)
        #: the host numbers the kernels read (learning rates...), re-read at each replay
        self.dynamic = [g for c in tr.calls for g in c.dyn.values()]
        #: whether a kernel reads a counter that advances when read (random ops)
        self.advancing = tr.advancing
        #: what runs ``program(E)``: the generated function, or a backend's replacement
        #: (``Backend.capture_program``: a CUDA graph of it)
        self.runner: Callable[[list[Any]], Any] = self._program

    def _generate(self, tr: _trace.Tracer, names: dict[int, str], last: dict[int, int],
                  final: list[int], reuse: dict[int, int],
                  into: dict[int, dict[int, int]]) -> Callable[[list[Any]], Any]:
        """The program's function: ``reuse`` (call -> input slot) writes a result over an
        input, ``into`` (call -> {output index: external slot}) writes outputs into the
        buffers of the values they replace."""
        lines = ["def program(E):"]
        ns = dict(self._constants)
        for s in sorted(tr.external):
            if s in last and names[s].startswith("E["):
                lines.append(f"    v{s} = {names[s]}")
                names[s] = f"v{s}"
        for i, c in enumerate(tr.calls):
            ns[f"K{i}"] = c.fn
            args = [names[s] for s in c.ins]
            if c.params:
                static = {k: v for k, v in c.params.items() if k not in c.dyn}
                if static:
                    ns[f"P{i}"] = static
                    args.append(f"**P{i}")
                for k, g in c.dyn.items():
                    ns[f"G{i}_{k}"] = g
                    args.append(f"{k}=G{i}_{k}()")
            if i in reuse:  # the result overwrites an input that dies here
                args.append(f"out={names[reuse[i]]}")
            elif i in into:  # updates written into the buffers they replace
                plan = into[i]
                targets = [names[plan[k]] if k in plan else "None" for k in range(len(c.outs))]
                args.append(f"out=({', '.join(targets)},)")
            for s in c.outs:
                names[s] = f"v{s}"
            targets = [f"v{s}" if s in last else "_" for s in c.outs]
            lhs = ", ".join(targets) + ("," if c.tuple_out and len(targets) == 1 else "")
            lines.append(f"    {lhs} = K{i}({', '.join(args)})")
            dead = sorted({s for s in c.ins if last.get(s) == i and names[s][0] == "v"})
            if dead:
                lines.append("    del " + ", ".join(f"v{s}" for s in dead))
        for s in final:
            if s not in names:
                raise RuntimeError("ember.compile: a result of the trace has no slot (a bug)")
        ret = ", ".join(names[s] for s in final)
        lines.append(f"    return ({ret}{',' if len(final) == 1 else ''})")
        source = "\n".join(lines)
        if not into:
            self.source = source
        code = builtins.compile(source, "<ember.compile program>", "exec")
        exec(code, ns)  # our own generated code
        return ns["program"]  # type: ignore[no-any-return]

    def run(self, flat: list[Any]) -> Any:
        ext: list[Any] = []
        for kind, src in self.readers:
            if kind == "arg":
                ext.append(base_payload(flat[src]))
            else:
                ext.append(base_payload(src))
        res = self.runner(ext)
        n = self.n_out
        for (t, put), payload in zip(self.writes, res[n:], strict=True):
            put(t, payload)
        if self.host_writes:
            new = [get() for _, _, get in self.host_writes]
            for (d, k, _), v in zip(self.host_writes, new, strict=True):
                d[k] = v
        leaves = list(self.out_leaves)
        for (make, where), payload in zip(self.outputs, res[:n], strict=True):
            leaves[where] = make(payload)
        return self.unflatten(self.out_tree, leaves)


def base_payload(t: Tensor) -> Any:
    """The payload behind ``t`` on the innermost device of its stack."""
    from ._backend import lower

    return lower(t)._data


def maker(t: Tensor) -> Callable[[Any], Tensor]:
    """Builds a tensor like ``t`` (its device and dtype, no gradient history) from a base
    payload."""
    from ._backend import lift

    device, base, dtype = t._device, t._device.base, t._dtype
    make = base.tensor_type._make
    return lambda payload: lift(make(payload, base, dtype), device)


def putter(t: Tensor) -> Callable[[Tensor, Any], None]:
    """Gives ``t`` a new base payload in place (`ember.nn._values.rebind`)."""
    from .nn._values import rebind

    base, dtype = t._device.base, t._dtype
    make = base.tensor_type._make
    return lambda target, payload: rebind(target, make(payload, base, dtype))


def _plan_inplace(tr: _trace.Tracer, last: dict[int, int], final: set[int],
                  inplace: Any) -> dict[int, int]:
    """Calls whose result may be written into one of their inputs: ``{call: input slot}``.

    An input qualifies when this call is its last use, an earlier call of the trace produced
    it (never an argument, a parameter or a constant), it is not a result of the program, and
    no value still alive after the call shares its memory; the backend (``inplace``) says
    whether the kernel can write into it (``can_overwrite(fn, inputs, position, output)``)
    and whether two payloads may share memory (``shares(a, b)``).
    """
    values = tr.values
    produced: set[int] = set()
    live: set[int] = {s for s in tr.external if s in last}
    reuse: dict[int, int] = {}
    for i, c in enumerate(tr.calls):
        if len(c.outs) == 1 and not c.tuple_out and not c.params and not c.dyn:
            ins = [values[s] for s in c.ins]
            for pos, s in enumerate(c.ins):
                if (last.get(s) != i or s in final or s not in produced
                        or c.ins.count(s) != 1
                        or not inplace.can_overwrite(c.fn, ins, pos, values[c.outs[0]])):
                    continue
                others = [v for v in live if v != s and last.get(v, -1) > i]
                if any(inplace.shares(values[s], values[v]) for v in others):
                    continue
                reuse[i] = s
                break
        for s in c.ins:
            if last.get(s) == i:
                live.discard(s)
        for s in c.outs:
            produced.add(s)
            if s in last:
                live.add(s)
    return reuse


def _plan_updates(tr: _trace.Tracer, last: dict[int, int], held: dict[int, int],
                  writes: list[tuple[int, Tensor, Any]], inplace: Any,
                  updated: list[bool]) -> dict[int, dict[int, int]]:
    """Updates a kernel can write into the buffer of the value they replace:
    ``{call: {output index: external slot}}``, and ``updated[j]`` set for each such write.

    A write (the new value of a tensor the program reads, a parameter or a moment) qualifies
    when the call that makes it reads the tensor's old value once, nothing reads that old
    value after the call, no value the call reads elsewhere or anything still alive after it
    shares the old value's memory, and the backend says the kernel can write that output over
    that input (``inplace.can_update(kernel, inputs, position, output index, outputs)``).
    """
    values = tr.values
    made: dict[int, tuple[int, int]] = {}
    for i, c in enumerate(tr.calls):
        for k, s in enumerate(c.outs):
            made[s] = (i, k)
    into: dict[int, dict[int, int]] = {}
    alive: dict[int, list[int]] = {}  # call -> the slots read at or after it
    for j, (w, t, _) in enumerate(writes):
        o = held.get(id(t))
        if o is None or w not in made:
            continue
        i, k = made[w]
        c = tr.calls[i]
        if last.get(o) != i or c.ins.count(o) != 1:
            continue
        ins = [values[x] for x in c.ins]
        outs = [values[x] for x in c.outs]
        if not inplace.can_update(c.fn, ins, c.ins.index(o), k, outs):
            continue
        if i not in alive:
            alive[i] = [x for x, at in last.items() if at >= i and x not in c.outs]
        old = values[o]
        if any(inplace.shares(old, values[x]) for x in alive[i] if x != o):
            continue
        into.setdefault(i, {})[k] = o
        updated[j] = True
    return into
