"""Conformance cases: what to run on a device, and the numpy float64 oracle to compare with.

A `Case` is either an *op case* (an ember callable, host inputs, and an oracle computing the
expected value from the same inputs in float64) or a *check* (a function of the device that
asserts on its own: errors, random statistics).  Case ids are stable and readable
(``add-broadcast-float32``) so that backends can declare skips with fnmatch patterns.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _dtype as dt
from ._compare import assert_close, host_float64

if TYPE_CHECKING:
    from .._device import Device
    from .._tensor import Tensor

__all__ = ["Arg", "Case", "all_cases", "register", "rng_for", "sample"]

@dataclass(frozen=True)
class Arg:
    """One tensor input: a host array (already of the case's numpy dtype) and how the tensor
    reaches the op: ``""`` contiguous, ``"permuted"`` (a transposed view of a reversed-axes
    copy), ``"sliced"`` (every other element of a twice-as-long last axis), ``"expanded"``
    (an axis of size 1 broadcast to ``expand`` by `Tensor.expand`)."""

    value: np.ndarray
    view: str = ""
    expand: tuple[int, ...] = ()
    dtype: dt.DType | None = None  # None: the dtype the host array has

    def ember_dtype(self) -> dt.DType:
        if self.dtype is not None:
            return self.dtype
        from .._host import dtype_of_numpy

        return dtype_of_numpy(self.value.dtype)

    def host(self) -> np.ndarray:
        """The value the op sees, as the oracle gets it (floats in float64)."""
        v = self.value
        if self.view == "expanded":
            v = np.broadcast_to(v, self.expand)
        return host_float64(v)

    def tensor(self, device: Device) -> Tensor:
        import ember

        d = self.ember_dtype()
        v = self.value
        if self.view == "permuted" and v.ndim >= 2:
            rev = tuple(range(v.ndim))[::-1]
            base = np.ascontiguousarray(v.transpose(rev))
            return ember.tensor(base, dtype=d, device=device).permute(*rev)
        if self.view == "sliced" and v.ndim >= 1:
            base = np.zeros((*v.shape[:-1], 2 * v.shape[-1]), dtype=v.dtype)
            base[..., ::2] = v
            base[..., 1::2] = v[..., ::-1] if v.shape[-1] else v
            return ember.tensor(base, dtype=d, device=device)[..., ::2]
        t = ember.tensor(v, dtype=d, device=device)
        if self.view == "expanded":
            return t.expand(*self.expand)
        return t


@dataclass(frozen=True)
class Case:
    """One conformance case.

    ``fn(*tensors)`` runs on the device and ``oracle(*host_arrays)`` computes the expected
    value(s) from the same inputs in float64 (ints in int64); ``out`` is the expected result
    dtype (a tuple for ops with several outputs; None: not checked).  A *check* has ``check``
    instead: ``check(device)`` asserts by itself.  A *made* case has ``make`` instead of ``fn``:
    ``make(device)`` builds its result(s) on the device from nothing (creation functions,
    promotion), compared with ``oracle()``.  ``grad`` lists the positions of the
    differentiable floating inputs: gradient checks (`check_grads`) perturb those.
    """

    id: str
    group: str
    fn: Callable[..., Any] | None = None
    oracle: Callable[..., Any] | None = None
    args: tuple[Arg, ...] = ()
    out: Any = None
    check: Callable[[Device], None] | None = None
    make: Callable[[Device], Any] | None = None
    dtypes: tuple[dt.DType, ...] = ()
    grad: tuple[int, ...] = ()
    rtol: float | None = None
    atol: float | None = None

    def required_dtypes(self) -> tuple[dt.DType, ...]:
        return tuple(dict.fromkeys((*self.dtypes, *(a.ember_dtype() for a in self.args))))

    def inputs(self, device: Device) -> list[Tensor]:
        return [a.tensor(device) for a in self.args]

    def expected(self) -> Any:
        assert self.oracle is not None
        with np.errstate(all="ignore"):
            return self.oracle(*[a.host() for a in self.args])

    def run(self, device: Device) -> None:
        """Run the case on ``device``; raises AssertionError on any disagreement."""
        if self.check is not None:
            self.check(device)
            return
        if self.make is not None:
            got = self.make(device)
            self.check_device(got, device)
            self.compare(got, self.expected())
            return
        assert self.fn is not None
        got = self.fn(*self.inputs(device))
        self.compare(got, self.expected())

    def check_device(self, got: Any, device: Device) -> None:
        for i, g in enumerate(got if isinstance(got, tuple) else (got,)):
            assert g.device is device, f"{self.id}[{i}]: tensor made on {g.device}, not {device}"

    def compare(self, got: Any, expected: Any) -> None:
        if isinstance(expected, tuple):
            outs = self.out if isinstance(self.out, tuple) else (self.out,) * len(expected)
            if not isinstance(got, tuple) or len(got) != len(expected):
                raise AssertionError(f"{self.id}: expected {len(expected)} outputs, got {got!r}")
            for i, (g, e, d) in enumerate(zip(got, expected, outs, strict=True)):
                assert_close(g, e, d, rtol=self.rtol, atol=self.atol, what=f"{self.id}[{i}]")
        else:
            assert_close(got, expected, self.out, rtol=self.rtol, atol=self.atol, what=self.id)


_REGISTRY: dict[str, Case] = {}


def register(case: Case) -> Case:
    """Add a case to the registry; ids must be unique."""
    if case.id in _REGISTRY:
        raise ValueError(f"duplicate conformance case id {case.id!r}")
    _REGISTRY[case.id] = case
    return case


def all_cases() -> list[Case]:
    """Every registered case, in registration order (imports the case modules once)."""
    from . import cases  # noqa: F401  # registers on import

    return list(_REGISTRY.values())


# -- sample inputs ------------------------------------------------------------------------------


#: appended to every key `rng_for` seeds from; the compiled mode sets it to build *fresh*
#: inputs of the same shapes (``ember.testing._compiled.fresh_cases``)
SALT = [""]


def rng_for(key: str) -> np.random.Generator:
    """A generator seeded by a case id: inputs are the same in every run and on every device."""
    return np.random.default_rng(zlib.crc32((key + SALT[0]).encode()))


def sample(shape: Sequence[int], dtype: dt.DType, rng: np.random.Generator,
           domain: str = "real") -> np.ndarray:
    """Sample values of ``dtype`` on ``domain``.

    Domains: ``real`` ([-2, 2]), ``positive`` ([0.25, 3]), ``unit`` ((-0.9, 0.9)), ``nonzero``
    (|x| in [0.5, 2]), ``grid`` / ``grid-nonzero`` (multiples of 1/4), ``small`` (ints in
    [0, 3], for exponents and shifts), ``distinct`` (a
    permutation: no ties, for sort and argmax), ``near1`` ([0.6, 1.4]: products stay finite).
    """
    from .._host import numpy_dtype

    shape = tuple(shape)
    npd = numpy_dtype(dtype)
    vals: Any
    n = int(np.prod(shape)) if shape else 1
    if dtype is dt.bool_:  # a nonzero bool is True (integer division by False raises)
        if domain in ("nonzero", "grid-nonzero"):
            return np.ones(shape, dtype=bool)
        return np.asarray(rng.random(shape) < 0.5)
    if domain == "distinct":
        vals = rng.permutation(n) - (n // 2 if dtype.kind != "u" else 0)
        return np.asarray(vals.reshape(shape)).astype(npd)
    if domain.startswith("grid") and dtype.kind == "f":
        # multiples of 1/4 (divisors from {±0.5, ±1, ±1.5, ±2}): quotients are exact or far
        # from an integer in every float dtype, so floordiv and remainder are well defined
        if domain == "grid-nonzero":
            vals = rng.choice([0.5, 1.0, 1.5, 2.0], size=shape) * rng.choice([-1, 1], size=shape)
        else:
            vals = rng.integers(-8, 9, size=shape) / 4.0
        return np.asarray(vals).astype(npd)
    if domain == "grid-nonzero":
        domain = "nonzero"
    if dtype.kind in "iu":
        ilo, ihi = {"positive": (1, 4), "nonzero": (1, 5), "small": (0, 4), "unit": (0, 1),
                    "near1": (-2, 3)}.get(domain, (-5, 6))
        if dtype.kind == "u":
            ilo = max(ilo, 0)
        vals = rng.integers(ilo, ihi, size=shape)
        if domain == "nonzero" and dtype.kind == "i":
            vals = vals * rng.choice([-1, 1], size=shape)
        return np.asarray(vals).astype(npd)
    lo, hi = {"positive": (0.25, 3.0), "unit": (-0.9, 0.9), "small": (0.0, 3.0),
              "near1": (0.6, 1.4)}.get(domain, (-2.0, 2.0))
    if domain == "nonzero":
        vals = rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    else:
        vals = rng.uniform(lo, hi, size=shape)
    return np.asarray(vals).astype(npd)


def with_edges(value: np.ndarray) -> np.ndarray:
    """``value`` with nan, inf and -inf (and a zero) written over its first elements."""
    out = value.copy()
    flat = out.reshape(-1)
    edges = [np.nan, np.inf, -np.inf, 0.0][: flat.size]
    flat[: len(edges)] = edges
    return out
