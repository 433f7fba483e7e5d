"""Layers, containers and losses with PyTorch's names, parameter layouts and initialisation.

Examples
--------
>>> import ember
>>> from ember import nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
>>> print(model)
Sequential(
  (0): Linear(in_features=4, out_features=8, bias=True)
  (1): ReLU()
  (2): Linear(in_features=8, out_features=3, bias=True)
)
"""

from __future__ import annotations

from . import functional as functional, generation as generation, init as init, utils as utils
from .activation import (
    ELU as ELU,
    GELU as GELU,
    LeakyReLU as LeakyReLU,
    LogSoftmax as LogSoftmax,
    Mish as Mish,
    PReLU as PReLU,
    ReLU as ReLU,
    Sigmoid as Sigmoid,
    SiLU as SiLU,
    Softmax as Softmax,
    Softmin as Softmin,
    Softplus as Softplus,
    Tanh as Tanh,
)
from .attention import (
    MultiHeadAttention as MultiHeadAttention,
    MultiheadAttention as MultiheadAttention,
    causal_mask as causal_mask,
    scaled_dot_product_attention as scaled_dot_product_attention,
)
from .containers import (
    ModuleDict as ModuleDict,
    ModuleList as ModuleList,
    Sequential as Sequential,
)
from .conv import (
    Conv1d as Conv1d,
    Conv2d as Conv2d,
    ConvTranspose1d as ConvTranspose1d,
    ConvTranspose2d as ConvTranspose2d,
)
from .dropout import Dropout as Dropout
from .embedding import (
    Embedding as Embedding,
    SinusoidalPositionalEncoding as SinusoidalPositionalEncoding,
)
from .fold import Unfold as Unfold
from .grouped_attention import GroupedQueryAttention as GroupedQueryAttention, SwiGLU as SwiGLU
from .kv_cache import KVCache as KVCache
from .linear import (
    Bilinear as Bilinear,
    Flatten as Flatten,
    Identity as Identity,
    Linear as Linear,
    Unflatten as Unflatten,
)
from .loss import (
    BCELoss as BCELoss,
    BCEWithLogitsLoss as BCEWithLogitsLoss,
    CosineEmbeddingLoss as CosineEmbeddingLoss,
    CrossEntropyLoss as CrossEntropyLoss,
    CTCLoss as CTCLoss,
    HuberLoss as HuberLoss,
    KLDivLoss as KLDivLoss,
    L1Loss as L1Loss,
    MarginRankingLoss as MarginRankingLoss,
    MSELoss as MSELoss,
    NLLLoss as NLLLoss,
    SmoothL1Loss as SmoothL1Loss,
    TripletMarginLoss as TripletMarginLoss,
)
from .module import (
    IncompatibleKeys as IncompatibleKeys,
    Module as Module,
    Parameter as Parameter,
    ParameterMarker as ParameterMarker,
)
from .normalization import (
    BatchNorm1d as BatchNorm1d,
    BatchNorm2d as BatchNorm2d,
    GroupNorm as GroupNorm,
    LayerNorm as LayerNorm,
    RMSNorm as RMSNorm,
)
from .pooling import (
    AdaptiveAvgPool2d as AdaptiveAvgPool2d,
    AdaptiveMaxPool2d as AdaptiveMaxPool2d,
    AvgPool2d as AvgPool2d,
    MaxPool1d as MaxPool1d,
    MaxPool2d as MaxPool2d,
)
from .rnn import GRU as GRU, LSTM as LSTM, RNN as RNN
from .rnn_cell import GRUCell as GRUCell, LSTMCell as LSTMCell, RNNCell as RNNCell
from .rotary import RotaryEmbedding as RotaryEmbedding
from .transformer import (
    Transformer as Transformer,
    TransformerDecoder as TransformerDecoder,
    TransformerDecoderLayer as TransformerDecoderLayer,
    TransformerEncoder as TransformerEncoder,
    TransformerEncoderLayer as TransformerEncoderLayer,
)
from .upsampling import (
    Upsample as Upsample,
    UpsamplingBilinear2d as UpsamplingBilinear2d,
    UpsamplingNearest2d as UpsamplingNearest2d,
)
