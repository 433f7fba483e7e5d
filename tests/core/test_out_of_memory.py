"""Allocations a device cannot make are an `ember.OutOfMemoryError` (a `MemoryError`) naming the
op, shape, dtype, bytes and device, raised where each backend allocates; the process and every
other tensor survive."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ember
from ember import OutOfMemoryError, ShapeError

HUGE = 1 << 40  # 4 TiB of float32: more than any test machine has, less than the address space


def _device(name: str) -> Any:
    try:
        return ember.device(name)
    except (ember.DeviceUnavailableError, ValueError) as exc:
        pytest.skip(f"{name} is not available here: {exc}")


DEVICES = ["cpu", "autodiff<cpu>", "opencl:0", "triton-interpret"]

CASES: dict[str, tuple[Callable[[Any], Any], str, tuple[int, ...], str]] = {
    "zeros": (lambda d: ember.zeros((HUGE,), device=d), "full", (HUGE,), "float32"),
    "empty": (lambda d: ember.empty((HUGE,), dtype=ember.int64, device=d), "full", (HUGE,),
              "int64"),
    "broadcast add": (lambda d: ember.ones(1 << 20, 1, device=d) + ember.ones(1, 1 << 20,
                                                                             device=d),
                      "add", (1 << 20, 1 << 20), "float32"),
    "outer matmul": (lambda d: ember.ones(1 << 20, 1, device=d) @ ember.ones(1, 1 << 20,
                                                                            device=d),
                     "matmul", (1 << 20, 1 << 20), "float32"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", DEVICES)
def test_a_huge_allocation_names_op_shape_dtype_bytes_and_device(name: str, case: str) -> None:
    dev = _device(name)
    keep = ember.arange(5.0, device=dev)
    make, op, shape, dtype = CASES[case]
    nbytes = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
    with pytest.raises(OutOfMemoryError) as info:
        make(dev)
    e = info.value
    base = str(dev.base)
    assert str(e).startswith(f"{op}: out of memory on {base}: cannot allocate ")
    assert f"({nbytes} bytes) for a tensor of shape {shape} and dtype {dtype}" in str(e)
    assert (e.shape, e.dtype, e.nbytes, e.device) == (shape, dtype, nbytes, base)
    assert isinstance(e, MemoryError) and e.__cause__ is not None  # the allocator's own error
    # nothing else is lost: the device still works, and earlier tensors keep their values
    np.testing.assert_array_equal(keep.numpy(), np.arange(5.0))
    np.testing.assert_array_equal((keep + 1).numpy(), np.arange(5.0) + 1)


def test_a_size_beyond_the_address_space_is_out_of_memory_too() -> None:
    # numpy refuses these with a ValueError before trying: still an allocation failure
    with pytest.raises(OutOfMemoryError, match=r"full: out of memory on cpu: cannot allocate "
                       r"16\.00 EiB \(18446744073709551616 bytes\) for a tensor of shape "
                       r"\(2305843009213693952, 2\) and dtype float32"):
        ember.zeros((1 << 61, 2))


def test_an_element_count_beyond_int64_is_refused_by_the_shape_rule() -> None:
    # Note: 2**64 elements overflow the count itself: the op's rule refuses the shape before
    # any allocation (PyTorch: a RuntimeError, "Storage size calculation overflowed")
    with pytest.raises(ShapeError, match=r"^full: shape: shape \(4611686018427387904, 4\) has "
                       r"2\*\*63 elements or more"):
        ember.zeros((1 << 62, 4))


def test_other_value_errors_of_kernels_are_not_taken_for_allocation_failures() -> None:
    with pytest.raises(ValueError) as info:
        ember.ones(2, 3).reshape(4, 2)
    assert not isinstance(info.value, MemoryError)


def test_the_error_pickles_with_its_fields() -> None:
    with pytest.raises(OutOfMemoryError) as info:
        ember.zeros((HUGE,))
    back = pickle.loads(pickle.dumps(info.value))
    assert str(back) == str(info.value) and back.shape == (HUGE,) and back.nbytes == 4 * HUGE
