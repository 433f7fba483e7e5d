"""Optimizers, learning-rate schedulers and gradient clipping.

``optimizer.step(grads)`` consumes the `Gradients` that ``loss.backward()`` returns.

Examples
--------
>>> import ember
>>> from ember import nn, optim
>>> model = nn.Linear(3, 1)
>>> opt = optim.Adam(model.parameters(), lr=1e-3)
>>> type(opt).__name__, opt.param_groups[0]["lr"]
('Adam', 0.001)
"""

from __future__ import annotations

from . import lr_scheduler as lr_scheduler
from .adam import Adam as Adam, AdamW as AdamW
from .adamax import Adamax as Adamax
from .clip import (
    GradientMap as GradientMap,
    clip_grad_norm as clip_grad_norm,
    clip_grad_value as clip_grad_value,
    grad_norm as grad_norm,
)
from .lbfgs import LBFGS as LBFGS
from .nadam import NAdam as NAdam
from .optimizer import Optimizer as Optimizer
from .rmsprop import (
    AdaGrad as AdaGrad,
    Adagrad as Adagrad,
    RMSProp as RMSProp,
    RMSprop as RMSprop,
)
from .sgd import SGD as SGD
