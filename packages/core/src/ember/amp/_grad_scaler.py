"""`GradScaler`: loss scaling for float16 training, on ember's gradients-as-values API.

PyTorch's ``torch.amp.GradScaler`` with the same options, numbers and schedule; what differs is
where gradients live: ``backward()`` returns them, so `GradScaler.unscale_` *returns* the
unscaled gradients and `GradScaler.step` takes them with the optimizer.

The scale is a host number (float32-representable, updated as PyTorch's kernel does: in
double, rounded to float32).  Whether a step's gradients hold an inf or a nan is computed on
their device (one 0-d reduction over all of them) and read back once, when the step decides
whether to run: one host synchronisation per step.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _dtype as dt
from .._device import REGISTRY, _ensure_plugins
from ._autocast import _parse

if TYPE_CHECKING:
    from .._tensor import Tensor
    from ..optim.clip import GradientMap
    from ..optim.optimizer import Optimizer

__all__ = ["GradScaler"]

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


class _OptState:
    """Where one optimizer's step stands since the last `GradScaler.update`."""

    __slots__ = ("found", "stage", "total")

    def __init__(self) -> None:
        self.stage = _READY
        self.total: Tensor | None = None  # 0-d, non-finite iff some gradient is
        self.found: bool | None = None  # ``total`` read back


def _f32(x: float) -> float:
    """``x`` rounded to float32, as PyTorch stores its scale."""
    return float(np.float32(x))


