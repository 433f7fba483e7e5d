"""Fused attention (``ember_triton.attention``) on the interpreter: one forward kernel and
three backward kernels instead of matmul + softmax + matmul, against numpy float64 oracles;
causal and not, L != S, bool and additive masks with broadcasting, fully masked rows as the CPU
backend gives them, head dims that are not powers of two, every float dtype, and strided views.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import ember
import ember.functional as F
import ember.nn.functional as NF
import numpy as np
import pytest
from ember._apply import apply
from ember._program import base_payload
from ember.ops import composite as cops

from ember_triton import attention

AD = "autodiff<triton-interpret>"
FWD = Counter(attn_fwd=1)
BWD = Counter(attn_bwd_delta=1, attn_bwd_dkdv=1, attn_bwd_dq=1)

rng = np.random.default_rng(7)


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """16-row blocks: several query and key blocks per row, so the unmasked loops, the
    diagonal and the ragged ends all run."""
    monkeypatch.setattr(attention, "INTERPRET_BLOCK", 16)
    yield


# -- numpy float64 oracles ----------------------------------------------------------------------


def _bias(length: int, source: int, mask: np.ndarray | None, causal: bool) -> np.ndarray:
    """The additive bias of the scores (0 / -inf for bool masks and the causal triangle)."""
    b = np.zeros((length, source))
    if causal:
        b = np.where(np.arange(source)[None, :] > np.arange(length)[:, None], -np.inf, 0.0)
    if mask is not None:
        b = b + (np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_
                 else mask.astype(np.float64))
    return b


def _reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
               mask: np.ndarray | None, causal: bool, scale: float) -> dict[str, np.ndarray]:
    """out, lse and (dq, dk, dv) by the textbook formulas in float64."""
    q, k, v, g = (a.astype(np.float64) for a in (q, k, v, g))
    s = q @ k.swapaxes(-1, -2) * scale + _bias(q.shape[-2], k.shape[-2], mask, causal)
    top = s.max(-1, keepdims=True)
    e = np.exp(s - top)
    total = e.sum(-1, keepdims=True)
    p = e / total
    out = p @ v
    dv = p.swapaxes(-1, -2) @ g
    dp = g @ v.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    return {"out": out, "lse": (np.log(total) + top)[..., 0], "dq": ds @ k,
            "dk": ds.swapaxes(-1, -2) @ q, "dv": dv}


TOL = {"float64": (1e-11, 1e-11), "float32": (2e-5, 2e-5), "float16": (3e-3, 3e-3),
       "bfloat16": (3e-2, 3e-2)}


def _inputs(batch: tuple[int, ...], length: int, source: int, d: int, dv: int | None = None,
            dtype: str = "float32") -> tuple[np.ndarray, ...]:
    """q, k, v, g rounded to ``dtype`` (held as float64, so the oracle sees the same
    numbers)."""
    dv = d if dv is None else dv
    shapes = ((*batch, length, d), (*batch, source, d), (*batch, source, dv),
              (*batch, length, dv))
    out = []
    for sh in shapes:
        t = ember.tensor(rng.standard_normal(sh), dtype=getattr(ember, dtype))
        out.append(t.to(dtype=ember.float64).numpy())
    return tuple(out)


def _device_tensor(a: np.ndarray, device: str | ember.Device, dtype: str,
                   requires_grad: bool = False) -> ember.Tensor:
    return ember.tensor(a, device=device, dtype=getattr(ember, dtype),
                        requires_grad=requires_grad)


def _close(got: ember.Tensor, want: np.ndarray, dtype: str, scale: float = 1.0) -> None:
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got.to(dtype=ember.float64).numpy(), want, rtol=rtol,
                               atol=atol * scale)


def _run_both(dev: ember.Device, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
              mask: np.ndarray | None, causal: bool, dtype: str,
              scale: float | None = None) -> dict[str, ember.Tensor]:
    """Forward through `ember.nn.functional` and the backward op, on the plain device."""
    qt, kt, vt, gt = (_device_tensor(a, dev, dtype) for a in (q, k, v, g))
    mt = None
    if mask is not None:
        mt = ember.tensor(mask, device=dev) if mask.dtype == np.bool_ else \
            _device_tensor(mask, dev, dtype)
    sc = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    args = (qt, kt, vt) if mt is None else (qt, kt, vt, mt)
    out, lse = apply(cops.scaled_dot_product_attention, *args, scale=sc, causal=causal,
                     mask=mt is not None)
    dq, dk, dv = F.scaled_dot_product_attention_backward(gt, qt, kt, vt, out, lse, mt,
                                                         scale=sc, causal=causal)
    return {"out": out, "lse": lse, "dq": dq, "dk": dk, "dv": dv}


# -- forward and backward against float64 --------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "source"), [(40, 40), (37, 53), (53, 29)])
def test_forward_and_backward_match_float64(dev: ember.Device, launches: Counter[str],
                                            small_blocks: None, causal: bool, length: int,
                                            source: int) -> None:
    q, k, v, g = _inputs((2, 2), length, source, 32)
    got = _run_both(dev, q, k, v, g, None, causal, "float32")
    assert launches == FWD + BWD
    want = _reference(q, k, v, g, None, causal, 1 / np.sqrt(32))
    for name in want:
        _close(got[name], want[name], "float32")


def test_output_written_by_one_kernel_and_no_matmul(dev: ember.Device,
                                                    launches: Counter[str]) -> None:
    q, k, v, g = _inputs((3,), 24, 20, 16)
    y = NF.scaled_dot_product_attention(*(ember.tensor(a, device=dev, dtype=ember.float32)
                                          for a in (q, k, v)), is_causal=True)
    assert launches == FWD
    _close(y, _reference(q, k, v, g, None, True, 0.25)["out"], "float32")


@pytest.mark.parametrize("causal", [False, True])
def test_autodiff_gradients_run_the_backward_kernels(dev: ember.Device, launches: Counter[str],
                                                     small_blocks: None, causal: bool) -> None:
    q, k, v, g = _inputs((2, 3), 33, 21, 24, 40)
    qt, kt, vt = (_device_tensor(a, AD, "float32", requires_grad=True) for a in (q, k, v))
    y = NF.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=0.3)
    loss = (y * ember.tensor(g, device=AD, dtype=ember.float32)).sum()
    grads = loss.backward()
    assert launches["attn_fwd"] == 1 and launches["attn_bwd_dkdv"] == 1
    assert launches["attn_bwd_dq"] == 1 and launches["attn_bwd_delta"] == 1
    assert not {"matmul_dot", "matmul", "softmax_rows"} & set(launches)
    want = _reference(q, k, v, g, None, causal, 0.3)
    _close(y, want["out"], "float32")
    for t, name in ((qt, "dq"), (kt, "dk"), (vt, "dv")):
        _close(grads[t], want[name], "float32")


def _mask(kind: str, n: int, h: int, length: int, source: int) -> np.ndarray:
    if kind == "key_padding":  # [N, 1, 1, S], every row keeps some keys
        m = rng.random((n, 1, 1, source)) > 0.4
        m[..., 0] = True
        return m
    if kind == "full_bool":
        m = rng.random((n, h, length, source)) > 0.5
        m[..., 0] = True  # key 0 is visible to every row, causal or not
        return m
    if kind == "additive_ls":
        return rng.standard_normal((length, source)) * 2
    if kind == "additive_full":  # -inf entries too
        m = rng.standard_normal((n, h, length, source))
        m[rng.random(m.shape) < 0.2] = -np.inf
        m[..., 0] = 0.0
        return m
    raise AssertionError(kind)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["key_padding", "full_bool", "additive_ls", "additive_full"])
def test_masks_broadcast_and_match_float64(dev: ember.Device, launches: Counter[str],
                                           small_blocks: None, kind: str, causal: bool) -> None:
    n, h, length, source = 2, 2, 35, 27
    q, k, v, g = _inputs((n, h), length, source, 32)
    mask = _mask(kind, n, h, length, source)
    got = _run_both(dev, q, k, v, g, mask, causal, "float32")
    assert launches == FWD + BWD  # the mask is read through its strides: no expand copy
    want = _reference(q, k, v, g, mask, causal, 1 / np.sqrt(32))
    for name in want:
        _close(got[name], want[name], "float32")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_fully_masked_rows_match_the_cpu_backend(dev: ember.Device, dtype: str) -> None:
    """A row that may attend nowhere: nan output and logsumexp, as the CPU kernel (softmax of
    a row of -inf), and nan gradients where the CPU kernel has them."""
    n, h, length, source = 2, 2, 20, 18
    q, k, v, g = _inputs((n, h), length, source, 16, dtype=dtype)
    mask = rng.random((n, 1, length, source)) > 0.4
    mask[..., 0] = True
    mask[0, :, 5] = False
    mask[1, :, 19] = False
    got = _run_both(dev, q, k, v, g, mask, False, dtype)
    cpu = _run_both(ember.device("cpu"), q, k, v, g, mask, False, dtype)
    for name in got:
        a = got[name].to(dtype=ember.float64).numpy()
        b = cpu[name].to(dtype=ember.float64).numpy()
        assert got[name].dtype == cpu[name].dtype, name
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=name)
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(a[~np.isnan(a)], b[~np.isnan(b)], rtol=rtol, atol=atol,
                                   err_msg=name)
    assert np.isnan(got["out"].to(dtype=ember.float64).numpy()[0, :, 5]).all()
    assert not np.isnan(got["out"].to(dtype=ember.float64).numpy()[0, :, 4]).any()


@pytest.mark.parametrize("d", [32, 64, 80, 128])
def test_head_dims_including_non_powers_of_two(dev: ember.Device, launches: Counter[str],
                                               d: int) -> None:
    q, k, v, g = _inputs((2,), 17, 23, d)
    got = _run_both(dev, q, k, v, g, None, True, "float32", scale=0.11)
    assert launches == FWD + BWD
    want = _reference(q, k, v, g, None, True, 0.11)
    for name in want:
        _close(got[name], want[name], "float32")


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_dtypes_match_float64_and_half_types_keep_float32_statistics(
        dev: ember.Device, small_blocks: None, dtype: str) -> None:
    q, k, v, g = _inputs((2, 2), 30, 21, 64, dtype=dtype)
    mask = _mask("key_padding", 2, 2, 30, 21)
    got = _run_both(dev, q, k, v, g, mask, True, dtype)
    assert got["out"].dtype == getattr(ember, dtype)
    assert got["lse"].dtype == (ember.float64 if dtype == "float64" else ember.float32)
    assert got["dq"].dtype == got["dk"].dtype == got["dv"].dtype == getattr(ember, dtype)
    want = _reference(q, k, v, g, mask, True, 1 / 8)
    for name in want:
        # gradients sum over the rows: their size grows with L, S
        _close(got[name], want[name], dtype, scale=1.0 if name in ("out", "lse") else 4.0)


def test_float64_is_exact_to_rounding(dev: ember.Device) -> None:
    q, k, v, g = _inputs((3,), 19, 25, 40, dtype="float64")
    got = _run_both(dev, q, k, v, g, None, False, "float64")
    want = _reference(q, k, v, g, None, False, 1 / np.sqrt(40))
    for name in want:
        np.testing.assert_allclose(got[name].numpy(), want[name], rtol=1e-12, atol=1e-13)


# -- layouts ------------------------------------------------------------------------------------


def test_permuted_qkv_views_are_read_without_copies(dev: ember.Device, launches: Counter[str],
                                                    small_blocks: None) -> None:
    """q, k, v as the heads of one packed projection (``reshape(b, t, 3, h, d).permute(2, 0,
    3, 1, 4)``): strided views with a contiguous head axis go to the kernels as they are."""
    b, t, h, d = 2, 21, 3, 16
    qkv = rng.standard_normal((b, t, 3 * h * d))
    g = rng.standard_normal((b, h, t, d))
    x = ember.tensor(qkv, device=dev, dtype=ember.float32)
    q, k, v = x.reshape(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
    assert not q.payload.is_contiguous()
    gt = ember.tensor(g, device=dev, dtype=ember.float32)
    out, lse = apply(cops.scaled_dot_product_attention, q, k, v, scale=0.25, causal=True,
                     mask=False)
    grads = F.scaled_dot_product_attention_backward(gt, q, k, v, out, lse, scale=0.25,
                                                    causal=True)
    assert launches == FWD + BWD
    arr = qkv.reshape(b, t, 3, h, d).transpose(2, 0, 3, 1, 4)
    want = _reference(arr[0], arr[1], arr[2], g, None, True, 0.25)
    _close(out, want["out"], "float32")
    for got, name in zip(grads, ("dq", "dk", "dv"), strict=True):
        _close(got, want[name], "float32")


def test_outputs_and_gradients_are_laid_out_as_the_heads_of_a_projection(
        dev: ember.Device, launches: Counter[str]) -> None:
    """A GPT block's path: q, k, v are ``[b, h, t, d]`` views of ``[b, t, 3 c]``; the output
    and the gradients come back in ``[b, t, h, d]`` memory order, so the output's
    ``transpose(1, 2).reshape(b, t, c)`` is a view (no copy kernel) and so is the way back of
    its gradient; the values match float64."""
    b, t, h, d = 2, 19, 3, 16
    qkv = rng.standard_normal((b, t, 3 * h * d))
    g = rng.standard_normal((b, t, h * d))
    x = _device_tensor(qkv, AD, "float32", requires_grad=True)
    q, k, v = (p.reshape(b, t, h, d).transpose(1, 2) for p in x.split(h * d, dim=2))
    y = NF.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.25)
    assert base_payload(y).strides == (t * h * d, d, h * d, 1)  # [b, t, h, d] memory
    merged = y.transpose(1, 2).reshape(b, t, h * d)
    loss = (merged * ember.tensor(g, device=AD, dtype=ember.float32)).sum()
    grad = loss.backward()[x]
    assert not {"copy_rows", "transpose_batched"} & set(launches), launches
    arr = qkv.reshape(b, t, 3, h, d).transpose(2, 0, 3, 1, 4)
    gh = g.reshape(b, t, h, d).transpose(0, 2, 1, 3)
    want = _reference(arr[0], arr[1], arr[2], gh, None, True, 0.25)
    _close(merged, want["out"].transpose(0, 2, 1, 3).reshape(b, t, h * d), "float32")
    dqkv = np.concatenate([want[n].transpose(0, 2, 1, 3).reshape(b, t, h * d)
                           for n in ("dq", "dk", "dv")], axis=2)
    _close(grad, dqkv, "float32")


def test_operands_whose_batch_axes_do_not_merge_give_contiguous_results(
        dev: ember.Device) -> None:
    """Batch axes the kernels cannot address with two strides are copied; the output and the
    gradients are then contiguous, with the right values."""
    q, k, v, g = _inputs((2, 3, 2), 11, 9, 16)
    qt = ember.tensor(q.transpose(1, 0, 2, 3, 4).copy(), device=dev,
                      dtype=ember.float32).permute(1, 0, 2, 3, 4)
    kt, vt, gt = (ember.tensor(a, device=dev, dtype=ember.float32) for a in (k, v, g))
    out, lse = apply(cops.scaled_dot_product_attention, qt, kt, vt, scale=0.25, causal=False,
                     mask=False)
    grads = F.scaled_dot_product_attention_backward(gt, qt, kt, vt, out, lse, scale=0.25,
                                                    causal=False)
    want = _reference(q, k, v, g, None, False, 0.25)
    _close(out, want["out"], "float32")
    for got, name in zip(grads, ("dq", "dk", "dv"), strict=True):
        _close(got, want[name], "float32")


@pytest.mark.parametrize("batch", [(), (2, 1, 3)])
def test_batch_shapes_of_any_rank(dev: ember.Device, batch: tuple[int, ...]) -> None:
    q, k, v, g = _inputs(batch, 18, 14, 16)
    got = _run_both(dev, q, k, v, g, None, False, "float32")
    want = _reference(q, k, v, g, None, False, 0.25)
    for name in want:
        assert got[name].shape == want[name].shape
        _close(got[name], want[name], "float32")


def test_batch_axes_that_do_not_merge_are_copied(dev: ember.Device) -> None:
    """Three batch axes with unrelated strides: the kernel takes two, so the operands are made
    contiguous first (and the answer is the same)."""
    q, k, v, g = _inputs((2, 3, 2), 12, 10, 16)
    qt = ember.tensor(q.transpose(2, 0, 1, 3, 4).copy(), device=dev,
                      dtype=ember.float32).permute(1, 2, 0, 3, 4)
    assert qt.shape == q.shape
    kt, vt = (ember.tensor(a, device=dev, dtype=ember.float32) for a in (k, v))
    y = NF.scaled_dot_product_attention(qt, kt, vt)
    _close(y, _reference(q, k, v, g, None, False, 0.25)["out"], "float32")


def test_mismatched_operands_name_the_op_and_shapes(dev: ember.Device) -> None:
    be = dev.backend
    q = be.memory.from_numpy(np.zeros((2, 4, 8), np.float32))
    k = be.memory.from_numpy(np.zeros((2, 5, 6), np.float32))
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: expected .*\(2, 5, 6\)"):
        attention.scaled_dot_product_attention(be, q, k, k, scale=1.0)
    mask = be.memory.from_numpy(np.zeros((3, 4, 5), np.bool_))
    with pytest.raises(ValueError, match="broadcasting to"):
        attention.scaled_dot_product_attention(be, q, q, q, mask, scale=1.0, mask=True)


@pytest.mark.parametrize(("cores", "precision", "want"),
                         [(True, "ieee", "tf32x3"), (False, "ieee", "ieee"),
                          (True, "tf32", "tf32"), (False, "tf32", "tf32")])
def test_float32_products_take_3xtf32_where_the_device_has_tensor_cores(
        dev: ember.Device, monkeypatch: pytest.MonkeyPatch, small_blocks: None,
        cores: bool, precision: str, want: str) -> None:
    """Strict float32 runs 3xTF32 on devices with float32 tensor cores (the kernels are
    compiled with that product; the interpreter multiplies in float32 whatever it is told, so
    the results still meet float32's tolerance), TF32 only when asked for."""
    be = dev.backend
    monkeypatch.setattr(be.memory, "f32_tensor_cores", lambda: cores)
    monkeypatch.setattr(be, "matmul_precision", precision)
    seen: list[str] = []
    real = be.launch

    def recording(kernel: object, grid: object, *args: object, **meta: object) -> object:
        if "PRECISION" in meta:
            seen.append(str(meta["PRECISION"]))
        return real(kernel, grid, *args, **meta)

    monkeypatch.setattr(be, "launch", recording)
    q, k, v, g = _inputs((2,), 37, 29, 32)
    got = _run_both(dev, q, k, v, g, None, True, "float32")
    assert seen == [want] * 3  # the forward, dK/dV and dQ (delta has no product)
    ref = _reference(q, k, v, g, None, True, 1 / np.sqrt(32))
    for name in ref:
        _close(got[name], ref[name], "float32")
