"""ember's Autodiff decorator: ``autodiff<inner>`` gives any device reverse-mode gradients.

Examples
--------
>>> import ember
>>> w = ember.tensor([1.0, -2.0], device="autodiff<cpu>", requires_grad=True)
>>> grads = (w * w).sum().backward()
>>> grads[w].tolist()
[2.0, -4.0]
"""

from .backend import AutodiffBackend
from .gradients import Gradients
from .rules import RULES
from .tensor import AutodiffTensor

__all__ = ["RULES", "AutodiffBackend", "AutodiffTensor", "Gradients"]