class GradScaler:
    """Scale the loss so that float16 gradients do not underflow; skip steps whose gradients
    overflowed and adjust the scale, exactly as ``torch.amp.GradScaler``.

    Parameters
    ----------
    device_type : the device kind the gradients live on (``"cuda"``, ``"cpu"``, ...).  As in
        PyTorch, a scaler for a device kind that is unavailable warns and disables itself.
    init_scale : the first scale.
    growth_factor : the scale is multiplied by this after ``growth_interval`` steps in a row
        without inf/nan gradients.
    backoff_factor : the scale is multiplied by this after a step with inf/nan gradients
        (that step is skipped).
    growth_interval : see ``growth_factor``.
    enabled : ``False`` makes every method a pass-through (``scale`` returns the loss,
        ``step`` steps the optimizer), so one script trains with and without scaling.

    Examples
    --------
    >>> import ember
    >>> d = ember.device("autodiff<cpu>")
    >>> w = ember.tensor([1.0, 2.0], device=d, requires_grad=True)
    >>> opt = ember.optim.SGD([w], lr=0.1)
    >>> scaler = ember.amp.GradScaler("cpu", init_scale=1024.0)
    >>> grads = scaler.scale((w * w).sum()).backward()
    >>> grads[w].tolist()
    [2048.0, 4096.0]
    >>> scaler.step(opt, grads)
    >>> scaler.update()
    >>> [round(v, 4) for v in w.tolist()], scaler.get_scale()
    ([0.8, 1.6], 1024.0)
    """

    def __init__(self, device_type: str = "cuda", init_scale: float = 2.0 ** 16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        name, _ = _parse(device_type)
        if enabled:
            _ensure_plugins()
            ok, reason = REGISTRY.devices[name].probe()
            if not ok:
                warnings.warn(f"GradScaler is enabled for {name!r}, but that device is "
                              f"unavailable ({reason}); disabling it", stacklevel=2)
                enabled = False
        if not growth_factor > 1.0:
            raise ValueError(f"GradScaler: growth_factor must be > 1.0, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got "
                             f"{backoff_factor}")
        if int(growth_interval) != growth_interval or growth_interval <= 0:
            raise ValueError(f"GradScaler: growth_interval must be a positive integer, got "
                             f"{growth_interval}")
        if not (init_scale > 0 and math.isfinite(init_scale)):
            raise ValueError(f"GradScaler: init_scale must be a positive finite number, got "
                             f"{init_scale}")
        self.device_type = device_type
        self._enabled = bool(enabled)
        self._scale = _f32(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._states: dict[int, _OptState] = {}  # by id(optimizer); None's key is 0

    # -- scaling ----------------------------------------------------------------------------

    def scale(self, outputs: Any) -> Any:
        """``outputs * scale`` (a tensor, or a list/tuple of them); call ``backward()`` on it.

        Under `ember.compile` the scale is read again on every replay.
        """
        if not self._enabled:
            return outputs
        if _is_tensor(outputs):
            from .._trace import host_number

            return outputs * host_number(self._scale, lambda: self._scale)
        if isinstance(outputs, list | tuple):
            return type(outputs)(self.scale(o) for o in outputs)
        raise TypeError(f"GradScaler.scale expects a tensor or a list/tuple of tensors, got "
                        f"{type(outputs).__name__}")

    def unscale_(self, optimizer_or_grads: Any, grads: Any = None) -> GradientMap:
        """The gradients divided by the scale, for clipping or inspecting them before `step`.

        ``unscale_(grads)`` unscales every leaf's gradient; ``unscale_(optimizer, grads)``
        those of the optimizer's parameters.  Gradients are values in ember, so the unscaled
        ones are returned (a `ember.optim.GradientMap`); pass them (or what clipping made of
        them) to `step`, which then does not unscale again.  Also notes, on the device,
        whether any gradient holds an inf or a nan.  At most once per step (per optimizer).

        Examples
        --------
        >>> import ember
        >>> w = ember.zeros(2)
        >>> scaler = ember.amp.GradScaler("cpu", init_scale=4.0)
        >>> scaler.unscale_({w: ember.tensor([4.0, 8.0])})[w].tolist()
        [1.0, 2.0]
        """
        from ..optim.optimizer import Optimizer

        if isinstance(optimizer_or_grads, Optimizer):
            opt: Optimizer | None = optimizer_or_grads
            if grads is None:
                raise TypeError("GradScaler.unscale_(optimizer, grads): ember's optimizers "
                                "hold no gradients; pass the ones backward() returned")
        else:
            opt, grads = None, optimizer_or_grads
        items = self._items(grads, opt)
        if not self._enabled:
            from ..optim.clip import GradientMap

            return GradientMap(items)
        state = self._state(opt)
        if state.stage is _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update().")
        if state.stage is _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        out = self._unscale(items, state)
        state.stage = _UNSCALED
        return out

    def step(self, optimizer: Optimizer, grads: Mapping[Tensor, Tensor] | Any) -> None:
        """``optimizer.step(grads)`` with the gradients unscaled, unless one of them holds an
        inf or a nan: then the step is skipped (and `update` lowers the scale).

        ``grads`` are the scaled gradients ``backward()`` returned, or the ones `unscale_`
        returned (possibly clipped) when it was called for this step.  Reads one number back
        from the device.
        """
        if not self._enabled:
            optimizer.step(grads)
            return
        state = self._state(optimizer)
        if state.stage is _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state.stage is _READY:
            shared = self._states.get(0)
            if shared is not None and shared.stage is _UNSCALED:
                # unscale_(grads) covered every gradient: its check is this step's
                if shared.found is None:
                    shared.found = shared.total is not None and not math.isfinite(
                        shared.total.item())
                state.found = shared.found
            else:
                grads = self._unscale(self._items(grads, optimizer), state)
        if state.found is None:
            state.found = state.total is not None and not math.isfinite(state.total.item())
        if not state.found:
            optimizer.step(grads)
        state.stage = _STEPPED

    def update(self, new_scale: float | Tensor | None = None) -> None:
        """Adjust the scale for the next step (PyTorch's schedule) and start a new step.

        After a step with an inf or nan gradient the scale is multiplied by
        ``backoff_factor``; after ``growth_interval`` clean steps in a row by
        ``growth_factor`` (unless that overflows float32).  ``new_scale`` sets it instead.
        """
        if not self._enabled:
            return
        if new_scale is not None:
            value = float(new_scale.item() if _is_tensor(new_scale)  # type: ignore[union-attr]
                          else new_scale)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"GradScaler.update: new_scale must be a positive finite "
                                 f"number, got {value}")
            self._scale = _f32(value)
        else:
            states = [s for s in self._states.values() if s.total is not None
                      or s.found is not None]
            if not states:
                raise RuntimeError("GradScaler.update: no inf checks were recorded prior to "
                                   "update(): call step() (or unscale_()) first")
            found = False
            for s in states:
                if s.found is None:
                    assert s.total is not None
                    s.found = not math.isfinite(s.total.item())
                found = found or s.found
            if found:
                self._scale = _f32(self._scale * self._backoff_factor)
                self._growth_tracker = 0
            else:
                successful = self._growth_tracker + 1
                if successful == self._growth_interval:
                    grown = _f32(self._scale * self._growth_factor)
                    if math.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
                else:
                    self._growth_tracker = successful
        self._states.clear()

    # -- inside -----------------------------------------------------------------------------

    def _state(self, opt: Optimizer | None) -> _OptState:
        key = 0 if opt is None else id(opt)
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = _OptState()
        return state

    @staticmethod
    def _items(grads: Any, opt: Optimizer | None) -> list[tuple[Tensor, Tensor]]:
        from ..optim.clip import _items

        if grads is None or _is_tensor(grads):
            raise TypeError(f"GradScaler: expected gradients (what backward() returns, or a "
                            f"{{tensor: gradient}} mapping), got {type(grads).__name__}")
        return _items(grads, None if opt is None else opt.parameters())

    def _unscale(self, items: list[tuple[Tensor, Tensor]], state: _OptState) -> GradientMap:
        """Each gradient times ``1 / scale``; ``state.total`` becomes a 0-d tensor that is
        finite exactly when every gradient is (each ``sum(g * 0)`` is 0 or nan; no overflow)."""
        from .._manipulation import stack
        from ..optim.clip import GradientMap

        inv = _f32(1.0 / self._scale)  # PyTorch: the double reciprocal, as float32
        if not items:
            state.total = None
            return GradientMap(())
        dev = items[0][1].device
        checks = [(g * 0.0).sum().to(dev).to(dtype=dt.float32) for _, g in items]
        state.total = stack(checks).sum() if len(checks) > 1 else checks[0]
        return GradientMap((p, g * inv) for p, g in items)

    # -- options and state ------------------------------------------------------------------

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def state_dict(self) -> dict[str, Any]:
        """PyTorch's keys: ``scale``, ``growth_factor``, ``backoff_factor``,
        ``growth_interval``, ``_growth_tracker`` (empty when disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what `state_dict` saved (ember's or PyTorch's)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        missing = {"scale", "growth_factor", "backoff_factor", "growth_interval",
                   "_growth_tracker"} - set(state_dict)
        if missing:
            raise KeyError(f"GradScaler.load_state_dict: missing {sorted(missing)}")
        scale = state_dict["scale"]
        self._scale = _f32(scale.item() if _is_tensor(scale) else float(scale))
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        tracker = state_dict["_growth_tracker"]
        self._growth_tracker = int(tracker.item() if _is_tensor(tracker) else tracker)

    def __repr__(self) -> str:
        return (f"GradScaler({self.device_type!r}, scale={self.get_scale()}, "
                f"growth_factor={self._growth_factor}, backoff_factor={self._backoff_factor}, "
                f"growth_interval={self._growth_interval}, enabled={self._enabled})")


def _is_tensor(x: Any) -> bool:
    from .._tensor import Tensor

    return isinstance(x, Tensor)
