"""`Optimizer`: parameter groups, per-parameter state, and the step that consumes `Gradients`.

Gradients of an autodiff device live on its inner device (``grads[p]``); an optimizer keeps its
state there too and computes each new value there, outside any tape, then gives the parameter
its new value in place (`ember.nn._values.rebind`): the parameter object stays the same, so
the next ``grads[p]`` still finds it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .. import _capture, _dtype as dt, _trace
from .._grad_mode import enable_grad
from .._tensor import Tensor
from ..nn._values import lower_to, rebind

__all__ = ["Closure", "Optimizer", "ParamsArg", "StepItem", "loss_and_grads"]

ParamsArg = Iterable[Tensor] | Iterable[dict[str, Any]] | Any
#: one parameter's share of a step: the parameter, its value and gradient on the gradient's
#: device, and its state
StepItem = tuple[Tensor, Tensor, Tensor, dict[str, Any]]
#: what ``step(closure)`` calls: it returns ``(loss, grads)``, or a loss tensor of an autodiff
#: device whose ``backward()`` the optimizer calls
Closure = Callable[[], Any]


def loss_and_grads(closure: Closure) -> tuple[Any, Any]:
    """Call ``closure`` with grad mode on and return ``(loss, grads)``.

    The closure returns ``(loss, grads)`` (``grads`` what ``loss.backward()`` returned, perhaps
    clipped or unscaled), or just ``loss``, an autodiff tensor: then ``loss.backward()`` gives
    the gradients.
    """
    with enable_grad():
        out = closure()
        if isinstance(out, tuple) and len(out) == 2:
            return out[0], out[1]
        backward = getattr(out, "backward", None)
        if backward is None:
            raise TypeError(
                "the closure must return (loss, grads), e.g. `return loss, loss.backward()`, "
                f"or a loss tensor of an autodiff device; it returned {type(out).__name__}"
                + (f" on {out.device}" if isinstance(out, Tensor) else ""))
        return out, backward()


def grad_of(grads: Any, p: Tensor) -> Tensor | None:
    """``grads[p]``, or ``None`` where ``p`` got no gradient (frozen or unused)."""
    get = getattr(grads, "get", None)
    if get is not None:
        return get(p)  # type: ignore[no-any-return]
    try:
        return grads[p]  # type: ignore[no-any-return]
    except KeyError:
        return None


class Optimizer:
    """Base class: subclasses implement :meth:`update` for one parameter.

    Parameters
    ----------
    params
        Tensors, a `Module` (its trainable parameters), or dicts ``{"params": [...], **options}``
        (parameter groups, each with its own options; missing options take the defaults).
    defaults
        The optimizer's options and their default values.
    """

    def __init__(self, params: ParamsArg, defaults: dict[str, Any]) -> None:
        from ..nn.module import Module

        if isinstance(params, Module):
            params = list(params.trainable_parameters())
        if isinstance(params, Tensor):
            raise TypeError("params must be an iterable of tensors or of dicts, not one tensor")
        items = list(params)
        if not items:
            raise ValueError("the optimizer got an empty parameter list")
        groups = items if isinstance(items[0], dict) else [{"params": items}]
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[int, dict[str, Any]] = {}
        #: bumped when the state gets new tensors outside a compiled step (`ember.compile`)
        self._version = 0
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group of parameters with its own options (``lr``, ``weight_decay``, ...)."""
        _capture.invalidate()
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer parameters must be tensors, got {type(p).__name__}")
            if id(p) in seen:
                raise ValueError("a parameter appears in more than one parameter group")
            seen.add(id(p))
        unknown = set(group) - set(self.defaults) - {"params", "initial_lr", "name"}
        if unknown:
            raise TypeError(f"{type(self).__name__} has no option(s) {sorted(unknown)}")
        full = {**self.defaults, **group, "params": params}
        self.param_groups.append(full)

    def parameters(self) -> list[Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def step(self, grads: Mapping[Tensor, Tensor] | Closure | Any = None) -> Any:
        """Update every parameter that has a gradient in ``grads`` (a `Gradients` or a mapping).

        ``grads`` may also be a closure, as PyTorch's ``step(closure)``: it is called with grad
        mode on, returns ``(loss, grads)`` or a loss tensor (the optimizer calls its
        ``backward()``), and ``step`` returns the loss.

        Examples
        --------
        >>> import ember
        >>> w = ember.tensor([1.0, 2.0])
        >>> opt = ember.optim.SGD([w], lr=0.5)
        >>> opt.step({w: ember.tensor([1.0, 1.0])})
        >>> w.tolist()
        [0.5, 1.5]
        """
        if grads is None:
            raise TypeError(
                f"{type(self).__name__}.step() needs the gradients: ember returns them from "
                "backward() instead of storing them in .grad, so write "
                "`opt.step(loss.backward())` (or pass a closure returning (loss, grads))")
        if callable(grads):
            loss, grads = loss_and_grads(grads)
            self._step(grads)
            return loss
        self._step(grads)
        return None

    def _step(self, grads: Mapping[Tensor, Tensor] | Any) -> None:
        if not _capture._ACTIVE:
            # an eager step gives the state dict new tensors: compiled steps that read this
            # optimizer's old ones trace again (`ember.compile` guards on the version)
            self._version += 1
        for group in self.param_groups:
            if _trace.TRACE:  # ember.compile: a replay re-reads the rate (schedulers work)
                group = {**group, "lr": _trace.host_number(group["lr"], _reader(group, "lr"))}
            items: list[StepItem] = []
            for p in group["params"]:  # every gradient checked before any parameter changes
                g = grad_of(grads, p)
                if g is None:
                    continue
                value = lower_to(p, g.device)
                if g.shape != value.shape:
                    raise ValueError(f"gradient of shape {g.shape} for a parameter of shape "
                                     f"{value.shape}")
                if g.dtype is not value.dtype:
                    g = g.to(dtype=value.dtype)
                items.append((p, value, g, self.state.setdefault(id(p), {})))
            if items:
                self.update_group(items, group)

    def update_group(self, items: list[StepItem], group: dict[str, Any]) -> None:
        """Give the parameters of one group their new values.

        ``items`` holds ``(parameter, value, gradient, state)`` for each parameter with a
        gradient, the value and gradient on the gradient's device.  By default each parameter
        is computed by :meth:`update` and rebound; an optimizer that updates several parameters
        in one op (`Adam` on a device with `ember.ops.composite.adam_steps`) overrides this.
        """
        for p, value, g, state in items:
            if _capture.active():
                if _trace.TRACE:  # host counters a replay advances (RMSprop's step)
                    for k, v in state.items():
                        state[k] = _trace.host_number(v, _reader(state, k))
                before = dict(state)
                rebind(p, self.update(value, g, state, group))
                self._keep_state_in_place(state, before)
            else:
                rebind(p, self.update(value, g, state, group))

    def _keep_state_in_place(self, state: dict[str, Any], before: dict[str, Any]) -> None:
        """While a step is captured: state tensors keep their identity (their payload is
        replaced, which the capture sees); host numbers that change cannot be replayed."""
        for key, new in state.items():
            old = before.get(key)
            if isinstance(old, Tensor) and isinstance(new, Tensor):
                if new is not old:
                    _capture.replace(old, new._data)
                    state[key] = old
                continue
            if isinstance(new, _trace.HostInt | _trace.HostFloat) and _trace.TRACE:
                # a host number derived from the state before the step: replays recompute it
                _trace.TRACE[0].host_writes.append((state, key, new.getter))
                state[key] = _trace.plain(new)
                continue
            old = _trace.plain(old)
            if (isinstance(old, Tensor) or isinstance(new, Tensor) or key not in before
                    or new != old):
                if _capture.new_state(f"{type(self).__name__} created its state {key!r}"):
                    continue  # ember.compile: this call is a warm-up, the next one traces
                state.clear()  # as before the step: the recording is abandoned
                state.update(before)
                raise _capture.CaptureError(
                    f"{type(self).__name__} keeps its state {key!r} as a host number that "
                    f"changes every step ({old!r} -> {new!r}); a captured step would replay "
                    "the first value forever"
                    + (": create the optimizer with capturable=True" if key == "step" and
                       "capturable" in self.defaults else ""))

    def update(self, p: Tensor, g: Tensor, state: dict[str, Any],
               group: dict[str, Any]) -> Tensor:
        """The parameter's new value from its value ``p`` and gradient ``g`` (same device)."""
        raise NotImplementedError

    def zero_grad(self) -> None:
        """Nothing to do: gradients are values returned by ``backward()``, never accumulated."""

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {name: value}}, "param_groups": [...]}`` as PyTorch lays it out.

        Parameters are referred to by their index across groups; values are tensors or numbers.
        """
        index = {id(p): i for i, p in enumerate(self.parameters())}
        state = {index[k]: dict(v) for k, v in self.state.items() if k in index}
        groups = []
        for g in self.param_groups:
            entry = {k: v for k, v in g.items() if k != "params"}
            entry["params"] = [index[id(p)] for p in g["params"]]
            groups.append(entry)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore options and per-parameter state saved by :meth:`state_dict`.

        Tensors move to the device of the gradient-side value of each parameter.
        """
        _capture.invalidate()  # compiled steps read the new state tensors, not the old
        self._version += 1
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"the state has {len(groups)} parameter group(s), the optimizer "
                             f"has {len(self.param_groups)}")
        for i, (saved, mine) in enumerate(zip(groups, self.param_groups, strict=True)):
            if len(saved["params"]) != len(mine["params"]):
                raise ValueError(f"parameter group {i}: the state has {len(saved['params'])} "
                                 f"parameter(s), the optimizer has {len(mine['params'])}")
        params = self.parameters()
        group_of = [{**mine, **saved} for saved, mine in zip(groups, self.param_groups,
                                                            strict=True)
                    for _ in mine["params"]]
        new_state: dict[int, dict[str, Any]] = {}
        for key, entry in state_dict["state"].items():
            idx = int(key)
            if not 0 <= idx < len(params):
                raise ValueError(f"the state refers to parameter {idx}; the optimizer has "
                                 f"{len(params)}")
            p = params[idx]
            target = _grad_device_value(p)
            new_state[id(p)] = self._loaded_state(idx, dict(entry), target, group_of[idx])
        for saved, mine in zip(groups, self.param_groups, strict=True):
            for k, v in saved.items():
                if k != "params":
                    mine[k] = tuple(v) if isinstance(v, list) and k == "betas" else v
        self.state = new_state

    #: per-parameter state that ember keeps as a host number and PyTorch as a 0-d tensor
    #: (``step``): loading accepts either, and keeps a tensor only for a ``capturable`` group
    _scalar_state: tuple[str, ...] = ()

    def _loaded_state(self, idx: int, entry: dict[str, Any], target: Tensor,
                      group: dict[str, Any]) -> dict[str, Any]:
        """One parameter's saved state, checked and moved next to ``target`` (the parameter's
        value on its gradients' device).  Tensors must have the parameter's shape and dtype,
        but for the scalars of `_scalar_state`; an optimizer with other state (`LBFGS`'s flat
        vectors) overrides this."""
        for name in self._scalar_state:
            v = entry.get(name)
            if isinstance(v, Tensor) and v.ndim == 0:
                if group.get("capturable"):
                    entry[name] = v.to(target.device).to(dtype=dt.float32)
                else:
                    x = float(v.item())
                    entry[name] = int(x) if name == "step" and x.is_integer() else x
        for name, v in entry.items():
            if name in self._scalar_state:
                continue
            if isinstance(v, Tensor) and (v.shape != target.shape or v.dtype is not target.dtype):
                raise ValueError(
                    f"state {name!r} of parameter {idx} is {v.dtype.name} {list(v.shape)}, "
                    f"the parameter is {target.dtype.name} {list(target.shape)}")
        return {k: (v.to(target.device).to(dtype=v.dtype) if isinstance(v, Tensor) else v)
                for k, v in entry.items()}

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        return "\n".join([*lines, ")"])


def _grad_device_value(p: Tensor) -> Tensor:
    """Where gradients of ``p`` live: one level inside a gradient-recording decorator."""
    from ..nn._values import can_require_grad

    dev = p.device
    if dev.inner is not None and can_require_grad(p):
        return dev.backend.unwrap(p)  # type: ignore[attr-defined,no-any-return]
    return p


def _reader(d: dict[str, Any], key: str) -> Any:
    """What a replay calls to read ``d[key]`` afresh (`ember._trace.host_number`)."""
    return lambda: d[key]
