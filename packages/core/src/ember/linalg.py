"""``ember.linalg``: linear algebra under PyTorch's ``torch.linalg`` names.

Examples
--------
>>> import ember
>>> ember.linalg.vector_norm(ember.tensor([[3.0, 4.0]]), dim=-1).tolist()
[5.0]
"""

from __future__ import annotations

from ._linalg import (
    matmul as matmul,
    vector_norm as vector_norm,
)

__all__ = ["matmul", "vector_norm"]
