"""`Learner`: the fit and validate loops, with metrics, checkpoints, resume and a clean stop."""

from __future__ import annotations

import copy
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._artifacts import Artifacts
from ._checkpoint import Checkpointer, CheckpointInfo, checkpoint_name
from ._early_stopping import EarlyStopping, MetricTracker
from ._interrupt import StopRequest
from ._metrics import Metric, StepView, default_metrics, reduce_metrics
from ._render import Renderer, RunView, format_duration, make_renderer
from ._rng import RandomStreams, find_generators
from ._steps import AccumulatedGradients, StepOutput, as_step_output, default_step, to_device

__all__ = ["FitResult", "Learner"]

PARTS = ("model", "optimizer", "scheduler", "pending")
Results = dict[str, dict[str, float | None]]


@dataclass
class FitResult:
    """How `Learner.fit` ended."""

    epochs_done: int
    stop_reason: str  # "completed", "early stopping: ...", "interrupted (SIGINT)"
    history: dict[str, list[dict[str, Any]]]
    best: tuple[str, float, int] | None = None  # (metric, value, epoch)
    checkpoint: Path | None = None  # the last checkpoint written or resumed from
    elapsed_s: float = 0.0
    resume_command: str | None = None
    plots: list[Path] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        return self.stop_reason.startswith("interrupted")

    def last(self, split: str) -> dict[str, Any]:
        rows = self.history.get(split, [])
        return rows[-1] if rows else {}


class _Epoch:
    """Where the epoch in progress stands: steps done, metric accumulators, RNG at its start."""

    def __init__(self, number: int, metrics: list[Metric]) -> None:
        self.number = number
        self.metrics = metrics
        self.step = 0
        self.start_rng: dict[str, Any] = {}
        for m in metrics:
            m.reset()


