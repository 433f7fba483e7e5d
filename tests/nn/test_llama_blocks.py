"""Llama-style blocks against PyTorch CPU: rotary embeddings (both layouts), grouped-query
attention (``enable_gqa``), SwiGLU, ``index_copy`` and the KV cache, values and gradients; the
cached decode against the uncached forward, eager and compiled."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember import nn

torch = pytest.importorskip("torch")
AD = "autodiff<cpu>"


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def grads_of(fn_e: Any, fn_t: Any, arrays: list[np.ndarray]) -> tuple[Any, Any]:
    """Values and gradients of ``sum(out * w)`` (a fixed random ``w``) in both frameworks."""
    ins_e = [ember.tensor(a, device=AD, requires_grad=True) for a in arrays]
    ins_t = [torch.tensor(a, requires_grad=True) for a in arrays]
    out_e, out_t = fn_e(*ins_e), fn_t(*ins_t)
    w = randn(*out_t.shape, seed=9)
    g = (out_e * ember.tensor(w, device=AD)).sum().backward()
    (out_t * torch.tensor(w)).sum().backward()
    return ((out_e.numpy(), [g[x].numpy() for x in ins_e]),
            (out_t.detach().numpy(), [x.grad.numpy() for x in ins_t]))


def assert_same(ours: Any, theirs: Any, tol: float = 1e-5) -> None:
    np.testing.assert_allclose(ours[0], theirs[0], rtol=tol, atol=tol)
    for a, b in zip(ours[1], theirs[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def torch_rope(x: Any, cos: Any, sin: Any, interleaved: bool) -> Any:
    """Hugging Face's ``rotate_half`` form, or Meta's complex-number form."""
    if interleaved:
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        out = torch.view_as_real(xc * torch.complex(cos, sin))
        return out.reshape(x.shape)
    cos2, sin2 = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    h = x.shape[-1] // 2
    return x * cos2 + torch.cat([-x[..., h:], x[..., :h]], -1) * sin2


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rotary_emb_matches_pytorch_values_and_gradients(interleaved: bool) -> None:
    x, ang = randn(2, 3, 5, 8, seed=1), randn(5, 4, seed=2)
    ours, theirs = grads_of(
        lambda a, t: F.apply_rotary_emb(a, t.cos(), t.sin(), interleaved),
        lambda a, t: torch_rope(a, t.cos(), t.sin(), interleaved), [x, ang])
    assert_same(ours, theirs)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_module_table_and_tensor_offset_equal_the_int_offset(interleaved: bool) -> None:
    x = ember.tensor(randn(1, 2, 3, 8, seed=3))
    plain = nn.RotaryEmbedding(8, interleaved=interleaved)
    table = nn.RotaryEmbedding(8, interleaved=interleaved, max_seq_len=12)
    want = plain(x, 4).numpy()
    for got in (table(x, 4), table(x, ember.tensor(4)), plain(x, ember.tensor(4))):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    inv = 1.0 / 10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8)
    ang = torch.outer(torch.arange(4, 7, dtype=torch.float32), inv)
    ref = torch_rope(torch.tensor(x.numpy()), ang.cos(), ang.sin(), interleaved)
    np.testing.assert_allclose(want, ref.numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="max_seq_len=12"):
        table(x, 10)
    with pytest.raises(IndexError, match="out of bounds"):
        table(x, ember.tensor(10))


def test_rotary_rejects_odd_or_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="even"):
        nn.RotaryEmbedding(5)
    with pytest.raises(ember.ShapeError, match="D/2 = 4"):
        F.apply_rotary_emb(ember.ones(3, 8), ember.ones(3, 3), ember.ones(3, 3))
    with pytest.raises(ember.ShapeError, match="even D"):
        F.apply_rotary_emb(ember.ones(3, 7), ember.ones(3, 3), ember.ones(3, 3))


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_enable_gqa_matches_pytorch_values_and_gradients(causal: bool) -> None:
    q, k, v = randn(2, 6, 4, 8, seed=1), randn(2, 2, 5, 8, seed=2), randn(2, 2, 5, 8, seed=3)
    mask = None if causal else randn(4, 5, seed=4)
    ours, theirs = grads_of(
        lambda a, b, c: F.scaled_dot_product_attention(
            a, b, c, None if mask is None else ember.tensor(mask, device=AD),
            is_causal=causal, enable_gqa=True),
        lambda a, b, c: torch.nn.functional.scaled_dot_product_attention(
            a, b, c, None if mask is None else torch.tensor(mask), is_causal=causal,
            enable_gqa=True), [q, k, v])
    assert_same(ours, theirs)
    with pytest.raises(ember.ShapeError, match="multiple"):
        F.scaled_dot_product_attention(ember.ones(1, 6, 2, 4), ember.ones(1, 4, 2, 4),
                                       ember.ones(1, 4, 2, 4), enable_gqa=True)


def test_swiglu_matches_pytorch_values_and_gradients() -> None:
    x, w1, w2, w3 = randn(3, 8, seed=1), randn(16, 8, seed=2), randn(8, 16, seed=3), \
        randn(16, 8, seed=4)

    def ours(a: Any, g: Any, d: Any, u: Any) -> Any:
        m = nn.SwiGLU(8, 16).to(AD)
        m.gate_proj.weight, m.down_proj.weight, m.up_proj.weight = g, d, u
        return m(a)

    def theirs(a: Any, g: Any, d: Any, u: Any) -> Any:
        return torch.nn.functional.silu(a @ g.T) * (a @ u.T) @ d.T

    assert_same(*grads_of(ours, theirs, [x, w1, w2, w3]), tol=1e-4)


def test_index_copy_matches_pytorch_values_gradients_and_errors() -> None:
    x, src = randn(2, 3, 6, 4, seed=1), randn(2, 3, 2, 4, seed=2)
    idx = [5, 1]
    ours, theirs = grads_of(lambda a, s: a.index_copy(2, ember.tensor(idx, device=AD), s),
                            lambda a, s: a.index_copy(2, torch.tensor(idx), s), [x, src])
    assert_same(ours, theirs)
    t = ember.tensor(x)
    same = t
    t.index_copy_(2, ember.tensor(idx), ember.tensor(src))
    assert same is t
    np.testing.assert_array_equal(t.numpy(), torch.tensor(x).index_copy_(
        2, torch.tensor(idx), torch.tensor(src)).numpy())
    with pytest.raises(IndexError, match="index_copy: index 6 is out of bounds"):
        t.index_copy(2, ember.tensor([6]), ember.tensor(src[:, :, :1]))
    with pytest.raises(ember.ShapeError, match="index_copy: source"):
        t.index_copy(2, ember.tensor([1]), ember.tensor(src))


def test_kv_cache_writes_at_int_and_tensor_positions_and_refuses_overflow() -> None:
    cache = nn.KVCache(1, 2, 5, 3)
    a, b = ember.tensor(randn(1, 2, 3, 3, seed=1)), ember.tensor(randn(1, 2, 1, 3, seed=2))
    keys, _ = cache.update(a, a, 0)
    assert keys.shape == (1, 2, 3, 3)
    keys, values = cache.update(b, b, ember.tensor(3))
    want = np.zeros((1, 2, 5, 3), np.float32)
    want[:, :, :3], want[:, :, 3:4] = a.numpy(), b.numpy()
    for got in (keys, values, cache.k, cache.v):
        np.testing.assert_array_equal(got.numpy(), want)
    assert cache.mask(2, 1).tolist() == [[True, True, False], [True, True, True]]
    assert cache.mask(1, ember.tensor(3)).tolist() == [[True] * 4 + [False]]
    with pytest.raises(ValueError, match="do not fit max_len=5"):
        cache.update(a, a, 3)
    with pytest.raises(IndexError, match="does not fit max_len=5"):
        cache.update(a, a, ember.tensor(3))
    with pytest.raises(ember.ShapeError, match=r"\[1, 2, L, 3\]"):
        cache.update(ember.ones(1, 1, 1, 3), ember.ones(1, 1, 1, 3), 0)


class TinyLM(nn.Module):
    """Embedding, one GQA layer with rotary embeddings, SwiGLU, RMSNorm and a head."""

    def __init__(self, vocab: int = 23, dim: int = 16) -> None:
        super().__init__()
        g = ember.Generator(0)
        self.emb = nn.Embedding(vocab, dim, generator=g)
        rope = nn.RotaryEmbedding(4, max_seq_len=16)
        self.attn = nn.GroupedQueryAttention(dim, 4, 2, rotary=rope, generator=g)
        self.norm = nn.RMSNorm(dim)
        self.mlp = nn.SwiGLU(dim, 32, generator=g)
        self.head = nn.Linear(dim, vocab, generator=g)

    def forward(self, tokens: ember.Tensor, start: Any = 0) -> ember.Tensor:
        x = self.emb(tokens)
        x = x + self.attn(x, start)
        return self.head(self.norm(x + self.mlp(x)))  # type: ignore[no-any-return]


def test_gqa_module_matches_a_pytorch_transcription() -> None:
    model = TinyLM()
    tokens = np.array([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]])
    ours = model(ember.tensor(tokens)).numpy()
    p = {k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()}
    x = p["emb.weight"][torch.tensor(tokens)]
    q = (x @ p["attn.q_proj.weight"].T).reshape(2, 6, 4, 4).transpose(1, 2)
    k = (x @ p["attn.k_proj.weight"].T).reshape(2, 6, 2, 4).transpose(1, 2)
    v = (x @ p["attn.v_proj.weight"].T).reshape(2, 6, 2, 4).transpose(1, 2)
    inv = 1.0 / 10000.0 ** (torch.arange(0, 4, 2, dtype=torch.float32) / 4)
    ang = torch.outer(torch.arange(6, dtype=torch.float32), inv)
    q, k = (torch_rope(t, ang.cos(), ang.sin(), False) for t in (q, k))
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                         enable_gqa=True)
    x = x + y.transpose(1, 2).reshape(2, 6, 16) @ p["attn.o_proj.weight"].T
    h = torch.nn.functional.silu(x @ p["mlp.gate_proj.weight"].T) * (x @ p["mlp.up_proj.weight"].T)
    x = torch.nn.functional.rms_norm(x + h @ p["mlp.down_proj.weight"].T, (16,),
                                     p["norm.weight"])
    theirs = x @ p["head.weight"].T + p["head.bias"]
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tensor_start", [False, True])
def test_cached_decode_equals_the_uncached_forward(tensor_start: bool) -> None:
    model = TinyLM()
    tokens = ember.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
    full = model(tokens).numpy()
    model.attn.setup_cache(2, 16)
    got = [model(tokens[:, :5], 0).numpy()]
    for i in range(5, 8):
        start: Any = ember.tensor(i) if tensor_start else i
        got.append(model(tokens[:, i:i + 1], start).numpy())
    np.testing.assert_allclose(np.concatenate(got, 1), full, rtol=1e-5, atol=1e-5)


def test_sample_greedy_top_k_and_top_p_pick_from_the_right_sets() -> None:
    logits = ember.tensor(np.log(np.array([[0.5, 0.3, 0.15, 0.05]] * 4000, np.float32)))
    g = ember.Generator(1)
    from ember.nn.generation import sample

    assert sample(logits[:3], 0.0).tolist() == [0, 0, 0]
    draws = np.bincount(sample(logits, generator=g).numpy(), minlength=4) / 4000
    np.testing.assert_allclose(draws, [0.5, 0.3, 0.15, 0.05], atol=0.03)
    top2 = np.bincount(sample(logits, top_k=2, generator=g).numpy(), minlength=4) / 4000
    np.testing.assert_allclose(top2, [0.625, 0.375, 0, 0], atol=0.03)
    # top_p=0.6: 0.5 alone is short of 0.6, so 0.3 joins; the rest is cut
    nucleus = np.bincount(sample(logits, top_p=0.6, generator=g).numpy(), minlength=4) / 4000
    np.testing.assert_allclose(nucleus, [0.625, 0.375, 0, 0], atol=0.03)
    hot = np.bincount(sample(logits, temperature=0.5, generator=g).numpy(), minlength=4) / 4000
    p = np.array([0.5, 0.3, 0.15, 0.05]) ** 2
    np.testing.assert_allclose(hot, p / p.sum(), atol=0.03)
    with pytest.raises(ValueError, match="top_p"):
        sample(logits, top_p=0.0)


def test_generate_compiled_replays_one_step_and_equals_eager() -> None:
    from ember.nn.generation import generate

    model = TinyLM()
    prompt = ember.tensor([[3, 1, 4], [1, 5, 9]])
    model.attn.setup_cache(2, 16)
    eager = generate(model, prompt, 6, compile=False).numpy()
    model.attn.setup_cache(2, 16)
    compiled = generate(model, prompt, 6).numpy()
    np.testing.assert_array_equal(compiled, eager)
    # greedy decode re-run without a cache: each token is the argmax of the full forward
    logits = model(ember.tensor(eager[:, :-1])).numpy()
    np.testing.assert_array_equal(logits[:, 2:].argmax(-1), eager[:, 3:])


def test_a_compiled_decode_step_traces_once_for_every_position() -> None:
    model = TinyLM()
    tokens = ember.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    full = model(tokens).numpy()
    model.attn.setup_cache(1, 16)
    step = ember.compile(lambda tok, pos: model(tok, pos))
    model(tokens[:, :4], 0)
    got = [step(tokens[:, i:i + 1], ember.tensor(i)).numpy() for i in range(4, 8)]
    assert (step.stats.traces, step.stats.replays) == (1, 3)
    np.testing.assert_allclose(np.concatenate(got, 1), full[:, 4:], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.attn.kv_cache.k.numpy()[:, :, 8:], 0)  # not written


def test_multihead_attention_with_a_cache_equals_its_causal_forward() -> None:
    mha = nn.MultiheadAttention(8, 2, batch_first=True, generator=ember.Generator(3))
    x = ember.tensor(randn(2, 6, 8, seed=5))
    want, want_w = mha(x, x, x, attn_mask=nn.causal_mask(6))
    cache = nn.KVCache(2, 2, 10, 4)
    got, w = mha(x[:, :4], x[:, :4], x[:, :4], kv_cache=cache)
    outs, weights = [got], [w.numpy()]
    for i in (4, 5):
        step = x[:, i:i + 1]
        got, w = mha(step, step, step, kv_cache=cache, cache_start=ember.tensor(i))
        outs.append(got)
        weights.append(w.numpy()[..., :6])  # later cache positions have weight 0
    np.testing.assert_allclose(ember.cat(outs, 1).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights[1][:, 0], want_w.numpy()[:, 4], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="cache's causal mask"):
        mha(x, x, x, attn_mask=nn.causal_mask(6), kv_cache=cache)
