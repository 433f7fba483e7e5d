"""``clip_grad_norm_`` and ``clip_grad_value_`` (defined with the rest of clipping in
`ember.optim.clip`)."""

from __future__ import annotations

from ...optim.clip import clip_grad_norm_ as clip_grad_norm_, clip_grad_value_ as clip_grad_value_

__all__ = ["clip_grad_norm_", "clip_grad_value_"]
