"""PyTorch's ``torch.nn.utils`` helpers that apply to ember: gradient clipping.

ember's gradients are values that ``backward()`` returns, so these take that mapping where
PyTorch takes the parameters (whose ``.grad`` it clips): ``norm = clip_grad_norm_(grads, 1.0)``
clips the tensors ``grads`` holds in place, then ``opt.step(grads)``.
"""

from __future__ import annotations

from .clip_grad import (
    clip_grad_norm_ as clip_grad_norm_,
    clip_grad_value_ as clip_grad_value_,
)

__all__ = ["clip_grad_norm_", "clip_grad_value_"]
