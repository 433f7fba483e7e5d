"""Compiled against eager gradients of the tiny GPT-2, batch by batch, then kernel by kernel.

    python benchmarks/gpu/with_env.py python benchmarks/gpu/compile_bisect.py [DEVICE] [PRECISION]

(defaults ``cuda:0 bf16``; ``triton-interpret`` or ``cpu`` run it without a GPU).  With the
weights fixed (gradients only, no optimizer), it prints, for three batches, the loss and the
largest gradient difference between eager and ``ember.compile`` (the trace is on batch 0), and
the constants the program froze.  Then it replays a program traced on batch 0 and one traced
on batch 1, both on batch 1, as Python (``EMBER_COMPILE_GRAPHS=0``), recording every kernel's
output, and prints the first kernels whose outputs differ with their program lines and where
their inputs come from: where a replay on a new batch departs from a trace of that batch (an
op that ran unrecorded shows as an input read from a tensor instead of a kernel's output).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import numpy as np

import ember

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _gpt2 as g  # this folder's modules
import gpt2 as G


def _host(t: Any) -> np.ndarray:
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def _instrument(prog: Any, store: list[tuple[int, str, list[np.ndarray | None]]]) -> None:
    """Wrap every kernel of ``prog``'s generated code to keep a host copy of its outputs."""
    scope = prog._program.__globals__
    for name in [k for k in scope if k.startswith("K") and k[1:].isdigit()]:
        fn = scope[name]

        def wrapped(*a: Any, _fn: Any = fn, _i: int = int(name[1:]), **kw: Any) -> Any:
            out = _fn(*a, **kw)
            copies: list[np.ndarray | None] = []
            for o in out if isinstance(out, tuple) else (out,):
                try:
                    arr = o.memory.to_numpy(o) if o.is_contiguous() else None
                except AttributeError:  # a cpu payload: a numpy array already
                    arr = np.asarray(o)
                copies.append(None if arr is None else np.asarray(arr, np.float64).copy())
            store.append((_i, getattr(_fn, "__qualname__", repr(_fn)), copies))
            return out

        scope[name] = wrapped


def _differs(a: np.ndarray | None, b: np.ndarray | None) -> float:
    if a is None or b is None or a.shape != b.shape or not a.size:
        return 0.0
    return float(np.nanmax(np.abs(a - b)))


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda:0"
    precision = sys.argv[2] if len(sys.argv) > 2 else "bf16"
    setup = G.prepare(g.TINY, device, batch=4, precision=precision, n_batches=3)
    dev = f"autodiff<{device}>"
    model = g.gpt2(ember, setup.cfg, device=dev)
    model.load_state_dict(setup.state)
    names, params = zip(*model.named_parameters(), strict=True)
    data = [(ember.tensor(x, device=dev), ember.tensor(y, device=dev)) for x, y in setup.data]

    def grads(x: Any, y: Any) -> Any:
        with g._ember_autocast(setup):
            loss = model(x, y)
        gs = loss.backward()
        return loss, [gs[p] for p in params]

    def run(fn: Any, b: int) -> tuple[float, list[np.ndarray]]:
        loss, gs = fn(*data[b])
        return float(loss.item()), [_host(t) for t in gs]

    eager = [run(grads, b) for b in range(3)]
    compiled = ember.compile(grads)
    replays = [run(compiled, b) for b in range(3)]
    print(f"{device} {precision}: traces {compiled.stats.traces}, replays "
          f"{compiled.stats.replays}")
    for b, ((le, ge), (lc, gc)) in enumerate(zip(eager, replays, strict=True)):
        worst = max(range(len(ge)), key=lambda i: np.abs(ge[i] - gc[i]).max())
        print(f"batch {b}: loss eager {le:.6f} compiled {lc:.6f}; largest gradient difference "
              f"{np.abs(ge[worst] - gc[worst]).max():.3e} at {names[worst]}")
    for prog in compiled.programs():
        print(f"program: {prog.kernels} kernels, {prog.constants} constants, {prog.inplace} "
              "in place")
        for k, v in prog._program.__globals__.items():
            if k.startswith("C") and k[1:].isdigit():
                print(f"  constant {k}: {getattr(v, 'shape', None)} {getattr(v, 'dtype', None)}")

    os.environ["EMBER_COMPILE_GRAPHS"] = "0"  # programs made from here on replay as Python
    on_other, on_same = ember.compile(grads), ember.compile(grads)
    on_other(*data[0])
    on_same(*data[1])
    (pa,), (pb,) = list(on_other.programs()), list(on_same.programs())
    sa: list[tuple[int, str, list[np.ndarray | None]]] = []
    sb: list[tuple[int, str, list[np.ndarray | None]]] = []
    _instrument(pa, sa)
    _instrument(pb, sb)
    pa.runner, pb.runner = pa._program, pb._program
    on_other(*data[1])
    on_same(*data[1])
    ember.device(device).synchronize()
    lines = pa.source.splitlines()
    bad = [(i, name, j, _differs(x, y), x)
           for (i, name, xs), (_, _, ys) in zip(sa, sb, strict=True)
           for j, (x, y) in enumerate(zip(xs, ys, strict=True)) if _differs(x, y) > 0]
    print(f"kernels recorded {len(sa)} / {len(sb)}; outputs that differ: {len(bad)}")
    for i, name, j, d, x in bad[:8]:
        line = next((text.strip() for text in lines if f"K{i}(" in text), "")
        print(f"  kernel {i} {name} output {j} {x.shape if x is not None else ''}: "
              f"largest difference {d:.3e}\n    {line}")
    if bad:
        first = bad[0][0]
        print("program lines before the first difference:")
        for text in lines:
            if any(f"K{k}(" in text for k in range(max(0, first - 6), first + 1)):
                print("   ", text.strip())
        print("where the inputs of the first differing kernel come from:")
        line = next(text for text in lines if f"K{first}(" in text)
        for v in re.findall(r"\bv\d+\b", line.split("=", 1)[1]):
            src = next(t.strip() for t in lines if re.match(rf"\s+(\w+, )*{v}(, \w+)* = ", t))
            print("   ", src)
            m = re.fullmatch(r"\w+ = E\[(\d+)\]", src)
            if m:
                kind, what = pa.readers[int(m.group(1))]
                print("      read from", kind, what if kind == "arg" else
                      f"{type(what).__name__} {tuple(what.shape)} {what.dtype}")


if __name__ == "__main__":
    main()
