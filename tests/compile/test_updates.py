"""A compiled program's variant that writes updates into the buffers they replace
(`Program.updating`, what a CUDA graph records): an Adam step's parameters and moments are
written in place, every value equals the plain program's, and nothing else is overwritten."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember._program import Program, base_payload

pytest.importorskip("ember_triton")
pytest.importorskip("ember_autodiff")

DEVICE = "autodiff<triton-interpret>"


def _step(weight_decay: float) -> tuple[object, list[object], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    try:
        dev = ember.device(DEVICE)
    except RuntimeError as e:  # triton imported compiled in this process by an earlier test
        pytest.skip(f"{DEVICE} is not available: {e}")
    model = ember.nn.Sequential(ember.nn.Linear(6, 5), ember.nn.Tanh(), ember.nn.Linear(5, 3))
    model.to(dev)
    params = list(model.parameters())
    opt = ember.optim.AdamW(params, lr=1e-2, weight_decay=weight_decay)

    @ember.compile
    def step(x, y):
        loss = ((model(x) - y) ** 2).mean()
        opt.step(loss.backward())
        return loss

    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = rng.standard_normal((4, 3)).astype(np.float32)
    for _ in range(3):  # a warm-up trace (the optimizer's state is made), the kept one, a replay
        step(ember.tensor(x, device=dev), ember.tensor(y, device=dev))
    return step, params, x, y


def _externals(prog: Program, args: list[ember.Tensor]) -> list[object]:
    return [base_payload(args[src]) if kind == "arg" else base_payload(src)
            for kind, src in prog.readers]


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adam_updates_are_written_into_the_buffers_they_replace(weight_decay: float) -> None:
    step, params, x, y = _step(weight_decay)
    prog = next(step.programs())  # type: ignore[attr-defined]  # ember.compile's wrapper
    assert prog.updating is not None, prog.source
    # every parameter and both of its moments; the shared step count (a `+ 1`) is copied
    assert sum(prog.updated) == 3 * len(params), prog.updated
    assert len(prog.updated) == 3 * len(params) + 1

    dev = ember.device(DEVICE)
    args = [ember.tensor(x, device=dev), ember.tensor(y, device=dev)]
    ext = _externals(prog, args)
    memory = ext[0].memory  # type: ignore[attr-defined]  # a DeviceArray
    before = [memory.to_numpy(a) for a in ext]
    plain = [memory.to_numpy(a) for a in prog._program(ext)]
    assert all(np.array_equal(memory.to_numpy(a), b) for a, b in zip(ext, before, strict=True))

    copies = [memory.from_numpy(b) for b in before]
    got = prog.updating(copies)
    n = prog.n_out
    written = set()
    for j, ((t, _), done) in enumerate(zip(prog.writes, prog.updated, strict=True)):
        np.testing.assert_array_equal(memory.to_numpy(got[n + j]), plain[n + j])
        k = next(i for i, (kind, src) in enumerate(prog.readers) if kind == "tensor" and src is t)
        assert (got[n + j] is copies[k]) == done
        if done:
            written.add(k)
    for i in range(n):
        np.testing.assert_array_equal(memory.to_numpy(got[i]), plain[i])
    # the batch, the gradients' sources and everything not updated keep their values
    for k, (a, b) in enumerate(zip(copies, before, strict=True)):
        if k not in written:
            np.testing.assert_array_equal(memory.to_numpy(a), b)
