"""Recurrent operators: RNN, GRU, LSTM, as composites of ember ops (differentiable: W, R,
B, P and the initial states train like any other parameter).

Every attribute of the ONNX schemas is read: ``direction`` (forward, reverse,
bidirectional), ``activations`` with ``activation_alpha``/``activation_beta``, ``clip``,
``layout``, ``hidden_size``, LSTM's ``input_forget`` and peepholes ``P``, GRU's
``linear_before_reset``; the optional inputs ``sequence_lens`` (steps past a batch entry's
length leave its state unchanged and its outputs zero), ``initial_h`` and ``initial_c``.
The input projection of every step is one matmul; the steps run in a Python loop.

Where the attributes are those of PyTorch's layers (forward or bidirectional, the default
activations, or relu for RNN; no clip, peepholes, input_forget or sequence_lens; GRU with
``linear_before_reset=1``) and W, R and B are initializers read by that node only, the node
imports as an `ember.nn.LSTM` / `GRU` / `RNN` holding them (gates reordered to PyTorch's
``i, f, g, o`` and ``r, z, n``): the imported model then has that layer as a child module,
named after the node, fine-tuned like any ``nn.LSTM`` (and run by its fused kernels).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import ember as E
from ember import Tensor, nn, tensor as _tensor
from ember.nn import Module, Parameter, functional as F

from ._registry import MODULE, MODULES, Node, Run, op

#: activation name -> (number of attribute parameters, function of (x, alpha, beta))
_ACTIVATIONS: dict[str, tuple[int, Callable[[Tensor, float, float], Tensor]]] = {
    "sigmoid": (0, lambda x, a, b: x.sigmoid()),
    "tanh": (0, lambda x, a, b: x.tanh()),
    "relu": (0, lambda x, a, b: x.relu()),
    "affine": (2, lambda x, a, b: x * a + b),
    "leakyrelu": (1, lambda x, a, b: F.leaky_relu(x, a)),
    "thresholdedrelu": (1, lambda x, a, b: E.where(x > a, x, 0.0)),
    "scaledtanh": (2, lambda x, a, b: (x * b).tanh() * a),
    "hardsigmoid": (2, lambda x, a, b: (x * a + b).clamp(0.0, 1.0)),
    "elu": (1, lambda x, a, b: F.elu(x, a)),
    "softsign": (0, lambda x, a, b: x / (x.abs() + 1.0)),
    "softplus": (0, lambda x, a, b: F.softplus(x)),
}
_DEFAULTS = {"leakyrelu": (0.01, 0.0), "thresholdedrelu": (1.0, 0.0),
             "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0)}

#: op type -> (gates, default activations per direction)
_KINDS = {"RNN": (1, ["Tanh"]), "GRU": (3, ["Sigmoid", "Tanh"]),
          "LSTM": (4, ["Sigmoid", "Tanh", "Tanh"])}


def _bound(fn: Callable[[Tensor, float, float], Tensor], a: float,
           b: float) -> Callable[[Tensor], Tensor]:
    return lambda x: fn(x, a, b)


def _activations(node: Node, dirs: int) -> list[list[Callable[[Tensor], Tensor]]]:
    """Per direction, the activation functions (alpha and beta bound)."""
    per = len(_KINDS[node.op_type][1])
    names = node.attrs.get("activations") or _KINDS[node.op_type][1] * dirs
    if len(names) == per and dirs == 2:
        names = list(names) * 2
    if len(names) != per * dirs:
        raise ValueError(f"{node.where()}: {len(names)} activations for {dirs} direction(s) "
                         f"({per} each)")
    alphas = list(node.attrs.get("activation_alpha", []))
    betas = list(node.attrs.get("activation_beta", []))
    out: list[list[Callable[[Tensor], Tensor]]] = []
    for d in range(dirs):
        fns: list[Callable[[Tensor], Tensor]] = []
        for name in names[d * per:(d + 1) * per]:
            key = name.lower()
            if key not in _ACTIVATIONS:
                raise NotImplementedError(f"{node.where()}: activation {name!r} is not "
                                          f"supported ({', '.join(sorted(_ACTIVATIONS))})")
            n, fn = _ACTIVATIONS[key]
            a, b = _DEFAULTS.get(key, (1.0, 0.0))
            if n >= 1 and alphas:
                a = float(alphas.pop(0))
            if n >= 2 and betas:
                b = float(betas.pop(0))
            fns.append(_bound(fn, a, b))
        out.append(fns)
    return out


def _recurrent(r: Run, node: Node, x: Any, w: Any = None, rw: Any = None, b: Any = None,
               lens: Any = None, h0: Any = None, c0: Any = None,
               p: Any = None) -> tuple[Tensor, ...]:
    at = node.attrs
    if MODULE in at:
        return _run_module(r, node, at[MODULE], x, h0, c0)
    kind = node.op_type
    gates = _KINDS[kind][0]
    direction = at.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"{node.where()}: direction {direction!r} is not forward, reverse "
                         "or bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    layout = int(at.get("layout", 0))
    xt, wt, rt = r.tensor(x), r.tensor(w), r.tensor(rw)
    if xt.ndim != 3 or wt.ndim != 3 or rt.ndim != 3:
        raise ValueError(f"{node.where()}: X, W and R must be 3-D, got {list(xt.shape)}, "
                         f"{list(wt.shape)}, {list(rt.shape)}")
    if layout:
        xt = xt.permute(1, 0, 2)
    steps, batch, width = xt.shape
    hidden = int(at.get("hidden_size", rt.shape[-1]))
    if tuple(wt.shape) != (dirs, gates * hidden, width) or \
            tuple(rt.shape) != (dirs, gates * hidden, hidden):
        raise ValueError(f"{node.where()}: W {list(wt.shape)} and R {list(rt.shape)} do not "
                         f"match {dirs} direction(s), {gates} gate(s), hidden size {hidden} "
                         f"and input size {width}")
    clip = at.get("clip")
    acts = _activations(node, dirs)
    bt = r.tensor(b) if b is not None else None
    if bt is not None and tuple(bt.shape) != (dirs, 2 * gates * hidden):
        raise ValueError(f"{node.where()}: B has shape {list(bt.shape)}, expected "
                         f"{[dirs, 2 * gates * hidden]}")
    mask, n = None, []
    if lens is not None:
        n = r.ints(lens)
        if len(n) != batch or any(not 0 <= v <= steps for v in n):
            raise ValueError(f"{node.where()}: sequence_lens {n} must hold {batch} length(s) "
                             f"in [0, {steps}]")
        if any(v != steps for v in n):
            mask = (E.arange(steps, device=xt.device).reshape(steps, 1)
                    < E.tensor(n, device=xt.device).reshape(1, batch))
    zeros = E.zeros((batch, hidden), device=xt.device, dtype=xt.dtype)

    def state(v: Any, d: int) -> Tensor:
        if v is None:
            return zeros
        t = r.tensor(v)
        return (t.permute(1, 0, 2) if layout else t)[d]

    ys, hs, cs = [], [], []
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        f = acts[d]
        wd, rd = wt[d], rt[d]
        wb = bt[d, :gates * hidden] if bt is not None else None
        rb = bt[d, gates * hidden:] if bt is not None else None
        proj = F.linear(xt, wd, wb)  # [T, N, G*H]
        h, c = state(h0, d), state(c0, d)
        pd = r.tensor(p)[d] if p is not None else None
        out: list[Tensor] = [zeros] * steps
        order = range(steps - 1, -1, -1) if reverse else range(steps)
        for t in order:
            h_new, c_new = _step(kind, at, proj[t], h, c, rd, rb, pd, f, clip, hidden)
            if mask is not None:
                m = mask[t].reshape(batch, 1)
                h_new = E.where(m, h_new, h)
                c_new = E.where(m, c_new, c)
                out[t] = E.where(m, h_new, 0.0)
            else:
                out[t] = h_new
            h, c = h_new, c_new
        if mask is not None and 0 in n:
            # Note: a batch entry of length 0 ends with zero states, as onnxruntime's (the
            # spec leaves it open; the initial state would be the other reading)
            live = E.tensor([v > 0 for v in n], device=xt.device).reshape(batch, 1)
            h, c = E.where(live, h, 0.0), E.where(live, c, 0.0)
        ys.append(E.stack(out, 0))
        hs.append(h)
        cs.append(c)
    y = E.stack(ys, 1)  # [T, D, N, H]
    yh, yc = E.stack(hs, 0), E.stack(cs, 0)
    if layout:
        y, yh, yc = y.permute(2, 0, 1, 3), yh.permute(1, 0, 2), yc.permute(1, 0, 2)
    return (y, yh, yc) if kind == "LSTM" else (y, yh)


def _step(kind: str, at: dict[str, Any], xp: Tensor, h: Tensor, c: Tensor, rd: Tensor,
          rb: Tensor | None, p: Tensor | None, f: list[Callable[[Tensor], Tensor]],
          clip: Any, hidden: int) -> tuple[Tensor, Tensor]:
    def cl(v: Tensor) -> Tensor:
        return v if clip is None else v.clamp(-float(clip), float(clip))

    if kind == "RNN":
        return f[0](cl(xp + F.linear(h, rd, rb))), c
    if kind == "GRU":
        hz = slice(0, hidden), slice(hidden, 2 * hidden), slice(2 * hidden, 3 * hidden)
        rz, rr, rh = (rd[s] for s in hz)
        bz, br, bh = (None, None, None) if rb is None else (rb[s] for s in hz)
        z = f[0](cl(xp[:, hz[0]] + F.linear(h, rz, bz)))
        rg = f[0](cl(xp[:, hz[1]] + F.linear(h, rr, br)))
        if at.get("linear_before_reset", 0):
            n = f[1](cl(xp[:, hz[2]] + rg * F.linear(h, rh, bh)))
        else:
            n = f[1](cl(xp[:, hz[2]] + F.linear(rg * h, rh, bh)))
        return (1.0 - z) * n + z * h, c
    g = xp + F.linear(h, rd, rb)  # gates i, o, f, c
    gi, go, gf, gc = (g[:, k * hidden:(k + 1) * hidden] for k in range(4))
    if p is not None:
        gi = gi + p[:hidden] * c
        gf = gf + p[2 * hidden:] * c
    i = f[0](cl(gi))
    fg = 1.0 - i if at.get("input_forget", 0) else f[0](cl(gf))
    c_new = fg * c + i * f[1](cl(gc))
    if p is not None:
        go = go + p[hidden:2 * hidden] * c_new
    return f[0](cl(go)) * f[2](c_new), c_new


#: ONNX's gate order -> PyTorch's, per op: LSTM iofc -> ifgo (c is g), GRU zrh -> rzn
_TO_TORCH = {"LSTM": [0, 2, 3, 1], "GRU": [1, 0, 2], "RNN": [0]}
_LAYERS = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN}


def _as_module(node: Node, params: dict[str, np.ndarray],
               device: Any) -> tuple[Module, list[str]] | None:
    """The node as an ``nn.LSTM``/``GRU``/``RNN`` holding its initializers, where its
    attributes are that layer's (else None: the general rule runs it)."""
    at, kind = node.attrs, node.op_type
    ins = [*node.inputs, *[""] * 8][:8]
    w, rw, b, lens, p = ins[1], ins[2], ins[3], ins[4], ins[7]
    direction = at.get("direction", "forward")
    if w not in params or rw not in params or (b and b not in params) or lens or p or \
            direction == "reverse" or at.get("clip") is not None or \
            at.get("input_forget", 0) or at.get("activation_alpha") or \
            at.get("activation_beta") or (kind == "GRU" and not at.get("linear_before_reset")):
        return None
    dirs = 2 if direction == "bidirectional" else 1
    acts = [a.lower() for a in at.get("activations", [])]
    extra: dict[str, Any] = {}
    if kind == "RNN":
        act = acts[0] if acts else "tanh"
        if act not in ("tanh", "relu") or any(a != act for a in acts):
            return None
        extra["nonlinearity"] = act
    elif acts and acts != [a.lower() for a in _KINDS[kind][1]] * dirs:
        return None
    wa, ra = params[w], params[rw]
    gates = _KINDS[kind][0]
    if wa.ndim != 3 or ra.ndim != 3 or wa.shape[0] != dirs or ra.shape[0] != dirs:
        return None
    hidden, width = ra.shape[-1], wa.shape[-1]
    if wa.shape[1] != gates * hidden or int(at.get("hidden_size") or hidden) != hidden:
        return None
    layer = _LAYERS[kind](width, hidden, bias=bool(b), bidirectional=dirs == 2, **extra)
    order = _TO_TORCH[kind]

    def torch_order(a: np.ndarray) -> Any:  # a Parameter
        g = a.reshape(gates, hidden, *a.shape[1:])[order].reshape(a.shape)
        return Parameter(_tensor(np.ascontiguousarray(g), device=device))

    for d in range(dirs):
        suffix = "_reverse" if d else ""
        setattr(layer, f"weight_ih_l0{suffix}", torch_order(wa[d]))
        setattr(layer, f"weight_hh_l0{suffix}", torch_order(ra[d]))
        if b:
            ba = params[b]
            setattr(layer, f"bias_ih_l0{suffix}", torch_order(ba[d, :gates * hidden]))
            setattr(layer, f"bias_hh_l0{suffix}", torch_order(ba[d, gates * hidden:]))
    return layer, [n for n in (w, rw, b) if n]


