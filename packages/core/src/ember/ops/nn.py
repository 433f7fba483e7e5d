"""Neural-network primitives (PyTorch layouts: NCL / NCHW inputs, OIHW weights).

Tuples are per spatial axis.  Biases are added by the composites in core.
"""

from ._op import Op

_CONV = ("stride", "padding", "dilation", "groups")
_CONVT = ("stride", "padding", "output_padding", "dilation", "groups")

#: ``conv1d(x[N,C,L], w[O,C/groups,K], stride=(s,), padding=(p,), dilation=(d,), groups=g)``
conv1d = Op("conv1d", "nn", 2, _CONV, dtypes="float")
conv2d = Op("conv2d", "nn", 2, _CONV, dtypes="float")
#: ``conv_transpose1d(x[N,C,L], w[C,O/groups,K], ...)`` as in PyTorch.
conv_transpose1d = Op("conv_transpose1d", "nn", 2, _CONVT, dtypes="float")
conv_transpose2d = Op("conv_transpose2d", "nn", 2, _CONVT, dtypes="float")
#: ``max_pool2d(x[N,C,H,W], kernel_size=, stride=, padding=, dilation=, ceil_mode=)`` ->
#: (values, int64 indices into each H*W plane, as PyTorch returns them).
max_pool2d = Op("max_pool2d", "nn", 1, ("kernel_size", "stride", "padding", "dilation",
                                        "ceil_mode"), result="same+index", outputs=2)
#: ``avg_pool2d(x, kernel_size=, stride=, padding=, ceil_mode=, count_include_pad=)``
avg_pool2d = Op("avg_pool2d", "nn", 1, ("kernel_size", "stride", "padding", "ceil_mode",
                                        "count_include_pad"), dtypes="float")
#: ``adaptive_avg_pool2d(x, output_size=(oh, ow))`` with PyTorch's window bounds.
adaptive_avg_pool2d = Op("adaptive_avg_pool2d", "nn", 1, ("output_size",), dtypes="float")
#: ``embedding(weight[V,D], indices[...])`` -> ``[..., D]``.
embedding = Op("embedding", "nn", 2, result="same")
#: ``interpolate(x[N,C,*spatial], size=, mode=("nearest"|"linear"|"bilinear"), align_corners=)``
#: ``nearest`` follows PyTorch's legacy rule (src = floor(dst * in / out)).
interpolate = Op("interpolate", "nn", 1, ("size", "mode", "align_corners"), dtypes="float")
