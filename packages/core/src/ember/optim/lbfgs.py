"""`LBFGS`: limited-memory BFGS with an optional strong-Wolfe line search (PyTorch's algorithm).

Every decision (tolerances, the line search, the history) is taken on the host from numbers
read back from the device, as in PyTorch; the vectors (directions, gradient differences) stay
on the gradients' device as flat tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from .. import _capture, _creation as cr, _trace
from .._manipulation import cat
from .._tensor import Tensor
from ..nn._values import lower_to, rebind
from .optimizer import (
    Closure,
    Optimizer,
    ParamsArg,
    _grad_device_value,
    grad_of,
    loss_and_grads,
)

__all__ = ["LBFGS"]

#: what a closure evaluation gives the line search: the loss and the flat gradient
Evaluation = tuple[float, Tensor]


def _dot(a: Tensor, b: Tensor) -> float:
    return float((a * b).sum().item())


def _abs_max(a: Tensor) -> float:
    return float(a.abs().amax().item())


def _cubic_interpolate(x1: float, f1: float, g1: float, x2: float, f2: float, g2: float,
                       bounds: tuple[float, float] | None = None) -> float:
    """The minimiser of the cubic through two points with their slopes, clamped to
    ``bounds`` (by default the interval between the points)."""
    xmin_bound, xmax_bound = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = math.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func: Callable[[float], Evaluation], t: float, d: Tensor, f: float,
                  g: Tensor, gtd: float, c1: float = 1e-4, c2: float = 0.9,
                  tolerance_change: float = 1e-9,
                  max_ls: int = 25) -> tuple[float, Tensor, float, int]:
    """A step ``t`` along ``d`` meeting the strong Wolfe conditions (bracketing, then
    zooming with cubic interpolation), as PyTorch's ``_strong_wolfe``; returns the loss and
    flat gradient there, the step and the number of evaluations."""
    d_norm = _abs_max(d)
    f_new, g_new = obj_func(t)
    ls_func_evals = 1
    gtd_new = _dot(g_new, d)
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    ls_iter = 0
    bracket: list[float] = []
    bracket_f: list[float] = []
    bracket_g: list[Tensor] = []
    bracket_gtd: list[float] = []
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        # interpolate within [t + 0.01 (t - t_prev), 10 t]
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new, gtd_new
        f_new, g_new = obj_func(t)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
    if ls_iter == max_ls:  # reached the evaluation budget
        bracket, bracket_f, bracket_g = [0.0, t], [f, f_new], [g, g_new]

    # zoom: shrink the bracket until a point meets the conditions
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0],
                               bracket[1], bracket_f[1], bracket_gtd[1])
        # a point too close to an end of the bracket: move it inward (More & Thuente)
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) \
                    else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(t)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new, gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new, gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


class LBFGS(Optimizer):
    """L-BFGS, as PyTorch's ``torch.optim.LBFGS`` (after minFunc): one parameter group; each
    ``step(closure)`` runs up to ``max_iter`` iterations.

    The closure computes the loss and its gradients and returns ``(loss, grads)``, the way
    ember's gradients are values::

        def closure():
            loss = loss_fn(model(x), y)
            return loss, loss.backward()

    A closure may also return only the loss (an autodiff tensor): the optimizer then calls
    ``loss.backward()``.  ``step`` returns the loss of the first evaluation, as PyTorch.
    ``line_search_fn`` is ``None`` (fixed steps of ``lr``) or ``"strong_wolfe"``.

    ``step`` reads numbers back to the host to decide what to do next, so it cannot run inside
    `ember.compile`; compile the closure instead (returning the gradients as a dict
    ``{p: grads[p] for p in params}``, since a compiled function returns tensors in lists,
    tuples and dicts).

    Examples
    --------
    >>> import ember
    >>> x = ember.tensor([3.0, -2.0], device="autodiff<cpu>", requires_grad=True)
    >>> opt = ember.optim.LBFGS([x], line_search_fn="strong_wolfe")
    >>> def closure():
    ...     loss = ((x - 1.0) ** 2).sum()
    ...     return loss, loss.backward()
    >>> _ = opt.step(closure)
    >>> [round(v, 4) for v in x.tolist()]
    [1.0, 1.0]
    """

    def __init__(self, params: ParamsArg, lr: float = 1.0, max_iter: int = 20,
                 max_eval: int | None = None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"LBFGS: invalid learning rate {lr}")
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: line_search_fn is None or 'strong_wolfe', not "
                             f"{line_search_fn!r}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                                      tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change,
                                      history_size=history_size, line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params: list[Tensor] = self.param_groups[0]["params"]

    def add_param_group(self, group: dict[str, Any]) -> None:
        if self.param_groups:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        super().add_param_group(group)

    # -- flat views of the parameters and gradients ------------------------------------------

    def _gather_flat_grad(self, grads: Mapping[Tensor, Tensor] | Any) -> Tensor:
        views = []
        for p in self._params:
            g = grad_of(grads, p)
            if g is None:  # no gradient (unused): zeros, as PyTorch's missing .grad
                value = _grad_device_value(p)
                g = cr.zeros(value.shape, dtype=value.dtype, device=value.device)
            views.append(g.reshape(-1))
        return cat(views, 0)

    def _values(self, device: Any) -> list[Tensor]:
        return [lower_to(p, device) for p in self._params]

    def _add_grad(self, step_size: float, update: Tensor) -> None:
        offset = 0
        for p in self._params:
            value = lower_to(p, update.device)
            n = math.prod(value.shape)
            step = update[offset:offset + n].reshape(value.shape).to(dtype=value.dtype)
            rebind(p, value + step * step_size)
            offset += n

    def _set_param(self, values: list[Tensor]) -> None:
        for p, v in zip(self._params, values, strict=True):
            rebind(p, v)

    def _evaluate(self, closure: Closure) -> tuple[Any, float, Tensor]:
        loss, grads = loss_and_grads(closure)
        return loss, float(loss.item()), self._gather_flat_grad(grads)

    def _directional(self, closure: Closure, x: list[Tensor],
                     d: Tensor) -> Callable[[float], Evaluation]:
        """The loss and flat gradient at ``x + step * d``, the parameters left at ``x``."""
        def evaluate(step: float) -> Evaluation:
            self._add_grad(step, d)
            _, f, g = self._evaluate(closure)
            self._set_param(x)
            return f, g
        return evaluate

    # -- the step ----------------------------------------------------------------------------

    def step(self, closure: Closure | Any = None) -> Any:  # a closure, never gradients
        """Run up to ``max_iter`` L-BFGS iterations; returns the closure's first loss."""
        if closure is None or not callable(closure):
            raise TypeError(
                "LBFGS.step(closure) needs a closure that re-evaluates the model and returns "
                "(loss, grads), e.g. `def closure(): loss = f(); return loss, loss.backward()`"
                + ("" if closure is None else f"; got {type(closure).__name__}"))
        if _trace.TRACE or _capture.active():
            raise _capture.CaptureError(
                "LBFGS.step reads losses and gradient norms back to the host to decide its "
                "iterations and line search, so it cannot be captured or compiled; compile the "
                "closure instead (`closure = ember.compile(closure)`)")
        if not _capture._ACTIVE:
            self._version += 1
        group = self.param_groups[0]
        lr = float(group["lr"])
        max_iter, max_eval = group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]

        state = self.state.setdefault(id(self._params[0]), {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss, loss, flat_grad = self._evaluate(closure)
        current_evals = 1
        state["func_evals"] += 1
        opt_cond = _abs_max(flat_grad) <= tolerance_grad
        if opt_cond:  # already optimal
            return orig_loss

        d: Tensor | None = state.get("d")
        t: float = state.get("t", lr)
        old_dirs: list[Tensor] = state.get("old_dirs", [])
        old_stps: list[Tensor] = state.get("old_stps", [])
        ro: list[float] = state.get("ro", [])
        h_diag: float = state.get("H_diag", 1.0)
        prev_flat_grad: Tensor | None = state.get("prev_flat_grad")
        prev_loss: float | None = state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1 or d is None or prev_flat_grad is None:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                h_diag = 1.0
            else:
                # update the memory with the last step's curvature pair
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = _dot(y, s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:  # forget the oldest pair
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / _dot(y, y)  # the initial Hessian's scale
                # the two-loop recursion: d = -H g
                num_old = len(old_dirs)
                if "al" not in state:
                    state["al"] = [None] * history_size
                al: list[Any] = state["al"]
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = _dot(old_stps[i], q) * ro[i]
                    q = q + old_dirs[i] * (-al[i])
                r = q * h_diag
                for i in range(num_old):
                    be_i = _dot(old_dirs[i], r) * ro[i]
                    r = r + old_stps[i] * (al[i] - be_i)
                d = r
            prev_flat_grad = flat_grad
            prev_loss = loss
            # the step length: a short first step, then lr
            t = min(1.0, 1.0 / float(flat_grad.abs().sum().item())) * lr \
                if state["n_iter"] == 1 else lr
            gtd = _dot(flat_grad, d)
            if gtd > -tolerance_change:  # not a descent direction
                break

            ls_func_evals = 0
            if line_search_fn == "strong_wolfe":
                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    self._directional(closure, self._values(flat_grad.device), d), t, d, loss,
                    flat_grad, gtd, max_ls=max_eval - current_evals)
                self._add_grad(t, d)
                opt_cond = _abs_max(flat_grad) <= tolerance_grad
            else:
                self._add_grad(t, d)
                if n_iter != max_iter:
                    # re-evaluate unless this is the last iteration (saves one evaluation)
                    _, loss, flat_grad = self._evaluate(closure)
                    opt_cond = _abs_max(flat_grad) <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if _abs_max(d * t) <= tolerance_change:  # lack of progress
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state["d"] = d
        state["t"] = t
        state["old_dirs"] = old_dirs
        state["old_stps"] = old_stps
        state["ro"] = ro
        state["H_diag"] = h_diag
        state["prev_flat_grad"] = prev_flat_grad
        state["prev_loss"] = prev_loss
        return orig_loss

    def _loaded_state(self, idx: int, entry: dict[str, Any], target: Tensor,
                      group: dict[str, Any]) -> dict[str, Any]:
        """PyTorch keeps ``t``, ``H_diag``, ``ro`` and ``al`` as 0-d tensors, ember as host
        numbers; the vectors are flat (all parameters end to end) on the gradients' device."""
        def load(v: Any) -> Any:
            if isinstance(v, Tensor):
                if v.ndim == 0:
                    return float(v.item())
                return v.to(target.device).to(dtype=target.dtype)
            if isinstance(v, list):
                return [load(x) for x in v]
            return v

        return {k: load(v) for k, v in entry.items()}

