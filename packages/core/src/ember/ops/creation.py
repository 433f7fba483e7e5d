"""Creation primitives.  Random ops take ``seed`` and ``offset`` integers from a `Generator`."""

from ._op import Op

full = Op("full", "creation", 0, ("shape", "value", "dtype"), result="param", differentiable=False)
arange = Op("arange", "creation", 0, ("start", "stop", "step", "dtype"), result="param",
            differentiable=False)
rand = Op("rand", "creation", 0, ("shape", "dtype", "seed", "offset"), result="param",
          differentiable=False)
randn = Op("randn", "creation", 0, ("shape", "dtype", "seed", "offset"), result="param",
           differentiable=False)
randint = Op("randint", "creation", 0, ("low", "high", "shape", "dtype", "seed", "offset"),
             result="param", differentiable=False)
cast = Op("cast", "creation", 1, ("dtype",), result="param")