def _run_module(r: Run, node: Node, layer: Any, x: Any, h0: Any,
                c0: Any) -> tuple[Tensor, ...]:
    layout = int(node.attrs.get("layout", 0))
    xt = r.tensor(x)
    if layout:
        xt = xt.permute(1, 0, 2)
    steps, batch = xt.shape[0], xt.shape[1]
    dirs, hidden = (2 if layer.bidirectional else 1), layer.hidden_size

    def state(v: Any) -> Tensor:
        if v is None:
            return E.zeros((dirs, batch, hidden), device=xt.device, dtype=xt.dtype)
        t = r.tensor(v)
        return t.permute(1, 0, 2) if layout else t

    if node.op_type == "LSTM":
        hx = None if h0 is None and c0 is None else (state(h0), state(c0))
        out, (yh, yc) = layer(xt, hx)
    else:
        out, yh = layer(xt, None if h0 is None else state(h0))
        yc = None
    y = out.reshape(steps, batch, dirs, hidden).permute(0, 2, 1, 3)
    if layout:
        y, yh = y.permute(2, 0, 1, 3), yh.permute(1, 0, 2)
        yc = yc.permute(1, 0, 2) if yc is not None else None
    return (y, yh, yc) if yc is not None else (y, yh)


for _kind in _KINDS:
    MODULES[_kind] = _as_module
    op(_kind, host_inputs=(4,), note="every direction, activation, clip, layout, "
       "sequence_lens and initial state" + ("; peepholes, input_forget"
                                            if _kind == "LSTM" else
                                            "; linear_before_reset" if _kind == "GRU"
                                            else ""))(_recurrent)
