"""What every model benchmark shares: the two training loops, thread limits, interleaved
rounds, and the loss check.

A model is a `ModelBench`: it builds the same network in both frameworks (most define it once,
over the framework's namespace, since ember's ``nn`` follows PyTorch's), keeps PyTorch's
initial weights as numpy arrays, and a few batches of numpy data.  From those it makes *sides*:
a PyTorch training step and one per ember stack, each a function ``step(i) -> loss`` that
trains on batch ``i`` (cycling) and reads the loss back as a float.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import ember
from ember import optim

SEED = 0
#: loss agreement asked of every ember stack against PyTorch, relative, per step
LOSS_RTOL = 1e-4

Step = Callable[[int], float]


class ModelBench:
    """One model: its name, a one-line description, how to build it and compute its loss.

    Subclasses set ``name``, ``title``, ``reps`` (steps timed back to back in a round) and
    ``clip`` (gradient-norm clipping, or ``None``), and implement the ``torch_*`` / ``ember_*``
    hooks.  ``__init__`` builds the PyTorch model once, with ``torch.manual_seed(SEED)``, and
    keeps its state as the initial weights of every side.
    """

    name = ""
    title = ""
    reps = 5
    clip: float | None = None

    def __init__(self) -> None:
        import torch

        torch.manual_seed(SEED)
        self.state = {k: v.detach().numpy().copy()
                      for k, v in self.torch_model().state_dict().items()}
        self.batches = self.data(np.random.default_rng(SEED))

    # -- what a model defines -------------------------------------------------------------------

    def data(self, rng: np.random.Generator) -> list[tuple[np.ndarray, ...]]:
        raise NotImplementedError

    def torch_model(self) -> Any:
        raise NotImplementedError

    def ember_model(self) -> ember.nn.Module:
        raise NotImplementedError

    def torch_optimizer(self, params: Any) -> Any:
        raise NotImplementedError

    def ember_optimizer(self, params: Any) -> optim.Optimizer:
        raise NotImplementedError

    def loss(self, F: Any, model: Any, batch: Sequence[Any]) -> Any:
        """The loss of ``model`` on ``batch``; ``F`` is ``torch.nn.functional`` or
        ``ember.nn.functional``."""
        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    # -- sides ----------------------------------------------------------------------------------

    def torch_side(self, check: bool = False) -> Step:
        """PyTorch eager: ``zero_grad``, forward, ``backward``, clipping, ``step``, ``item``.
        ``check`` puts the model in eval mode (no dropout), for the loss comparison."""
        import torch
        import torch.nn.functional as TF

        model = self.torch_model()
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in self.state.items()})
        model.train(not check)
        params = list(model.parameters())
        opt = self.torch_optimizer(params)
        batches = [tuple(torch.from_numpy(a) for a in b) for b in self.batches]

        def step(i: int) -> float:
            opt.zero_grad(set_to_none=True)
            loss = self.loss(TF, model, batches[i % len(batches)])
            loss.backward()
            if self.clip is not None:
                torch.nn.utils.clip_grad_norm_(params, self.clip)
            opt.step()
            return float(loss.item())

        return step

    def ember_side(self, device: str, check: bool = False, compiled: bool = False) -> Step:
        """ember on ``device``: forward, ``backward()``, clipping, ``opt.step(grads)``,
        ``item``; with ``compiled``, that function goes through ``ember.compile``."""
        import ember.nn.functional as EF

        model = self.ember_model()
        model.load_state_dict(self.state)
        model.to(device)
        model.train(not check)
        params = list(model.parameters())
        opt = self.ember_optimizer(params)
        batches = [tuple(ember.tensor(a, device=device) for a in b) for b in self.batches]
        clip = self.clip

        def train_step(*batch: ember.Tensor) -> ember.Tensor:
            loss = self.loss(EF, model, batch)
            grads = loss.backward()
            if clip is not None:
                grads, _ = optim.clip_grad_norm(grads, clip, parameters=params)
            opt.step(grads)
            return loss

        fn = ember.compile(train_step) if compiled else train_step  # type: ignore[attr-defined]  # being written

        def step(i: int) -> float:
            return float(fn(*batches[i % len(batches)]).item())

        return step


# -- threads ------------------------------------------------------------------------------------

_TORCH_DEFAULT_THREADS: list[int] = []


@contextlib.contextmanager
def thread_limit(threads: str) -> Iterator[None]:
    """``"1"``: one BLAS thread for numpy (threadpoolctl) and one intra-op thread for PyTorch;
    ``"default"``: what each library starts with."""
    import torch
    from threadpoolctl import threadpool_limits

    if not _TORCH_DEFAULT_THREADS:
        _TORCH_DEFAULT_THREADS.append(torch.get_num_threads())
    if threads == "1":
        with threadpool_limits(1):
            torch.set_num_threads(1)
            try:
                yield
            finally:
                torch.set_num_threads(_TORCH_DEFAULT_THREADS[0])
    else:
        torch.set_num_threads(_TORCH_DEFAULT_THREADS[0])
        yield


def stacks(threads: str) -> dict[str, tuple[str, bool]]:
    """Column name -> (device, compiled); "compiled fused" is ``ember.compile`` over the Fusion
    stack (fusion decided at trace time, replayed as recorded).  At one thread the Fusion
    stack runs its blocks on one thread too (it uses two by default).  A stack whose plugin is
    missing fails to build and is reported with its error."""
    fusion = "autodiff<fusion<cpu,threads=1>>" if threads == "1" else "autodiff<fusion<cpu>>"
    return {"eager": ("autodiff<cpu>", False), "fused": (fusion, False),
            "compiled": ("autodiff<cpu>", True), "compiled fused": (fusion, True)}


# -- timing -------------------------------------------------------------------------------------

@dataclass
class Timing:
    """Milliseconds per step of each side, one entry per round; sides that failed to build or
    run carry their error instead."""

    model: str
    threads: str
    ms: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def median(self, side: str) -> float:
        return statistics.median(self.ms[side])

    def ratio(self, side: str) -> str:
        if side in self.errors:
            return f"n/a: {self.errors[side]}"
        if side not in self.ms:
            return "-"
        return f"{self.median(side) / self.median('torch'):.2f}x"


def _error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text if len(text) <= 90 else text[:87] + "..."


def make_sides(bench: ModelBench, threads: str, check: bool = False
               ) -> tuple[dict[str, Step], dict[str, str]]:
    """``{"torch": ..., "eager": ..., "fused": ..., "compiled": ..., "compiled fused": ...}``
    and the errors of the ember sides that could not be built (``ember.compile`` missing, say)."""
    sides: dict[str, Step] = {"torch": bench.torch_side(check)}
    errors: dict[str, str] = {}
    for name, (device, compiled) in stacks(threads).items():
        try:
            sides[name] = bench.ember_side(device, check, compiled)
        except Exception as exc:  # a stack that cannot build is reported, the rest carry on
            errors[name] = _error(exc)
    return sides, errors


def time_model(bench: ModelBench, threads: str, rounds: int, reps: int | None = None,
               warmup: int = 2) -> Timing:
    """Interleaved rounds: every side runs ``reps`` steps in turn, each round starting one side
    later, so that a machine whose speed drifts favours none; ``warmup`` untimed steps first
    (the compiled side traces on its first)."""
    reps = bench.reps if reps is None else reps
    result = Timing(bench.name, threads)
    with thread_limit(threads):
        sides, result.errors = make_sides(bench, threads)
        step_no: dict[str, int] = {}
        for name in list(sides):
            try:
                for i in range(warmup):
                    sides[name](i)
            except Exception as exc:
                result.errors[name] = _error(exc)
                if name == "torch":
                    raise
                del sides[name]
            step_no[name] = warmup
            result.ms[name] = []
        order = list(sides)
        for r in range(rounds):
            for name in order[r % len(order):] + order[:r % len(order)]:
                fn, i0 = sides[name], step_no[name]
                t0 = time.perf_counter()
                for i in range(i0, i0 + reps):
                    fn(i)
                result.ms[name].append((time.perf_counter() - t0) / reps * 1e3)
                step_no[name] = i0 + reps
    for name in result.errors:
        result.ms.pop(name, None)
    return result


# -- the loss check -----------------------------------------------------------------------------

@dataclass
class LossCheck:
    """Largest relative difference of each ember stack's losses from PyTorch's over the first
    ``steps`` steps from the same initial weights and batches."""

    model: str
    steps: int
    torch_losses: list[float]
    diffs: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def failures(self) -> list[str]:
        return [f"{self.model} {name}: max relative loss difference {d:.2e} > {LOSS_RTOL:g}"
                for name, d in self.diffs.items() if not d <= LOSS_RTOL]


def check_losses(bench: ModelBench, steps: int = 5, threads: str = "1") -> LossCheck:
    """Fresh sides in eval mode (no dropout, so both frameworks compute the same function),
    ``steps`` training steps each; compares every ember stack's losses with PyTorch's."""
    with thread_limit(threads):
        sides, errors = make_sides(bench, threads, check=True)
        torch_step = sides.pop("torch")
        ref = [torch_step(i) for i in range(steps)]
        out = LossCheck(bench.name, steps, ref, errors=errors)
        for name, fn in sides.items():
            try:
                losses = [fn(i) for i in range(steps)]
            except Exception as exc:
                out.errors[name] = _error(exc)
                continue
            out.diffs[name] = max(abs(a - b) / max(abs(b), 1e-12)
                                  for a, b in zip(losses, ref, strict=True))
    return out


# -- tables -------------------------------------------------------------------------------------

COLUMNS = ("eager", "fused", "compiled", "compiled fused")


def model_table(timings: Sequence[Timing], check: LossCheck | None) -> str:
    """One model: per thread setting, PyTorch's median step and each ember stack's step and
    ratio; then the loss check."""
    lines = []
    head = f"  {'threads':<8} {'torch eager':>12}" + "".join(f"  {c:>22}" for c in COLUMNS)
    lines.append(head)
    for t in timings:
        row = f"  {t.threads:<8} {t.median('torch'):9.2f} ms"
        for c in COLUMNS:
            if c in t.ms:
                cell = f"{t.median(c):8.2f} ms {t.ratio(c):>7}"
            else:
                cell = t.ratio(c)
            row += f"  {cell:>22}"
        lines.append(row)
    if check is not None:
        parts = [f"{c} {d:.1e}" for c, d in check.diffs.items()]
        parts += [f"{c} n/a ({e})" for c, e in check.errors.items()]
        verdict = "FAIL" if check.failures() else "ok"
        lines.append(f"  losses over the first {check.steps} steps, max relative difference "
                     f"from torch: {', '.join(parts)}  [{verdict}]")
    return "\n".join(lines)


def summary_table(timings: Sequence[Timing], markdown: bool = False) -> str:
    """Every model and thread setting in one table of ratios (ember / torch eager)."""
    rows = [("model", "threads", "torch eager (ms)", *COLUMNS)]
    for t in timings:
        rows.append((t.model, t.threads, f"{t.median('torch'):.2f}",
                     *(t.ratio(c) for c in COLUMNS)))
    if markdown:
        out = ["| " + " | ".join(rows[0]) + " |",
               "|---|---|---:|" + "---:|" * len(COLUMNS)]
        out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return "\n".join(out)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(r, widths, strict=True)))
                     for r in rows)
