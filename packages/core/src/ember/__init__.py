"""ember: one tensor API, backends as plugins, decorators that stack at run time.

Examples
--------
>>> import ember
>>> x = ember.tensor([[2., 3.], [4., 5.]])
>>> (x + 1).sum().item()
18.0
"""

from __future__ import annotations

from . import functional as functional
from . import ops as ops
from ._creation import (
    arange as arange,
)
from ._creation import (
    as_tensor as as_tensor,
)
from ._creation import (
    empty as empty,
)
from ._creation import (
    empty_like as empty_like,
)
from ._creation import (
    eye as eye,
)
from ._creation import (
    from_dlpack as from_dlpack,
)
from ._creation import (
    from_numpy as from_numpy,
)
from ._creation import (
    full as full,
)
from ._creation import (
    full_like as full_like,
)
from ._creation import (
    linspace as linspace,
)
from ._creation import (
    ones as ones,
)
from ._creation import (
    ones_like as ones_like,
)
from ._creation import (
    rand as rand,
)
from ._creation import (
    rand_like as rand_like,
)
from ._creation import (
    randint as randint,
)
from ._creation import (
    randint_like as randint_like,
)
from ._creation import (
    randn as randn,
)
from ._creation import (
    randn_like as randn_like,
)
from ._creation import (
    tensor as tensor,
)
from ._creation import (
    zeros as zeros,
)
from ._creation import (
    zeros_like as zeros_like,
)
from ._device import (
    DecoratorSpec as DecoratorSpec,
)
from ._device import (
    Device as Device,
)
from ._device import (
    DeviceInfo as DeviceInfo,
)
from ._device import (
    DeviceSpec as DeviceSpec,
)
from ._device import (
    default_device as default_device,
)
from ._device import (
    device as device,
)
from ._device import (
    devices as devices,
)
from ._device import (
    use_device as use_device,
)
from ._dtype import (
    DType as DType,
)
from ._dtype import (
    bfloat16 as bfloat16,
)
from ._dtype import (
    bool_ as bool_,
)
from ._dtype import (
    float16 as float16,
)
from ._dtype import (
    float32 as float32,
)
from ._dtype import (
    float64 as float64,
)
from ._dtype import (
    int8 as int8,
)
from ._dtype import (
    int16 as int16,
)
from ._dtype import (
    int32 as int32,
)
from ._dtype import (
    int64 as int64,
)
from ._dtype import (
    promote_types as promote_types,
)
from ._dtype import (
    uint8 as uint8,
)
from ._elementwise import (
    abs as abs,
)
from ._elementwise import (
    acos as acos,
)
from ._elementwise import (
    add as add,
)
from ._elementwise import (
    asin as asin,
)
from ._elementwise import (
    atan as atan,
)
from ._elementwise import (
    atan2 as atan2,
)
from ._elementwise import (
    bitwise_and as bitwise_and,
)
from ._elementwise import (
    bitwise_not as bitwise_not,
)
from ._elementwise import (
    bitwise_or as bitwise_or,
)
from ._elementwise import (
    bitwise_xor as bitwise_xor,
)
from ._elementwise import (
    ceil as ceil,
)
from ._elementwise import (
    clamp as clamp,
)
from ._elementwise import (
    cos as cos,
)
from ._elementwise import (
    cosh as cosh,
)
from ._elementwise import (
    div as div,
)
from ._elementwise import (
    eq as eq,
)
from ._elementwise import (
    erf as erf,
)
from ._elementwise import (
    exp as exp,
)
from ._elementwise import (
    expm1 as expm1,
)
from ._elementwise import (
    floor as floor,
)
from ._elementwise import (
    floordiv as floordiv,
)
from ._elementwise import (
    ge as ge,
)
from ._elementwise import (
    gt as gt,
)
from ._elementwise import (
    isinf as isinf,
)
from ._elementwise import (
    isnan as isnan,
)
from ._elementwise import (
    le as le,
)
from ._elementwise import (
    left_shift as left_shift,
)
from ._elementwise import (
    log as log,
)
from ._elementwise import (
    log1p as log1p,
)
from ._elementwise import (
    logical_and as logical_and,
)
from ._elementwise import (
    logical_not as logical_not,
)
from ._elementwise import (
    logical_or as logical_or,
)
from ._elementwise import (
    logical_xor as logical_xor,
)
from ._elementwise import (
    lt as lt,
)
from ._elementwise import (
    maximum as maximum,
)
from ._elementwise import (
    minimum as minimum,
)
from ._elementwise import (
    mul as mul,
)
from ._elementwise import (
    ne as ne,
)
from ._elementwise import (
    neg as neg,
)
from ._elementwise import (
    pow as pow,
)
from ._elementwise import (
    reciprocal as reciprocal,
)
from ._elementwise import (
    remainder as remainder,
)
from ._elementwise import (
    right_shift as right_shift,
)
from ._elementwise import (
    round as round,
)
from ._elementwise import (
    rsqrt as rsqrt,
)
from ._elementwise import (
    sigmoid as sigmoid,
)
from ._elementwise import (
    sign as sign,
)
from ._elementwise import (
    sin as sin,
)
from ._elementwise import (
    sinh as sinh,
)
from ._elementwise import (
    sqrt as sqrt,
)
from ._elementwise import (
    sub as sub,
)
from ._elementwise import (
    tan as tan,
)
from ._elementwise import (
    tanh as tanh,
)
from ._elementwise import (
    true_divide as true_divide,
)
from ._elementwise import (
    trunc as trunc,
)
from ._elementwise import (
    where as where,
)
from ._errors import (
    DeviceMismatchError as DeviceMismatchError,
)
from ._errors import (
    DeviceUnavailableError as DeviceUnavailableError,
)
from ._errors import (
    DTypeError as DTypeError,
)
from ._errors import (
    EmberPluginWarning as EmberPluginWarning,
)
from ._errors import (
    RecordError as RecordError,
)
from ._errors import (
    ShapeError as ShapeError,
)
from ._linalg import (
    matmul as matmul,
)
from ._linalg import (
    outer as outer,
)
from ._manipulation import (
    argsort as argsort,
)
from ._manipulation import (
    broadcast_tensors as broadcast_tensors,
)
from ._manipulation import (
    broadcast_to as broadcast_to,
)
from ._manipulation import (
    cat as cat,
)
from ._manipulation import (
    chunk as chunk,
)
from ._manipulation import (
    contiguous as contiguous,
)
from ._manipulation import (
    expand as expand,
)
from ._manipulation import (
    flatten as flatten,
)
from ._manipulation import (
    flip as flip,
)
from ._manipulation import (
    gather as gather,
)
from ._manipulation import (
    index_select as index_select,
)
from ._manipulation import (
    masked_fill as masked_fill,
)
from ._manipulation import (
    narrow as narrow,
)
from ._manipulation import (
    nonzero as nonzero,
)
from ._manipulation import (
    pad as pad,
)
from ._manipulation import (
    permute as permute,
)
from ._manipulation import (
    repeat as repeat,
)
from ._manipulation import (
    reshape as reshape,
)
from ._manipulation import (
    roll as roll,
)
from ._manipulation import (
    scatter as scatter,
)
from ._manipulation import (
    scatter_add as scatter_add,
)
from ._manipulation import (
    sort as sort,
)
from ._manipulation import (
    split as split,
)
from ._manipulation import (
    squeeze as squeeze,
)
from ._manipulation import (
    stack as stack,
)
from ._manipulation import (
    swapaxes as swapaxes,
)
from ._manipulation import (
    topk as topk,
)
from ._manipulation import (
    transpose as transpose,
)
from ._manipulation import (
    tril as tril,
)
from ._manipulation import (
    triu as triu,
)
from ._manipulation import (
    unflatten as unflatten,
)
from ._manipulation import (
    unsqueeze as unsqueeze,
)
from ._printing import set_printoptions as set_printoptions
from ._random import (
    Generator as Generator,
)
from ._random import (
    default_generator as default_generator,
)
from ._random import (
    manual_seed as manual_seed,
)
from ._random import (
    seed as seed,
)
from ._reduction import (
    all as all,
)
from ._reduction import (
    amax as amax,
)
from ._reduction import (
    amin as amin,
)
from ._reduction import (
    any as any,
)
from ._reduction import (
    argmax as argmax,
)
from ._reduction import (
    argmin as argmin,
)
from ._reduction import (
    cumprod as cumprod,
)
from ._reduction import (
    cumsum as cumsum,
)
from ._reduction import (
    max as max,
)
from ._reduction import (
    mean as mean,
)
from ._reduction import (
    min as min,
)
from ._reduction import (
    prod as prod,
)
from ._reduction import (
    std as std,
)
from ._reduction import (
    sum as sum,
)
from ._reduction import (
    var as var,
)
from ._tensor import Tensor as Tensor
from .functional import (
    dropout as dropout,
)
from .functional import (
    gelu as gelu,
)
from .functional import (
    layer_norm as layer_norm,
)
from .functional import (
    log_softmax as log_softmax,
)
from .functional import (
    logsumexp as logsumexp,
)
from .functional import (
    one_hot as one_hot,
)
from .functional import (
    relu as relu,
)
from .functional import (
    rms_norm as rms_norm,
)
from .functional import (
    silu as silu,
)
from .functional import (
    softmax as softmax,
)
from .hookspecs import hookimpl as hookimpl

__version__ = "0.1.0"
bool = bool_  # ember.bool, as torch.bool
float = float32  # ember.float, as torch.float
long = int64
half = float16
double = float64

