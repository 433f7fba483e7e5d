"""``ember.nn.functional``: every composite of `ember.functional`, plus the remaining losses.

Examples
--------
>>> import ember
>>> import ember.nn.functional as F
>>> F.l1_loss(ember.tensor([1., 2.]), ember.tensor([0., 0.])).item()
1.5
"""

from __future__ import annotations

from .._elementwise import sigmoid as sigmoid, tanh as tanh
from .._manipulation import pad as pad
from .._windows import im2col
from ..functional import (
    adaptive_avg_pool2d as adaptive_avg_pool2d,
    avg_pool2d as avg_pool2d,
    conv1d as conv1d,
    conv2d as conv2d,
    conv_transpose1d as conv_transpose1d,
    conv_transpose2d as conv_transpose2d,
    cross_entropy as cross_entropy,
    dropout as dropout,
    elu as elu,
    embedding as embedding,
    gelu as gelu,
    hardtanh as hardtanh,
    interpolate as interpolate,
    layer_norm as layer_norm,
    leaky_relu as leaky_relu,
    linear as linear,
    log_softmax as log_softmax,
    logsumexp as logsumexp,
    max_pool2d as max_pool2d,
    mish as mish,
    mse_loss as mse_loss,
    nll_loss as nll_loss,
    one_hot as one_hot,
    relu as relu,
    rms_norm as rms_norm,
    silu as silu,
    softmax as softmax,
    softplus as softplus,
)
from ._activations import (
    hardsigmoid as hardsigmoid,
    hardswish as hardswish,
    logsigmoid as logsigmoid,
    relu6 as relu6,
    selu as selu,
    softmin as softmin,
    softsign as softsign,
)
from ._ctc import ctc_loss as ctc_loss
from ._losses import (
    binary_cross_entropy as binary_cross_entropy,
    binary_cross_entropy_with_logits as binary_cross_entropy_with_logits,
    cosine_embedding_loss as cosine_embedding_loss,
    cosine_similarity as cosine_similarity,
    huber_loss as huber_loss,
    kl_div as kl_div,
    l1_loss as l1_loss,
    margin_ranking_loss as margin_ranking_loss,
    pairwise_distance as pairwise_distance,
    smooth_l1_loss as smooth_l1_loss,
    triplet_margin_loss as triplet_margin_loss,
)
from ._mha import multi_head_attention_forward as multi_head_attention_forward
from ._norms import (
    batch_norm as batch_norm,
    group_norm as group_norm,
    normalize as normalize,
)
from ._pooling import (
    adaptive_max_pool2d as adaptive_max_pool2d,
    max_pool1d as max_pool1d,
)
from .attention import scaled_dot_product_attention as scaled_dot_product_attention
from .linear import bilinear as bilinear
from .rotary import apply_rotary_emb as apply_rotary_emb

unfold = im2col  # torch.nn.functional.unfold: sliding local blocks as columns
