"""Autocast's op policy: one table, keyed by op, as PyTorch's CUDA autocast lists them.

``LOWER`` ops run in the autocast dtype (bfloat16 or float16): matrix products,
convolutions, attention, recurrent cells.  ``FLOAT32`` ops run in float32 (they are the ones
whose half-precision result loses too much: exponentials and logarithms, powers, sums and
products, softmax, normalisation, every loss).  ``PROMOTE`` ops with mixed floating inputs run
in the widest of them.  An op not in the table runs in its inputs' dtype.

Only floating tensors are cast, and never float64 ones (PyTorch leaves them alone too).
Keys are `ember.ops.Op` objects.  Every op passes through `ember._apply.apply`, which
applies the table; the short paths that skip it (``a @ b`` on fitting matrices, the eager
binary ops) and the functions whose decomposition must see cast inputs (``F.linear``,
``F.softmax``, ``F.layer_norm``, ``F.cross_entropy``, convolutions, attention: a device that
has no kernel of its own for the composite computes it from primitives) look up the same op.
Losses and norms that are no single op are keyed by the function's name.
"""

from __future__ import annotations

from typing import Final

from ..ops import (
    composite as cops,
    elementwise as ew,
    linalg as la,
    movement as mv,
    nn as nnops,
    reduction as red,
)
from ..ops._op import Op

__all__ = ["FLOAT32", "LOWER", "POLICY", "PROMOTE", "policy_table"]

#: run in the autocast dtype
LOWER: Final = "lower"
#: run in float32
FLOAT32: Final = "float32"
#: run in the widest floating dtype of the inputs
PROMOTE: Final = "promote"

#: ``{op or function name: policy}``; read once per op while autocast is active
POLICY: Final[dict[Op | str, str]] = {
    # -- lower precision: matmul, linear, conv, attention, recurrent cells ---------------------
    la.matmul: LOWER,
    cops.linear: LOWER,
    nnops.conv1d: LOWER,
    nnops.conv2d: LOWER,
    nnops.conv_transpose1d: LOWER,
    nnops.conv_transpose2d: LOWER,
    cops.scaled_dot_product_attention: LOWER,
    cops.lstm_cell: LOWER,
    cops.gru_cell: LOWER,
    cops.lstm_layer: LOWER,
    cops.gru_layer: LOWER,
    # -- float32: pointwise ops PyTorch lists ---------------------------------------------------
    ew.acos: FLOAT32,
    ew.asin: FLOAT32,
    ew.cosh: FLOAT32,
    ew.sinh: FLOAT32,
    ew.tan: FLOAT32,
    ew.exp: FLOAT32,
    ew.expm1: FLOAT32,
    ew.log: FLOAT32,
    ew.log1p: FLOAT32,
    ew.reciprocal: FLOAT32,
    ew.rsqrt: FLOAT32,
    ew.pow: FLOAT32,
    # -- float32: reductions (PyTorch's "fp32_set_opt_dtype": the result is float32) ------------
    red.sum: FLOAT32,
    red.prod: FLOAT32,
    red.cumsum: FLOAT32,
    red.cumprod: FLOAT32,
    # -- float32: softmax, normalisation, losses -------------------------------------------------
    cops.softmax: FLOAT32,
    cops.log_softmax: FLOAT32,
    cops.layer_norm: FLOAT32,
    cops.rms_norm: FLOAT32,
    cops.cross_entropy: FLOAT32,
    "logsumexp": FLOAT32,
    "softplus": FLOAT32,
    "group_norm": FLOAT32,
    "nll_loss": FLOAT32,
    "mse_loss": FLOAT32,
    "l1_loss": FLOAT32,
    "huber_loss": FLOAT32,
    "smooth_l1_loss": FLOAT32,
    "binary_cross_entropy": FLOAT32,
    "binary_cross_entropy_with_logits": FLOAT32,
    "kl_div": FLOAT32,
    "cosine_similarity": FLOAT32,
    "cosine_embedding_loss": FLOAT32,
    "margin_ranking_loss": FLOAT32,
    "triplet_margin_loss": FLOAT32,
    "ctc_loss": FLOAT32,
    # -- widest input dtype ----------------------------------------------------------------------
    ew.atan2: PROMOTE,
    ew.where: PROMOTE,
    mv.cat: PROMOTE,
    mv.scatter_add: PROMOTE,
}


def policy_table() -> dict[str, str]:
    """``{name: policy}`` of every entry, for documentation and tests."""
    return {(k if isinstance(k, str) else k.name): v for k, v in POLICY.items()}
