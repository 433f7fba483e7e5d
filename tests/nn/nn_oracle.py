"""PyTorch as an oracle for ember's layers: same weights, same inputs, compare values and grads.

The ember module's weights are copied into the PyTorch module through ``state_dict`` (so the
parameter names and layouts must agree), then both run forward, a fixed random projection of
the outputs is back-propagated, and outputs, parameter gradients and input gradients must agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import ember

AD = "autodiff<cpu>"


def copy_into_torch(module: ember.nn.Module, tmodule: Any) -> None:
    """Load ember's state_dict into the torch module (strict: names and shapes must match)."""
    import torch

    state = {k: torch.from_numpy(np.array(v.numpy())) for k, v in module.state_dict().items()}
    tmodule.load_state_dict(state, strict=True)


def _flat(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return [o for x in out for o in _flat(x)]
    return [out] if out is not None else []


def compare_module(module: ember.nn.Module, tmodule: Any, inputs: Sequence[np.ndarray], *,
                   rtol: float = 1e-5, atol: float = 1e-5, train: bool = False,
                   call: Callable[..., Any] | None = None,
                   tcall: Callable[..., Any] | None = None, seed: int = 0) -> None:
    """Forward values and gradients (parameters and float inputs) of both modules agree."""
    import torch

    copy_into_torch(module, tmodule)
    module.train(train)
    tmodule.train(train)
    module.to(AD)
    xs = [ember.tensor(a, device=AD, requires_grad=a.dtype.kind == "f") for a in inputs]
    txs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    out = _flat((call or (lambda m, *a: m(*a)))(module, *xs))
    tout = _flat((tcall or (lambda m, *a: m(*a)))(tmodule, *txs))
    assert len(out) == len(tout)
    rng = np.random.default_rng(seed)
    loss, tloss = None, None
    for o, to in zip(out, tout, strict=True):
        np.testing.assert_allclose(o.numpy(), to.detach().numpy(), rtol=rtol, atol=atol)
        if not to.dtype.is_floating_point:
            continue
        w = rng.standard_normal(to.shape).astype(np.float32)
        term = (o * ember.tensor(w, device=AD)).sum()
        tterm = (to * torch.from_numpy(w)).sum()
        loss = term if loss is None else loss + term
        tloss = tterm if tloss is None else tloss + tterm
    assert loss is not None and tloss is not None
    grads = loss.backward()
    tloss.backward()
    tparams = dict(tmodule.named_parameters())
    names = [n for n, _ in module.named_parameters()]
    assert sorted(names) == sorted(tparams)
    for name, p in module.named_parameters():
        tp = tparams[name]
        if tp.grad is None:
            assert p not in grads or not np.any(grads[p].numpy())
            continue
        np.testing.assert_allclose(grads[p].numpy(), tp.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"gradient of {name}")
    for x, tx in zip(xs, txs, strict=True):
        if tx.grad is not None:
            np.testing.assert_allclose(grads[x].numpy(), tx.grad.numpy(), rtol=rtol, atol=atol,
                                       err_msg="gradient of an input")


def randn(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return np.asarray(np.random.default_rng(seed).standard_normal(shape) * scale,
                      dtype=np.float32)


