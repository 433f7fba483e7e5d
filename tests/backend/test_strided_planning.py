"""`ember.backend.strided` and `ember.backend.movement` on a host-memory strided view: every view
they plan reads the same elements numpy's own view does, and `StridedKernels`' copies,
concatenations, pads and transposed convolutions match numpy / the suite's references."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ember.backend.movement import StridedKernels, first_k
from ember.backend.strided import StridedView, collapse, view_strides, walk
from ember.testing import _reference as reference

RNG = np.random.default_rng(3)


class HostView(StridedView):
    """A strided view of a flat numpy buffer (elements, not bytes)."""

    __slots__ = ("buffer", "dtype", "offset", "shape", "strides")

    def __init__(self, buffer: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...],
                 offset: int = 0) -> None:
        self.buffer, self.dtype = buffer, buffer.dtype
        self.shape, self.strides, self.offset = tuple(shape), tuple(strides), offset

    def view(self, shape: Any, strides: Any, offset: int) -> HostView:
        return HostView(self.buffer, tuple(shape), tuple(strides), offset)

    def numpy(self) -> np.ndarray:
        item = self.buffer.itemsize
        return np.lib.stride_tricks.as_strided(
            self.buffer[self.offset:], self.shape, [s * item for s in self.strides]).copy()


def host(a: np.ndarray) -> HostView:
    a = np.ascontiguousarray(a)
    return HostView(a.reshape(-1).copy(), a.shape, tuple(s // a.itemsize for s in a.strides))


class Runtime:
    def empty(self, shape: tuple[int, ...], dtype: Any) -> HostView:
        return host(np.zeros(shape, dtype))

    def upload(self, a: np.ndarray) -> HostView:
        return host(a)


def _copy_into(rt: Runtime, dst: HostView, src: HostView) -> HostView:
    item = dst.buffer.itemsize
    out = np.lib.stride_tricks.as_strided(dst.buffer[dst.offset:], dst.shape,
                                          [s * item for s in dst.strides])
    out[...] = np.broadcast_to(src.numpy(), dst.shape)
    return dst


def _conv2d(rt: Runtime, x: HostView, w: HostView, stride: Any, padding: Any, dilation: Any,
            groups: int) -> HostView:
    return host(reference.conv2d(x.numpy(), w.numpy(), stride, padding, dilation, groups))


KERNELS = StridedKernels(
    "host", Runtime(), fill=lambda rt, shape, dtype, value: host(np.full(shape, value, dtype)),
    copy_into=_copy_into, conv2d=_conv2d,
    index_select=lambda rt, x, index, dim: host(np.take(x.numpy(), index.numpy(), dim)),
    lerp=lambda rt, lo, hi, w: host(lo.numpy() * (1 - w.numpy()) + hi.numpy() * w.numpy()))


def test_views_read_what_numpys_views_read() -> None:
    a = RNG.standard_normal((4, 5, 6))
    x = host(a)
    np.testing.assert_array_equal(x.permute((2, 0, 1)).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.flip((0, 2)).numpy(), a[::-1, :, ::-1])
    np.testing.assert_array_equal(x.slice((3, 1, 0), (0, 5, 6), (-2, 2, 3)).numpy(),
                                  a[3:0:-2, 1:5:2, 0:6:3])
    np.testing.assert_array_equal(host(a[:, :1]).broadcast_to((2, 4, 3, 6)).numpy(),
                                  np.broadcast_to(a[:, :1], (2, 4, 3, 6)))
    np.testing.assert_array_equal(first_k(x, 2, 1).numpy(), a[:, :2])
    assert x.is_contiguous() and not x.permute((1, 0, 2)).is_contiguous()


@pytest.mark.parametrize("new", [(30, 4), (2, 2, 5, 6), (120,), (4, 30)])
def test_reshape_is_a_view_exactly_where_numpy_can_make_one(new: tuple[int, ...]) -> None:
    a = RNG.standard_normal((5, 4, 6)).transpose(1, 0, 2)  # [4, 5, 6], not dense
    x = host(np.ascontiguousarray(a)).view((4, 5, 6), (6, 24, 1), 0)  # the same layout
    x.buffer[:] = np.ascontiguousarray(a.transpose(1, 0, 2)).reshape(-1)
    try:
        a.view().shape = new  # numpy refuses where a copy is needed
        viewable = True
    except AttributeError:
        viewable = False
    assert (view_strides(x.shape, x.strides, new) is not None) == viewable
    np.testing.assert_array_equal(KERNELS.reshape(x, new).numpy(), a.reshape(new))


def test_walk_merges_contiguous_axes_and_bounds_them() -> None:
    out = host(np.zeros((2, 3, 4)))
    dims, sts = walk((2, 3, 4), [host(np.zeros((3, 4)))], [out], 8, "host kernels")
    assert (dims, sts) == ([2, 12], [[0, 1], [12, 1]])
    assert collapse((2, 3, 4), [out.strides]) == ([24], [[1]])
    rev = out.permute((2, 1, 0))  # strides (1, 4, 12): no two axes merge
    with pytest.raises(NotImplementedError, match="host kernels walk at most 2 axes, got 3"):
        walk(rev.shape, [], [rev], 2, "host kernels")


def test_pad_cat_embedding_and_interpolate_match_numpy() -> None:
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 4))
    np.testing.assert_array_equal(KERNELS.cat([host(a), host(b)], 1).numpy(),
                                  np.concatenate([a, b], 1))
    np.testing.assert_array_equal(KERNELS.pad(host(a), ((1, 0), (2, 3)), 7.0).numpy(),
                                  np.pad(a, ((1, 0), (2, 3)), constant_values=7.0))
    idx = np.array([[2, 0], [1, 1]])
    np.testing.assert_array_equal(KERNELS.embedding(host(b.T), host(idx)).numpy(), b.T[idx])
    x = RNG.standard_normal((1, 2, 3, 5))
    got = KERNELS.interpolate(host(x), (6, 4), "bilinear", False).numpy()
    np.testing.assert_allclose(got, reference.interpolate(x, (6, 4), "bilinear", False),
                               rtol=1e-12)


@pytest.mark.parametrize("stride,padding,out_pad,dilation,groups",
                         [((1, 1), (0, 0), (0, 0), (1, 1), 1), ((2, 3), (1, 2), (1, 0), (1, 2), 2),
                          ((2, 2), (3, 0), (0, 1), (2, 1), 1)])
def test_conv_transpose2d_is_conv2d_of_the_dilated_input(stride: Any, padding: Any,
                                                         out_pad: Any, dilation: Any,
                                                         groups: int) -> None:
    x = RNG.standard_normal((2, 4, 5, 4))
    w = RNG.standard_normal((4, 3, 3, 2))
    got = KERNELS.conv_transpose2d(host(x), host(w), stride, padding, out_pad, dilation, groups)
    want = reference.conv_transpose2d(x, w, stride, padding, out_pad, dilation, groups)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)
    got1 = KERNELS.conv_transpose1d(host(x[:, :, 0]), host(w[:, :, 0]), (stride[1],),
                                    (padding[1],), (out_pad[1],), (dilation[1],), groups)
    want1 = reference.conv_transpose2d(x[:, :, :1], w[:, :, :1], (1, stride[1]),
                                       (0, padding[1]), (0, out_pad[1]), (1, dilation[1]),
                                       groups)[:, :, 0]
    np.testing.assert_allclose(got1.numpy(), want1, rtol=1e-10, atol=1e-10)
