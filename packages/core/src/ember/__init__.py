"""ember: one tensor API, backends as plugins, decorators that stack at run time.

Examples
--------
>>> import ember
>>> x = ember.tensor([[2., 3.], [4., 5.]])
>>> (x + 1).sum().item()
18.0
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from . import _tensor, amp as amp, functional as functional, linalg as linalg, ops as ops
from ._apply import broadcast_shapes as broadcast_shapes
from ._compile import CompiledFunction as CompiledFunction, compile as compile
from ._creation import (
    arange as arange,
    as_tensor as as_tensor,
    empty as empty,
    empty_like as empty_like,
    eye as eye,
    from_dlpack as from_dlpack,
    from_numpy as from_numpy,
    full as full,
    full_like as full_like,
    linspace as linspace,
    logspace as logspace,
    meshgrid as meshgrid,
    ones as ones,
    ones_like as ones_like,
    rand as rand,
    rand_like as rand_like,
    randint as randint,
    randint_like as randint_like,
    randn as randn,
    randn_like as randn_like,
    tensor as tensor,
    zeros as zeros,
    zeros_like as zeros_like,
)
from ._device import (
    DecoratorSpec as DecoratorSpec,
    Device as Device,
    DeviceInfo as DeviceInfo,
    DeviceSpec as DeviceSpec,
    default_device as default_device,
    device as device,
    devices as devices,
    use_device as use_device,
)
from ._dtype import (
    DType as DType,
    bfloat16 as bfloat16,
    bool_ as bool_,
    float16 as float16,
    float32 as float32,
    float64 as float64,
    int8 as int8,
    int16 as int16,
    int32 as int32,
    int64 as int64,
    promote_types as promote_types,
    uint8 as uint8,
)
from ._einsum import einsum as einsum
from ._elementwise import (
    abs as abs,
    acos as acos,
    acosh as acosh,
    add as add,
    allclose as allclose,
    asin as asin,
    asinh as asinh,
    atan as atan,
    atan2 as atan2,
    atanh as atanh,
    bitwise_and as bitwise_and,
    bitwise_not as bitwise_not,
    bitwise_or as bitwise_or,
    bitwise_xor as bitwise_xor,
    ceil as ceil,
    clamp as clamp,
    copysign as copysign,
    cos as cos,
    cosh as cosh,
    div as div,
    eq as eq,
    erf as erf,
    exp as exp,
    expm1 as expm1,
    floor as floor,
    floordiv as floordiv,
    ge as ge,
    gt as gt,
    isclose as isclose,
    isinf as isinf,
    isnan as isnan,
    le as le,
    left_shift as left_shift,
    log as log,
    log1p as log1p,
    logical_and as logical_and,
    logical_not as logical_not,
    logical_or as logical_or,
    logical_xor as logical_xor,
    lt as lt,
    maximum as maximum,
    minimum as minimum,
    mul as mul,
    ne as ne,
    neg as neg,
    pow as pow,
    reciprocal as reciprocal,
    remainder as remainder,
    right_shift as right_shift,
    round as round,
    rsqrt as rsqrt,
    sigmoid as sigmoid,
    sign as sign,
    sin as sin,
    sinh as sinh,
    sqrt as sqrt,
    sub as sub,
    tan as tan,
    tanh as tanh,
    true_divide as true_divide,
    trunc as trunc,
    where as where,
)
from ._errors import (
    DeviceMismatchError as DeviceMismatchError,
    DeviceUnavailableError as DeviceUnavailableError,
    DivisionByZeroError as DivisionByZeroError,
    DTypeError as DTypeError,
    EmberPluginWarning as EmberPluginWarning,
    OutOfMemoryError as OutOfMemoryError,
    RecordError as RecordError,
    ShapeError as ShapeError,
)
from ._grad_mode import (
    enable_grad as enable_grad,
    inference_mode as inference_mode,
    is_grad_enabled as is_grad_enabled,
    is_inference_mode_enabled as is_inference_mode_enabled,
    no_grad as no_grad,
    set_grad_enabled as set_grad_enabled,
)
from ._linalg import (
    bmm as bmm,
    cdist as cdist,
    matmul as matmul,
    outer as outer,
)
from ._manipulation import (
    argsort as argsort,
    broadcast_tensors as broadcast_tensors,
    broadcast_to as broadcast_to,
    cat as cat,
    chunk as chunk,
    contiguous as contiguous,
    diff as diff,
    expand as expand,
    flatten as flatten,
    flip as flip,
    gather as gather,
    index_copy as index_copy,
    index_select as index_select,
    masked_fill as masked_fill,
    movedim as movedim,
    narrow as narrow,
    nonzero as nonzero,
    pad as pad,
    permute as permute,
    repeat as repeat,
    repeat_interleave as repeat_interleave,
    reshape as reshape,
    roll as roll,
    scatter as scatter,
    scatter_add as scatter_add,
    sort as sort,
    split as split,
    squeeze as squeeze,
    stack as stack,
    swapaxes as swapaxes,
    topk as topk,
    transpose as transpose,
    tril as tril,
    triu as triu,
    unflatten as unflatten,
    unsqueeze as unsqueeze,
)
from ._matrix import (
    addbmm as addbmm,
    addmm as addmm,
    addmv as addmv,
    baddbmm as baddbmm,
    cross as cross,
    diag as diag,
    diagonal as diagonal,
    dot as dot,
    inner as inner,
    kron as kron,
    mm as mm,
    mv as mv,
    trace as trace,
    vdot as vdot,
)
from ._pointwise import (
    addcdiv as addcdiv,
    addcmul as addcmul,
    count_nonzero as count_nonzero,
    deg2rad as deg2rad,
    exp2 as exp2,
    float_power as float_power,
    fmod as fmod,
    frac as frac,
    heaviside as heaviside,
    hypot as hypot,
    isfinite as isfinite,
    isneginf as isneginf,
    isposinf as isposinf,
    lerp as lerp,
    log2 as log2,
    log10 as log10,
    logaddexp as logaddexp,
    logit as logit,
    nan_to_num as nan_to_num,
    nanmean as nanmean,
    nansum as nansum,
    rad2deg as rad2deg,
    square as square,
    xlogy as xlogy,
)
from ._printing import set_printoptions as set_printoptions
from ._random import (
    Generator as Generator,
    default_generator as default_generator,
    manual_seed as manual_seed,
    seed as seed,
)
from ._reduction import (
    all as all,
    amax as amax,
    amin as amin,
    any as any,
    argmax as argmax,
    argmin as argmin,
    cumprod as cumprod,
    cumsum as cumsum,
    max as max,
    mean as mean,
    min as min,
    prod as prod,
    std as std,
    sum as sum,
    var as var,
)
from ._sampling import (
    bernoulli as bernoulli,
    multinomial as multinomial,
    randperm as randperm,
)
from ._set import (
    bincount as bincount,
    unique as unique,
)
from ._stacking import (
    argwhere as argwhere,
    bucketize as bucketize,
    column_stack as column_stack,
    dstack as dstack,
    fliplr as fliplr,
    flipud as flipud,
    hstack as hstack,
    isin as isin,
    masked_select as masked_select,
    rot90 as rot90,
    searchsorted as searchsorted,
    select as select,
    take as take,
    take_along_dim as take_along_dim,
    tile as tile,
    unbind as unbind,
    vstack as vstack,
)
from ._statistics import (
    aminmax as aminmax,
    median as median,
    quantile as quantile,
    std_mean as std_mean,
    var_mean as var_mean,
)
from ._tensor import Tensor as Tensor
from .amp import (
    autocast as autocast,
    get_autocast_dtype as get_autocast_dtype,
    is_autocast_enabled as is_autocast_enabled,
)
from .functional import (
    dropout as dropout,
    gelu as gelu,
    layer_norm as layer_norm,
    log_softmax as log_softmax,
    logsumexp as logsumexp,
    one_hot as one_hot,
    relu as relu,
    rms_norm as rms_norm,
    silu as silu,
    softmax as softmax,
)
from .hookspecs import hookimpl as hookimpl

_tensor.bind()  # every op module is imported above: Tensor's methods reach them now

# PyTorch's other spellings
absolute = abs
clip = clamp
floor_divide = floordiv
negative = neg
sgn = sign  # Note: ember has no complex dtypes, where sgn and sign differ
subtract = sub
fix = trunc
concat = concatenate = cat
arcsinh, arccosh, arctanh = asinh, acosh, atanh
clone = contiguous


def numel(x: Tensor) -> int:
    """The number of elements of ``x``."""
    return x.numel()


def equal(a: Tensor, b: Tensor) -> builtins.bool:
    """True if ``a`` and ``b`` have one shape and the same values."""
    return a.equal(b)


def is_tensor(obj: object) -> builtins.bool:
    """True if ``obj`` is an ember tensor."""
    return isinstance(obj, Tensor)


def t(x: Tensor) -> Tensor:
    """``x`` with its two axes swapped (0-d and 1-D tensors as they are)."""
    return x.t()


__version__ = "0.1.0"
bool = bool_  # ember.bool, as torch.bool
float = float32  # ember.float, as torch.float
long = int64
half = float16
double = float64


if TYPE_CHECKING:
    from . import (
        autograd as autograd,
        data as data,
        distributed as distributed,
        nn as nn,
        optim as optim,
        record as record,
    )

_LAZY = ("autograd", "data", "distributed", "nn", "optim", "record")


def __getattr__(name: str) -> Any:
    # nn, optim, data, distributed, record, autograd: imported on first use (a fast import)
    if name in _LAZY:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'ember' has no attribute {name!r}")
