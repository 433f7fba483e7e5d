"""Recurrent layers `RNN`, `LSTM` and `GRU`, with PyTorch's gate order and parameter names
(``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``, ``..._reverse``).

The input projection of every time step is one matmul before the loop.  The steps are then
one op for the whole layer (`ember.ops.composite.lstm_layer` / ``gru_layer``, as PyTorch's
``lstm``) where the device implements it, else one op a step (``lstm_cell`` / ``gru_cell``:
hidden matmul, gates and state update), else a handful of primitives a step."""

from __future__ import annotations

import math

from .. import _creation as cr, functional as F
from .._apply import apply
from .._manipulation import cat, stack
from .._random import Generator
from .._tensor import Tensor
from ..ops import composite as cops
from ..ops._op import Op
from . import init
from .linear import DeviceLike, DTypeLike
from .module import Module, Parameter

__all__ = ["GRU", "LSTM", "RNN"]


class _RNNBase(Module):
    _gates = 4

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, *, device: DeviceLike = None,
                 dtype: DTypeLike = None, generator: Generator | None = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, dropout
        self.bidirectional = bidirectional
        self.generator = generator
        dirs = 2 if bidirectional else 1
        g = self._gates * hidden_size
        for layer in range(num_layers):
            width = input_size if layer == 0 else hidden_size * dirs
            for suffix in ("", "_reverse")[:dirs]:
                name = f"l{layer}{suffix}"
                setattr(self, f"weight_ih_{name}",
                        Parameter(cr.empty(g, width, device=device, dtype=dtype)))
                setattr(self, f"weight_hh_{name}",
                        Parameter(cr.empty(g, hidden_size, device=device, dtype=dtype)))
                if bias:
                    setattr(self, f"bias_ih_{name}",
                            Parameter(cr.empty(g, device=device, dtype=dtype)))
                    setattr(self, f"bias_hh_{name}",
                            Parameter(cr.empty(g, device=device, dtype=dtype)))
        self.reset_parameters(generator)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        """Every weight and bias uniform in ``±1/sqrt(hidden_size)``, as PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for p in self.parameters():
            init.uniform_(p, -bound, bound, generator)

    def _weights(self, layer: int, reverse: bool) -> tuple[Tensor, Tensor, Tensor | None,
                                                           Tensor | None]:
        name = f"l{layer}{'_reverse' if reverse else ''}"
        w_ih, w_hh = getattr(self, f"weight_ih_{name}"), getattr(self, f"weight_hh_{name}")
        b_ih = getattr(self, f"bias_ih_{name}") if self.bias else None
        b_hh = getattr(self, f"bias_hh_{name}") if self.bias else None
        return w_ih, w_hh, b_ih, b_hh

    def _cell(self, x_proj: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor,
              b_hh: Tensor | None) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError

    #: the op running one time step's hidden matmul, gates and state update as one kernel
    _op: Op | None = None
    #: the op running every step of one layer and direction as one kernel
    _layer_op: Op | None = None

    def _fusable(self, proj: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None,
                 op: Op | None) -> bool:
        """Whether the steps can run as ``op`` (one float dtype and device, and the device has
        the kernel); otherwise `_cell` computes them from primitives, as it always did."""
        d = proj._device
        return (op is not None and proj.dtype.is_floating_point and proj.shape[0] > 0
                and self.hidden_size > 0
                and h._dtype is proj._dtype and w_hh._dtype is proj._dtype
                and h._device is d and w_hh._device is d
                and (b_hh is None or (b_hh._dtype is proj._dtype and b_hh._device is d))
                and d.implements(op))

    def _fused_steps(self, proj: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor,
                     b_hh: Tensor | None, steps: range) -> tuple[Tensor, Tensor,
                                                                 Tensor | None]:
        """The outputs ``[T, N, H]`` of every step (in time order) and the final states."""
        raise NotImplementedError

    def _layer(self, proj: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor,
               b_hh: Tensor | None, reverse: bool) -> tuple[Tensor, Tensor, Tensor | None]:
        """As `_fused_steps`, through `_layer_op`."""
        raise NotImplementedError

    def _run(self, x: Tensor, h0: Tensor, c0: Tensor | None) -> tuple[Tensor, Tensor,
                                                                      Tensor | None]:
        """``x[T, N, in]`` through every layer; returns output and final states."""
        dirs = 2 if self.bidirectional else 1
        h_out: list[Tensor] = []
        c_out: list[Tensor] = []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                w_ih, w_hh, b_ih, b_hh = self._weights(layer, d == 1)
                k = layer * dirs + d
                h, c = h0[k], None if c0 is None else c0[k]
                # the input projection of every step at once
                proj = F.linear(x, w_ih, b_ih)
                steps = range(x.shape[0] - 1, -1, -1) if d == 1 else range(x.shape[0])
                if self._fusable(proj, h, w_hh, b_hh, self._layer_op):
                    y, h, c = self._layer(proj, h, c, w_hh, b_hh, d == 1)
                    outs.append(y)
                elif self._fusable(proj, h, w_hh, b_hh, self._op):
                    y, h, c = self._fused_steps(proj, h, c, w_hh, b_hh, steps)
                    outs.append(y)
                else:
                    ys: list[Tensor] = []
                    for t in steps:
                        h, c = self._cell(proj[t], h, c, w_hh, b_hh)
                        ys.append(h)
                    if d == 1:
                        ys.reverse()
                    outs.append(stack(ys, 0))
                h_out.append(h)
                if c is not None:
                    c_out.append(c)
            x = outs[0] if dirs == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True, self.generator)
        return x, stack(h_out, 0), stack(c_out, 0) if c_out else None

    def _prepare(self, x: Tensor) -> tuple[Tensor, bool]:
        unbatched = x.ndim == 2
        if unbatched:
            x = x.unsqueeze(1)
        elif self.batch_first:
            x = x.transpose(0, 1)
        if x.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__}: input has {x.shape[-1]} features, "
                             f"expected input_size={self.input_size}")
        return x, unbatched

    def _zeros(self, x: Tensor) -> Tensor:
        dirs = 2 if self.bidirectional else 1
        return cr.zeros(self.num_layers * dirs, x.shape[1], self.hidden_size, device=x.device,
                        dtype=x.dtype)

    def _finish(self, out: Tensor, unbatched: bool) -> Tensor:
        if unbatched:
            return out.squeeze(1)
        return out.transpose(0, 1) if self.batch_first else out

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.batch_first:
            s += ", batch_first=True"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class LSTM(_RNNBase):
    """Long short-term memory; gates in PyTorch's order ``i, f, g, o``.

    ``forward(x, (h0, c0))`` returns ``output, (h_n, c_n)``; states default to zeros.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> lstm = nn.LSTM(3, 5, batch_first=True)
    >>> out, (h, c) = lstm(ember.zeros(2, 7, 3))
    >>> out.shape, h.shape
    ((2, 7, 5), (1, 2, 5))
    """

    _gates = 4
    _op = cops.lstm_cell
    _layer_op = cops.lstm_layer

    def _cell(self, x_proj: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor,
              b_hh: Tensor | None) -> tuple[Tensor, Tensor | None]:
        assert c is not None
        gates = x_proj + F.linear(h, w_hh, b_hh)
        i, f, g, o = gates.chunk(4, -1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        return o.sigmoid() * c.tanh(), c

    def _fused_steps(self, proj: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor,
                     b_hh: Tensor | None, steps: range) -> tuple[Tensor, Tensor,
                                                                 Tensor | None]:
        assert c is not None
        # the op carries h and c side by side as one state (its differentiated output)
        hc = cat([h, c], -1)
        bias = () if b_hh is None else (b_hh,)
        states: list[Tensor] = []
        for t in steps:
            hc = apply(cops.lstm_cell, proj[t], hc, w_hh, *bias, bias=b_hh is not None)[0]
            states.append(hc)
        if steps.step < 0:
            states.reverse()
        hs = self.hidden_size
        return stack(states, 0)[..., :hs], hc[:, :hs], hc[:, hs:]

    def _layer(self, proj: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor,
               b_hh: Tensor | None, reverse: bool) -> tuple[Tensor, Tensor, Tensor | None]:
        assert c is not None
        bias = () if b_hh is None else (b_hh,)
        hcs = apply(cops.lstm_layer, proj, cat([h, c], -1), w_hh, *bias,
                    bias=b_hh is not None, reverse=reverse)[0]
        hc, hs = hcs[0 if reverse else -1], self.hidden_size
        return hcs[..., :hs], hc[:, :hs], hc[:, hs:]

    def forward(self, x: Tensor, hx: tuple[Tensor, Tensor] | None = None
                ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        x, unbatched = self._prepare(x)
        if hx is None:
            h0 = c0 = self._zeros(x)
        else:
            h0, c0 = hx
            if unbatched:
                h0, c0 = h0.unsqueeze(1), c0.unsqueeze(1)
        out, h, c = self._run(x, h0, c0)
        assert c is not None
        if unbatched:
            h, c = h.squeeze(1), c.squeeze(1)
        return self._finish(out, unbatched), (h, c)


class GRU(_RNNBase):
    """Gated recurrent unit; gates in PyTorch's order ``r, z, n`` with
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))`` and ``h' = (1 - z) n + z h``."""

    _gates = 3
    _op = cops.gru_cell
    _layer_op = cops.gru_layer

    def _cell(self, x_proj: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor,
              b_hh: Tensor | None) -> tuple[Tensor, Tensor | None]:
        xr, xz, xn = x_proj.chunk(3, -1)
        hr, hz, hn = F.linear(h, w_hh, b_hh).chunk(3, -1)
        r = (xr + hr).sigmoid()
        z = (xz + hz).sigmoid()
        n = (xn + r * hn).tanh()
        return (1.0 - z) * n + z * h, None

    def _fused_steps(self, proj: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor,
                     b_hh: Tensor | None, steps: range) -> tuple[Tensor, Tensor,
                                                                 Tensor | None]:
        bias = () if b_hh is None else (b_hh,)
        ys: list[Tensor] = []
        for t in steps:
            h = apply(cops.gru_cell, proj[t], h, w_hh, *bias, bias=b_hh is not None)[0]
            ys.append(h)
        if steps.step < 0:
            ys.reverse()
        return stack(ys, 0), h, None

    def _layer(self, proj: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor,
               b_hh: Tensor | None, reverse: bool) -> tuple[Tensor, Tensor, Tensor | None]:
        bias = () if b_hh is None else (b_hh,)
        ys = apply(cops.gru_layer, proj, h, w_hh, *bias, bias=b_hh is not None,
                   reverse=reverse)[0]
        return ys, ys[0 if reverse else -1], None

    def forward(self, x: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        x, unbatched = self._prepare(x)
        h0 = self._zeros(x) if hx is None else (hx.unsqueeze(1) if unbatched else hx)
        out, h, _ = self._run(x, h0, None)
        return self._finish(out, unbatched), h.squeeze(1) if unbatched else h


class RNN(_RNNBase):
    """Elman RNN: ``h' = act(W_ih x + b_ih + W_hh h + b_hh)`` with ``act`` tanh or relu.

    ``forward(x, h0)`` returns ``output, h_n``; ``h0`` defaults to zeros.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> rnn = nn.RNN(3, 5, num_layers=2, nonlinearity="relu")
    >>> out, h = rnn(ember.zeros(7, 2, 3))
    >>> out.shape, h.shape
    ((7, 2, 5), (2, 2, 5))
    """

    _gates = 1  # and no fused step ops: a step is one matmul and one activation

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, *,
                 device: DeviceLike = None, dtype: DTypeLike = None,
                 generator: Generator | None = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, device=device, dtype=dtype, generator=generator)

    def _cell(self, x_proj: Tensor, h: Tensor, c: Tensor | None, w_hh: Tensor,
              b_hh: Tensor | None) -> tuple[Tensor, Tensor | None]:
        pre = x_proj + F.linear(h, w_hh, b_hh)
        return (pre.tanh() if self.nonlinearity == "tanh" else F.relu(pre)), None

    def forward(self, x: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        x, unbatched = self._prepare(x)
        h0 = self._zeros(x) if hx is None else (hx.unsqueeze(1) if unbatched else hx)
        out, h, _ = self._run(x, h0, None)
        return self._finish(out, unbatched), h.squeeze(1) if unbatched else h

    def extra_repr(self) -> str:
        s = super().extra_repr()
        return s + (", nonlinearity='relu'" if self.nonlinearity == "relu" else "")