class Learner:
    """Train a model: fit/validate loops, metrics, checkpoints, resume, early stopping.

    Parameters
    ----------
    model
        An ``ember.nn.Module``.  If it defines ``train_step(batch)`` / ``valid_step(batch)``
        (returning a `StepOutput`, a ``(loss, output, target)`` tuple or a bare loss) those are
        used; otherwise batches are ``(inputs, targets)`` and the step is
        ``loss_fn(model(inputs), targets)``.
    optimizer
        An ``ember.optim`` optimizer: ``optimizer.step(grads)`` with the `Gradients` of
        ``loss.backward()``, ``state_dict()`` / ``load_state_dict()``.
    loss_fn
        The loss for the default step (``ember.nn.functional.cross_entropy``).
    scheduler, scheduler_interval
        An LR scheduler (``step()``, ``state_dict()``), stepped each ``"epoch"`` or each
        optimizer ``"step"``.
    metrics
        `Metric` objects computed on every split (default: `default_metrics`).
    device
        Where batches go (``"autodiff<cpu>"``); the model must already be there (move it
        before creating the optimizer, as in PyTorch).  ``None`` leaves batches alone.
    artifacts
        The run's folder (config, metric logs, checkpoints, plots, model); ``None``: no files.
    keep_last, best_metric
        Checkpoints kept (newest N), and the metric that picks the best one
        (``"valid/accuracy"``); the best checkpoint is never pruned and becomes
        ``model.safetensors`` at the end.  Default: the metric ``early_stopping`` watches
        (with its ``mode`` and ``min_delta``), else no best checkpoint (the last one is served).
    early_stopping
        An `EarlyStopping`, or ``None``.
    accumulate
        Optimizer steps once per ``accumulate`` batches, with the mean of their gradients.
    generators
        Random streams to save and restore besides those found on the model and the loaders
        (ember ``Generator``, numpy ``Generator``/``RandomState``, ``random.Random``).
    config
        Anything JSON-able describing the run (the model's hyperparameters, CLI arguments):
        written to ``config.json`` so that inference can rebuild the model.
    renderer
        ``"auto"`` (progress bars on a terminal, plain lines elsewhere), ``"dashboard"``,
        ``"plain"``, ``"progress"``, ``"none"``, or a `Renderer`.
    plots
        Write ``plots/<metric>.png`` (matplotlib, Agg) at the end of ``fit``.
    callbacks
        Objects with any of ``on_step_end(learner, split, step)``,
        ``on_epoch_end(learner, epoch, results)``, ``on_checkpoint(learner, path)``.
    compile
        Run each training step (forward, ``backward()``, optimizer step) and each validation
        step through `ember.compile`: traced on the first batch of each shape, replayed after
        (no per-op Python).  Ignored with ``accumulate > 1`` or several ranks.
    distributed
        An ``ember.distributed`` communicator (default: ``ember.distributed.get()``, the one
        ``ember.distributed.init()`` made, else this process alone).  With several ranks the
        Learner trains data-parallel: rank 0's initial weights are broadcast, gradients are
        averaged over ranks in buckets before each optimizer step (`GradientBuckets`),
        metrics are reduced over ranks, a stop request on any rank stops all of them after the
        same step, and only rank 0 writes files and prints (the others wait at a barrier while
        it checkpoints).  Give each rank its shard with ``ember.data.DistributedSampler``.

    Examples
    --------
    >>> import ember, ember_train
    >>> from ember import nn
    >>> from ember.nn import functional as F
    >>> ember.manual_seed(0) and None
    >>> learner = ember_train.Learner(nn.Linear(2, 2), loss_fn=F.cross_entropy, renderer="none")
    >>> learner.validate([(ember.ones(4, 2), ember.tensor([0, 1, 1, 0]))])["accuracy"]
    0.5
    """

    def __init__(self, model: Any, optimizer: Any = None, *,
                 loss_fn: Callable[[Any, Any], Any] | None = None, scheduler: Any = None,
                 scheduler_interval: str = "epoch", metrics: Sequence[Metric] | None = None,
                 device: Any = None, artifacts: str | os.PathLike[str] | None = None,
                 keep_last: int | None = 3, best_metric: str | None = None,
                 best_mode: str = "auto", early_stopping: EarlyStopping | None = None,
                 accumulate: int = 1, generators: dict[str, Any] | Sequence[Any] | None = None,
                 config: dict[str, Any] | None = None, renderer: str | Renderer = "auto",
                 name: str | None = None, callbacks: Iterable[Any] = (),
                 resume_command: str | None = None, plots: bool = True,
                 distributed: Any = None, compile: bool = False) -> None:
        if scheduler_interval not in ("epoch", "step"):
            raise ValueError(f"scheduler_interval must be 'epoch' or 'step', got "
                             f"{scheduler_interval!r}")
        if accumulate < 1:
            raise ValueError(f"accumulate must be at least 1, got {accumulate}")
        import ember
        import ember.distributed

        self.comm = ember.distributed.get() if distributed is None else distributed
        self.parallel = self.comm.world_size > 1
        self.writer = self.comm.rank == 0  # the rank that writes files and prints
        if not self.writer:
            renderer = "none"
        self._buckets: Any = None
        self.device = None if device is None else ember.device(device)
        self.model = model
        current = getattr(model, "device", None)
        if self.device is not None and current is not None and current is not self.device:
            # Moving makes new parameter tensors, which an optimizer built before would miss.
            raise ValueError(f"the model is on {current}, the Learner's device is "
                             f"{self.device}: call model.to({str(self.device)!r}) before "
                             "creating the optimizer")
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.scheduler = scheduler
        self.scheduler_interval = scheduler_interval
        self.metrics = list(metrics) if metrics is not None else default_metrics()
        self.artifacts = None if artifacts is None else Artifacts(artifacts)
        self.checkpointer = None if self.artifacts is None else Checkpointer(
            self.artifacts.checkpoints, keep_last)
        if best_metric is None and early_stopping is not None:
            # the epoch early stopping counts from is the one worth serving: one best epoch
            self.best: MetricTracker | None = MetricTracker(
                early_stopping.metric, early_stopping.mode, early_stopping.min_delta)
        else:
            self.best = None if best_metric is None else MetricTracker(best_metric, best_mode)
        self.early_stopping = early_stopping
        self.accumulate = accumulate
        self.config = dict(config or {})
        self.renderer_mode = renderer
        self.name = name or (Path(artifacts).name if artifacts is not None else "run")
        self.callbacks = list(callbacks)
        self.resume_command = resume_command
        self.plots = plots
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.epochs_done = 0
        self.global_step = 0  # optimizer steps taken
        self._extra_streams = generators
        self._pending = AccumulatedGradients()
        # one training step (forward, backward, optimizer) and one validation step, each
        # traced once per batch shape and replayed (`ember.compile`); gradient accumulation
        # and data-parallel training keep the eager loop
        self.compile = bool(compile) and accumulate == 1 and not self.parallel
        self._compiled: dict[str, Any] = {}
        self._view = RunView(name=self.name, device=str(self.device or ""))
        self._renderer: Renderer = Renderer(self._view)

    # -- the steps --------------------------------------------------------------------------

    def _step_fn(self, kind: str) -> Callable[[Any], StepOutput]:
        own = getattr(self.model, f"{kind}_step", None)
        if callable(own):
            return lambda batch: as_step_output(own(batch))
        return default_step(self.model, self.loss_fn)

    def _compiled_step(self, kind: str) -> Callable[[Any], StepOutput]:
        """The split's step as one compiled function: train steps include the optimizer."""
        fn = self._compiled.get(kind)
        if fn is None:
            import ember

            step_fn = self._step_fn(kind)
            optimizer = self.optimizer

            def train(batch: Any) -> tuple[Any, Any, Any, int]:
                out = step_fn(batch)
                optimizer.step(out.loss.backward())
                return out.loss, out.output, out.target, out.items()

            def valid(batch: Any) -> tuple[Any, Any, Any, int]:
                out = step_fn(batch)
                return out.loss, out.output, out.target, out.items()

            compiled = ember.compile(train if kind == "train" else valid)

            def fn(batch: Any) -> StepOutput:
                return StepOutput(*compiled(batch))
            fn.compiled = compiled  # type: ignore[attr-defined]  # for stats and tests
            self._compiled[kind] = fn
        return fn

    def _lr(self) -> float | None:
        opt = self.optimizer
        groups = getattr(opt, "param_groups", None)
        if groups:
            lr = groups[0].get("lr") if isinstance(groups[0], dict) else getattr(
                groups[0], "lr", None)
            if lr is not None:
                return float(lr)
        lr = getattr(opt, "lr", None)
        return None if lr is None else float(lr)

    def _params(self) -> list[Any]:
        params = getattr(self.model, "parameters", None)
        return [p for p in params() if getattr(p, "requires_grad", True)] if params else []

    def _optimizer_step(self) -> None:
        grads: Any = self._pending.mean()
        self._pending = AccumulatedGradients()
        if self.parallel:
            if self._buckets is None:
                from ember.distributed import GradientBuckets

                self._buckets = GradientBuckets(self._params(), self.comm)
            grads = self._buckets.reduce(grads)
        self.optimizer.step(grads)
        self.global_step += 1
        if self.scheduler is not None and self.scheduler_interval == "step":
            self.scheduler.step()

    # -- loops ------------------------------------------------------------------------------

    def _split_metrics(self) -> list[Metric]:
        return [copy.deepcopy(m) for m in self.metrics]

    def _run_split(self, split: str, loader: Any, epoch: _Epoch, stop: StopRequest | None,
                   ) -> bool:
        """Run ``loader`` through the split's step; False when a stop was requested."""
        train = split == "train"
        step_fn = self._step_fn("train" if train else "valid")
        compiled = self._compiled_step("train" if train else "valid") if self.compile else None
        v = self._view
        v.split, v.epoch, v.step = split, epoch.number, epoch.step
        v.steps = len(loader) if hasattr(loader, "__len__") else None
        v.step_losses, v.running_loss = [], None
        self._renderer.split_start()
        metrics = [m for m in epoch.metrics]
        params = self._params() if train else []
        lr = self._lr() if train else None
        loss_sum, done = 0.0, 0
        import ember

        t_prev = time.perf_counter()
        for batch in loader:
            batch = to_device(batch, self.device)
            if compiled is not None:
                if train:
                    out = compiled(batch)  # forward, backward and the optimizer's step
                    self.global_step += 1
                    if self.scheduler is not None and self.scheduler_interval == "step":
                        self.scheduler.step()
                    lr = self._lr()
                else:
                    with ember.no_grad():
                        out = compiled(batch)
            elif train:
                out = step_fn(batch)
                grads = out.loss.backward()
                self._pending.add(grads, params)
                if self._pending.count >= self.accumulate:
                    self._optimizer_step()
                    lr = self._lr()
            else:
                with ember.no_grad():
                    out = step_fn(batch)
            t = time.perf_counter()
            view = StepView(out.loss, out.output, out.target, out.items(), lr, t - t_prev)
            t_prev = t
            for m in metrics:
                if out.output is not None or not m.needs_output:
                    m.update(view)
            epoch.step += 1
            done += 1
            loss_sum += view.loss
            v.step = epoch.step
            v.step_losses.append(view.loss)
            v.running_loss = loss_sum / done
            self._renderer.step()
            for cb in self.callbacks:
                hook = getattr(cb, "on_step_end", None)
                if hook is not None:
                    hook(self, split, epoch.step)
            if stop is not None and self._stop_now(stop):
                return False
        if train and self._pending.count:  # a last, partial accumulation group
            self._optimizer_step()
        return True

    def _stop_now(self, stop: StopRequest) -> bool:
        """Whether to stop after this step; with several ranks, all agree (any rank asked)."""
        if not self.parallel:
            return stop.requested
        import ember

        flag = ember.tensor([1 if stop.requested else 0], dtype=ember.int64)
        if self.comm.all_reduce(flag, "max").item() and not stop.requested:
            stop.request("a stop request on another rank")
        return stop.requested

    def _results(self, metrics: list[Metric]) -> dict[str, float | None]:
        if self.parallel:
            metrics = reduce_metrics(metrics, self.comm)
        return {m.name: m.compute() for m in metrics}

    def _broadcast_weights(self) -> None:
        """Rank 0's model state on every rank (parameters keep their identity)."""
        state = self.model.state_dict()
        self.model.load_state_dict({k: self.comm.broadcast(v.detach(), 0)
                                    for k, v in state.items()})

    def validate(self, loader: Any, split: str = "valid") -> dict[str, float | None]:
        """Run ``loader`` once in eval mode without recording gradients; the metrics."""
        was_training = getattr(self.model, "training", False)
        if hasattr(self.model, "eval"):
            self.model.eval()
        renderer, self._renderer = self._renderer, Renderer(self._view)  # silent outside fit
        try:
            epoch = _Epoch(self.epochs_done, self._split_metrics())
            self._run_split(split, loader, epoch, None)
        finally:
            self._renderer = renderer
            if was_training and hasattr(self.model, "train"):
                self.model.train()
        return self._results(epoch.metrics)

    # -- random streams ---------------------------------------------------------------------

    def _streams(self, train: Any, valid: Any) -> tuple[RandomStreams, list[str]]:
        streams = RandomStreams()
        extra = self._extra_streams or {}
        if not isinstance(extra, dict):
            extra = {f"user.{i}": g for i, g in enumerate(extra)}
        for k, g in extra.items():
            streams.add(k, g)
        for i, g in enumerate(find_generators(self.model)):
            streams.add(f"model.{i}", g)
        loader_names = []
        for split, loader in (("train", train), ("valid", valid)):
            if loader is None:
                continue
            for i, g in enumerate(find_generators(loader)):
                before = len(streams.streams)
                streams.add(f"loader.{split}.{i}", g)
                if len(streams.streams) > before:
                    loader_names.append(f"loader.{split}.{i}")
        return streams, loader_names

    # -- checkpoints ------------------------------------------------------------------------

    def _checkpoint(self, epoch: _Epoch | None, streams: RandomStreams) -> Path | None:
        """Write a checkpoint of the state now: at an epoch's end (``epoch`` None) or inside."""
        if self.checkpointer is None:
            return None
        if not self.writer:  # rank 0 writes; the others wait until it is complete
            self.comm.barrier()
            latest = self.checkpointer.latest()
            return None if latest is None else latest.path
        parts: dict[str, Any] = {"model": self.model.state_dict()}
        if self.optimizer is not None and hasattr(self.optimizer, "state_dict"):
            parts["optimizer"] = self.optimizer.state_dict()
        if self.scheduler is not None and hasattr(self.scheduler, "state_dict"):
            parts["scheduler"] = self.scheduler.state_dict()
        state: dict[str, Any] = {
            "format": 1, "epochs_done": self.epochs_done, "step": 0,
            "global_step": self.global_step, "rng": streams.state(),
            "history": self.history,
            "best": None if self.best is None else self.best.state_dict(),
            "early_stopping": None if self.early_stopping is None
            else self.early_stopping.state_dict(),
        }
        if epoch is not None and epoch.step:
            state["step"] = epoch.step
            state["epoch_start_rng"] = epoch.start_rng
            state["metrics"] = [m.state_dict() for m in epoch.metrics]
            if self._pending.count:
                names = {id(p): n for n, p in self.model.named_parameters()} \
                    if hasattr(self.model, "named_parameters") else {}
                pairs = self._pending.params_and_grads()
                parts["pending"] = {names.get(id(p), str(i)): g for i, (p, g) in
                                    enumerate(pairs)}
                state["pending_count"] = self._pending.count
        name = checkpoint_name(self.epochs_done, state["step"])
        path = self.checkpointer.save(name, parts, state)
        if self.parallel:
            self.comm.barrier()
        for cb in self.callbacks:
            hook = getattr(cb, "on_checkpoint", None)
            if hook is not None:
                hook(self, path)
        return path

    def _restore(self, info: CheckpointInfo, states: dict[str, Any], state: dict[str, Any],
                 streams: RandomStreams) -> None:
        self.model.load_state_dict(_on_device(states["model"], self.model))
        if "optimizer" in states and self.optimizer is not None:
            self.optimizer.load_state_dict(states["optimizer"])
        if "scheduler" in states and self.scheduler is not None:
            self.scheduler.load_state_dict(states["scheduler"])
        self.epochs_done = state["epochs_done"]
        self.global_step = state["global_step"]
        self.history = state["history"]
        if self.best is not None and state.get("best"):
            self.best.load_state_dict(state["best"])
        if self.early_stopping is not None and state.get("early_stopping"):
            self.early_stopping.load_state_dict(state["early_stopping"])
        self._pending = AccumulatedGradients()
        if "pending" in states:
            params = dict(self.model.named_parameters())
            self._pending.load([(params[n], g) for n, g in states["pending"].items()],
                               state["pending_count"])
        streams.restore(state["rng"])

    # -- fit --------------------------------------------------------------------------------

    def fit(self, train: Any, valid: Any = None, epochs: int = 10, *,
            resume: bool | str | os.PathLike[str] = False) -> FitResult:
        """Train for ``epochs`` epochs (in total, counting those before a resume).

        ``resume``: ``True``/``"latest"`` continues from the newest complete checkpoint (or
        starts afresh when there is none), ``"best"`` or a checkpoint path from that one.
        The first SIGINT/SIGTERM finishes the current step, writes a checkpoint and returns
        (``result.interrupted``); a second one aborts at once.
        """
        if self.optimizer is None:
            raise TypeError("fit needs an optimizer")
        t0 = time.perf_counter()
        streams, loader_streams = self._streams(train, valid)
        resumed: CheckpointInfo | None = None
        resume_state: dict[str, Any] = {}
        if self.checkpointer is not None and self.writer:
            self.checkpointer.clean()
        if self.parallel:  # nobody reads checkpoints while rank 0 cleans up
            self.comm.barrier()
        if resume:
            if self.checkpointer is None:
                raise ValueError("resume needs an artifacts folder")
            which = "latest" if resume is True else resume
            if which == "latest":
                found = self.checkpointer.read_latest(PARTS)
            else:
                info = self.checkpointer.resolve(which)
                found = (info, *self.checkpointer.read(info, PARTS))
            if found is not None:
                resumed, states, resume_state = found
                self._restore(resumed, states, resume_state, streams)
        stale = 0
        if self.parallel:
            # every rank starts from rank 0's weights (a fresh model, or what it resumed)
            self._broadcast_weights()
        if resumed is None and self.checkpointer is not None and self.writer:
            # a fresh run in a used folder: the old run's checkpoints would mix with the new
            # ones (pruning, "latest", "best"), so they go
            stale = self.checkpointer.clear()
            if self.artifacts is not None:
                self.artifacts.model_path.unlink(missing_ok=True)
        self._write_config(epochs, train, valid)
        if self.artifacts is not None and self.writer:
            self.artifacts.rewrite_metrics(self.history)
        v = self._view
        v.epochs, v.start_epoch = epochs, self.epochs_done + 1
        v.history, v.started, v.epoch_times = self.history, time.perf_counter(), []
        v.formats = {m.name: m for m in self.metrics}
        self._renderer = self._make_renderer()
        self._renderer.start()
        if stale and self.checkpointer is not None:
            self._renderer.message(f"starting afresh: removed {stale} checkpoint(s) of an "
                                   f"earlier run from {self.checkpointer.directory}")
        if resumed is not None:
            self._renderer.message(f"resumed from {resumed.path} (epoch {self.epochs_done}"
                                   + (f", step {resumed.step}" if resumed.step else "") + ")")
        reason = "completed"
        last_ckpt = None if resumed is None else resumed.path
        if hasattr(self.model, "train"):
            self.model.train()
        with StopRequest() as stop:
            try:
                reason, last_ckpt = self._epochs(train, valid, epochs, stop, streams,
                                                 loader_streams, resume_state, last_ckpt)
            except KeyboardInterrupt:  # the second Ctrl-C: abort, say what is left
                self._renderer.close()
                done = None if self.checkpointer is None else self.checkpointer.latest()
                sys.stderr.write(f"\naborted; the last complete checkpoint is "
                                 f"{done.path if done else 'none'}\n")
                raise
            finally:
                self._renderer.close()
        result = FitResult(self.epochs_done, reason, self.history,
                           self._best_tuple(), last_ckpt, time.perf_counter() - t0)
        if result.interrupted:
            result.resume_command = self._resume_command()
        else:
            result.plots = self._finish()
        self._summary(result)
        return result

    def _epochs(self, train: Any, valid: Any, epochs: int, stop: StopRequest,
                streams: RandomStreams, loader_streams: list[str], resume_state: dict[str, Any],
                last_ckpt: Path | None) -> tuple[str, Path | None]:
        skip = resume_state.get("step", 0)
        while self.epochs_done < epochs:
            if self.early_stopping is not None and self.early_stopping.should_stop():
                return self.early_stopping.reason(), last_ckpt
            number = self.epochs_done + 1
            t_epoch = time.perf_counter()
            epoch = _Epoch(number, self._split_metrics())
            if hasattr(train, "set_epoch"):
                train.set_epoch(number - 1)
            if skip:
                # the stop came inside this epoch: replay the loader's order from the epoch's
                # start, skip the steps already done, and go on with the saved streams
                epoch.start_rng = resume_state["epoch_start_rng"]
                streams.restore(epoch.start_rng)
                for m, s in zip(epoch.metrics, resume_state["metrics"], strict=True):
                    m.load_state_dict(s)
                current = {k: s for k, s in resume_state["rng"].items()
                           if k not in loader_streams}
                order = iter(train)
                for _ in range(skip):
                    next(order, None)
                streams.restore(current, strict=False)
                epoch.step = skip
                ok = self._run_split("train", _Chain(order, len(train) if hasattr(
                    train, "__len__") else None), epoch, stop)
                skip = 0
            else:
                epoch.start_rng = streams.state()
                ok = self._run_split("train", train, epoch, stop)
            if not ok:
                return self._interrupted(epoch, streams, stop), self._last_interrupt_ckpt
            results: Results = {"train": self._results(epoch.metrics)}
            if valid is not None:
                if hasattr(self.model, "eval"):
                    self.model.eval()
                vepoch = _Epoch(number, self._split_metrics())
                ok = self._run_split("valid", valid, vepoch, stop)
                if hasattr(self.model, "train"):
                    self.model.train()
                if not ok:
                    return self._interrupted(epoch, streams, stop), self._last_interrupt_ckpt
                results["valid"] = self._results(vepoch.metrics)
            if self.scheduler is not None and self.scheduler_interval == "epoch":
                self.scheduler.step()
            self.epochs_done = number
            for split, values in results.items():
                row = {"epoch": number, **values}
                self.history.setdefault(split, []).append(row)
                if self.artifacts is not None and self.writer:
                    self.artifacts.append_metrics(split, row)
            is_best = self.best.update(number, results) if self.best is not None else False
            if self.early_stopping is not None:
                self.early_stopping.update(number, results)
            self._view.epoch_times.append(time.perf_counter() - t_epoch)
            self._renderer.epoch_end(number, results, is_best)
            last_ckpt = self._checkpoint(None, streams) or last_ckpt
            if self.checkpointer is not None and last_ckpt is not None and self.writer:
                if is_best and self.best is not None and self.best.best is not None:
                    self.checkpointer.mark_best(last_ckpt.name, self.best.metric,
                                                self.best.best, number)
                self.checkpointer.prune()
            for cb in self.callbacks:
                hook = getattr(cb, "on_epoch_end", None)
                if hook is not None:
                    hook(self, number, results)
            if stop.requested:  # came while the epoch ended: its checkpoint is the one
                self._renderer.message(f"{stop.signal_name}: stopping after epoch {number} "
                                       "(its checkpoint is written)")
                return f"interrupted ({stop.signal_name})", last_ckpt
        if self.early_stopping is not None and self.early_stopping.should_stop():
            return self.early_stopping.reason(), last_ckpt
        return "completed", last_ckpt

    _last_interrupt_ckpt: Path | None = None

    def _interrupted(self, epoch: _Epoch, streams: RandomStreams, stop: StopRequest) -> str:
        # Said here, after the step, not in the signal handler: printing from a handler can
        # land inside a write the main thread is doing (a reentrant-call error on stdout).
        self._renderer.message(f"{stop.signal_name}: finished the current step, writing a "
                               "checkpoint (press Ctrl-C again to abort at once)")
        self._last_interrupt_ckpt = self._checkpoint(epoch, streams)
        return f"interrupted ({stop.signal_name})"

    def _resume_command(self) -> str:
        if self.resume_command is not None:
            return self.resume_command
        argv = list(sys.argv)
        if argv and argv[0].endswith(".py"):
            argv = ["python", *argv]
        elif argv:
            argv[0] = "python"
        if "--resume" not in argv:
            argv.append("--resume")
        return shlex.join(argv)

    def _best_tuple(self) -> tuple[str, float, int] | None:
        b = self.best
        if b is None or b.best is None or b.best_epoch is None:
            return None
        return (b.metric, b.best, b.best_epoch)

    def _make_renderer(self) -> Renderer:
        if isinstance(self.renderer_mode, Renderer):
            self.renderer_mode.view = self._view
            return self.renderer_mode
        return make_renderer(self._view, self.renderer_mode)

    def _write_config(self, epochs: int, train: Any, valid: Any) -> None:
        if self.artifacts is None or not self.writer:
            return
        self.artifacts.write_config({
            "name": self.name,
            "config": self.config,
            "learner": {
                "epochs": epochs, "device": str(self.device) if self.device else None,
                "optimizer": type(self.optimizer).__name__,
                "scheduler": None if self.scheduler is None else type(self.scheduler).__name__,
                "scheduler_interval": self.scheduler_interval, "accumulate": self.accumulate,
                "metrics": [m.name for m in self.metrics],
                "best_metric": None if self.best is None else self.best.metric,
                "early_stopping": None if self.early_stopping is None else {
                    "metric": self.early_stopping.metric,
                    "patience": self.early_stopping.patience,
                    "min_delta": self.early_stopping.min_delta},
                "keep_last": None if self.checkpointer is None else self.checkpointer.keep_last,
                "train_batches": len(train) if hasattr(train, "__len__") else None,
                "valid_batches": len(valid) if hasattr(valid, "__len__") else None,
            },
        })

    def _finish(self) -> list[Path]:
        """At the end of a run: the model to serve and the plots."""
        if self.artifacts is None or self.checkpointer is None or not self.writer:
            return []
        import shutil

        source = self.checkpointer.best() or self.checkpointer.latest()
        if source is not None:
            tmp = self.artifacts.model_path.with_name(f".model.safetensors.tmp-{os.getpid()}")
            shutil.copyfile(source.path / "model.safetensors", tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, self.artifacts.model_path)
        if not (self.plots and self.history):
            return []
        return self.artifacts.write_plots(self.history)

    def _summary(self, result: FitResult) -> None:
        """What the run did, naming one best epoch (the one ``best_metric`` picked, whose
        checkpoint is served) beside its checkpoint, and the last checkpoint when it is
        another one."""
        stopped = result.stop_reason
        if self.early_stopping is not None and stopped == self.early_stopping.reason():
            stopped = self.early_stopping.reason(best=False)  # the best is said once, below
        lines = [("stopped", stopped),
                 ("epochs", str(result.epochs_done)),
                 ("time", format_duration(result.elapsed_s) + f" ({result.elapsed_s:.1f} s)")]
        best_path = None
        if result.best is not None:
            metric, value, epoch = result.best
            said = f"{metric} {value:.4f} at epoch {epoch}"
            found = None if self.checkpointer is None else self.checkpointer.best()
            if found is not None and found.epochs_done == epoch and found.step == 0:
                best_path = found.path
                said += f": {best_path}"
                if not result.interrupted and self.artifacts is not None:
                    said += f", its weights in {self.artifacts.model_path}"
            lines.append(("best", said))
        if result.checkpoint is not None and result.checkpoint != best_path:
            lines.append(("last checkpoint", str(result.checkpoint)))
        if self.artifacts is not None and not result.interrupted:
            lines.append(("artifacts", str(self.artifacts.root)))
        if result.resume_command is not None:
            lines.append(("resume with", result.resume_command))
        table = {split: {k: self._view.fmt(k, val) for k, val in rows[-1].items()
                         if k != "epoch" and val is not None}
                 for split, rows in self.history.items() if rows}
        self._renderer.summary(lines, table)


class _Chain:
    """The rest of an iterator, with the loader's length (for the progress bar)."""

    def __init__(self, it: Any, length: int | None) -> None:
        self.it, self.length = it, length

    def __iter__(self) -> Any:
        return self.it

    def __len__(self) -> int:
        return self.length or 0


def _on_device(state: dict[str, Any], model: Any) -> dict[str, Any]:
    """Saved tensors onto the devices of the model's own tensors (parameters and buffers)."""
    current = model.state_dict()
    out = {}
    for k, t in state.items():
        ref = current.get(k)
        out[k] = t.to(ref.device) if ref is not None and t.device is not ref.device else t
    return out
