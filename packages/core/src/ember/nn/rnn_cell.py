"""One time step of a recurrent layer: `RNNCell`, `LSTMCell`, `GRUCell`, with PyTorch's
parameter names (``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``), gate order and
initialisation, so state dicts port both ways."""

from __future__ import annotations

import math

from .. import _creation as cr, functional as F
from .._random import Generator
from .._tensor import Tensor
from . import init
from .linear import DeviceLike, DTypeLike
from .module import Module

__all__ = ["GRUCell", "LSTMCell", "RNNCell"]


class _CellBase(Module):
    _gates = 1
    weight_ih: Tensor
    weight_hh: Tensor
    bias_ih: Tensor | None
    bias_hh: Tensor | None

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, *,
                 device: DeviceLike = None, dtype: DTypeLike = None,
                 generator: Generator | None = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        g = self._gates * hidden_size
        self.register_parameter("weight_ih", cr.empty(g, input_size, device=device, dtype=dtype))
        self.register_parameter("weight_hh", cr.empty(g, hidden_size, device=device, dtype=dtype))
        for name in ("bias_ih", "bias_hh"):
            self.register_parameter(name, cr.empty(g, device=device, dtype=dtype) if bias else None)
        self.reset_parameters(generator)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        """Every weight and bias uniform in ``±1/sqrt(hidden_size)``, as PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for p in self.parameters():
            init.uniform_(p, -bound, bound, generator)

    def _input(self, x: Tensor) -> tuple[Tensor, bool]:
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__}: expected input [N, {self.input_size}] or "
                             f"[{self.input_size}], got {x.shape}")
        return (x.unsqueeze(0), True) if x.ndim == 1 else (x, False)

    def _state(self, x: Tensor, h: Tensor | None, unbatched: bool) -> Tensor:
        if h is None:
            return cr.zeros(x.shape[0], self.hidden_size, device=x.device, dtype=x.dtype)
        return h.unsqueeze(0) if unbatched else h

    def _gates_of(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        return F.linear(x, self.weight_ih, self.bias_ih), F.linear(h, self.weight_hh,
                                                                    self.bias_hh)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(_CellBase):
    """``h' = act(W_ih x + b_ih + W_hh h + b_hh)``, ``act`` tanh or relu.

    Examples
    --------
    >>> import ember
    >>> from ember import nn
    >>> nn.RNNCell(3, 4)(ember.zeros(2, 3)).shape
    (2, 4)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", *, device: DeviceLike = None,
                 dtype: DTypeLike = None, generator: Generator | None = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: nonlinearity must be 'tanh' or 'relu', got "
                             f"{nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, device=device, dtype=dtype,
                         generator=generator)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, unbatched = self._input(input)
        gi, gh = self._gates_of(x, self._state(x, hx, unbatched))
        h = (gi + gh).tanh() if self.nonlinearity == "tanh" else F.relu(gi + gh)
        return h.squeeze(0) if unbatched else h


class LSTMCell(_CellBase):
    """One LSTM step, gates ``i, f, g, o``; ``forward(x, (h, c))`` returns ``(h', c')``."""

    _gates = 4

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None
                ) -> tuple[Tensor, Tensor]:
        x, unbatched = self._input(input)
        h, c = (None, None) if hx is None else hx
        h, c = self._state(x, h, unbatched), self._state(x, c, unbatched)
        gi, gh = self._gates_of(x, h)
        i, f, g, o = (gi + gh).chunk(4, -1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = o.sigmoid() * c.tanh()
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)


class GRUCell(_CellBase):
    """One GRU step, gates ``r, z, n`` with ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``."""

    _gates = 3

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, unbatched = self._input(input)
        h = self._state(x, hx, unbatched)
        gi, gh = self._gates_of(x, h)
        xr, xz, xn = gi.chunk(3, -1)
        hr, hz, hn = gh.chunk(3, -1)
        r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
        h = (1.0 - z) * (xn + r * hn).tanh() + z * h
        return h.squeeze(0) if unbatched else h
