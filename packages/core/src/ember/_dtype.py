"""The ten dtypes and their promotion rules.

Promotion follows the array API standard within a kind (bool, signed, unsigned, floating) and
PyTorch across kinds, which the standard leaves open: ``int + float`` gives the float dtype,
``bool + int`` the int dtype.  Python scalars are "weak": they take the tensor's dtype unless
their kind is higher (an int tensor plus ``1.5`` becomes ``float32``).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "DType",
    "bfloat16",
    "bool_",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "promote_types",
    "result_type_scalar",
    "uint8",
]


class DType:
    """An element type.  Instances are unique: compare with ``is`` or ``==``.

    Examples
    --------
    >>> import ember
    >>> ember.float32.itemsize, ember.float32.is_floating_point
    (4, True)
    """

    __slots__ = ("itemsize", "kind", "name", "numpy_name")

    def __init__(self, name: str, kind: str, itemsize: int, numpy_name: str) -> None:
        self.name = name
        self.kind = kind  # "b" bool, "i" signed, "u" unsigned, "f" floating
        self.itemsize = itemsize
        self.numpy_name = numpy_name

    @property
    def is_floating_point(self) -> bool:
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.kind in "iu"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    def __repr__(self) -> str:
        return f"ember.{self.name}"

    __str__ = __repr__

    def __reduce__(self) -> str:
        return self.name if self.name != "bool" else "bool_"


bool_: Final = DType("bool", "b", 1, "bool")
int8: Final = DType("int8", "i", 1, "int8")
int16: Final = DType("int16", "i", 2, "int16")
int32: Final = DType("int32", "i", 4, "int32")
int64: Final = DType("int64", "i", 8, "int64")
uint8: Final = DType("uint8", "u", 1, "uint8")
float16: Final = DType("float16", "f", 2, "float16")
bfloat16: Final = DType("bfloat16", "f", 2, "bfloat16")
float32: Final = DType("float32", "f", 4, "float32")
float64: Final = DType("float64", "f", 8, "float64")

ALL_DTYPES: Final = (float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, bool_)
FLOAT_DTYPES: Final = (float16, bfloat16, float32, float64)
INT_DTYPES: Final = (int8, int16, int32, int64, uint8)
BY_NAME: Final[dict[str, DType]] = {d.name: d for d in ALL_DTYPES}

_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2}
_SIGNED = (int8, int16, int32, int64)
_FLOATS_BY_SIZE = (float16, float32, float64)


def _promote(a: DType, b: DType) -> DType:
    if a is b:
        return a
    ka, kb = _KIND_RANK[a.kind], _KIND_RANK[b.kind]
    if ka != kb:  # across kinds: the higher kind wins unchanged (PyTorch)
        return a if ka > kb else b
    if a.kind == "f":
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.itemsize > b.itemsize else b
    if a.kind == b.kind:  # both signed
        return a if a.itemsize > b.itemsize else b
    # one signed, one uint8: the smallest signed type holding both
    signed, unsigned = (a, b) if a.kind == "i" else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    return _SIGNED[min(_SIGNED.index(signed) + 1, len(_SIGNED) - 1)]


_TABLE: Final[dict[tuple[DType, DType], DType]] = {
    (a, b): _promote(a, b) for a in ALL_DTYPES for b in ALL_DTYPES
}


def promote_types(a: DType, b: DType) -> DType:
    """The dtype two tensors of dtypes ``a`` and ``b`` compute in.

    Examples
    --------
    >>> import ember
    >>> ember.promote_types(ember.int8, ember.uint8)
    ember.int16
    """
    return _TABLE[a, b]


def result_type_scalar(dtype: DType, value: Any, default_float: DType) -> DType:
    """The dtype of ``tensor <op> python_scalar`` for a tensor of ``dtype``."""
    if isinstance(value, bool):
        return dtype
    if isinstance(value, int):
        return int64 if dtype.kind == "b" else dtype
    if isinstance(value, float):
        return dtype if dtype.kind == "f" else default_float
    raise TypeError(f"unsupported scalar {value!r} of type {type(value).__name__}")


def as_dtype(value: Any) -> DType:
    """Accept an ember dtype, its name, a numpy dtype or a Python type."""
    if isinstance(value, DType):
        return value
    if value is bool:
        return bool_
    if value is int:
        return int64
    if value is float:
        return float32
    name = getattr(value, "name", None) if not isinstance(value, str) else value
    if name is None and isinstance(value, type):
        name = value.__name__
    if isinstance(name, str):
        name = {"bool_": "bool", "half": "float16", "float": "float32", "double": "float64",
                "long": "int64", "int": "int32"}.get(name, name)
        if name in BY_NAME:
            return BY_NAME[name]
    raise TypeError(f"not an ember dtype: {value!r} (expected one of {', '.join(BY_NAME)})")
