"""Properties the book states, checked with Hypothesis on random shapes, masks and values.

- masked softmax: weights are >= 0, blocked keys weigh exactly 0, and each row sums to 1, or is
  all zero when no key is allowed (chapter 8);
- blockwise and sliding-window attention equal the exact computation they stand for
  (`scaled_dot_product_attention` with the mask), values and gradients, in float64 (chapter 13);
  so does the fused path of `MultiHeadAttention`;
- under the causal mask no output depends on a later position: attention, an encoder layer
  used as a decoder-only block, and the whole Transformer decoder (chapters 8-10);
- attention without positions is permutation-equivariant: permuting the tokens permutes the
  outputs (chapters 3 and 6);
- the sinusoidal encoding's shift property: PE[pos + k] = T(k) PE[pos] with T(k) a rotation
  that does not depend on pos (chapter 6).

The data come from a `torch.Generator` seeded by Hypothesis, so each example is reproducible
and shrinks to small shapes. Examples are bounded (`max_examples`) to keep the unit suite
fast (HYPOTHESIS_EXAMPLES_SCALE=20 runs twenty times as many); tests/conftest.py sets the
profile (no deadline; the same examples on every run under CI=true).
"""
from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from conftest import boolean_masks
from transformer_lib import efficient
from transformer_lib.masks import masked_softmax
from transformer_lib.positional import rotation_for_offset, sinusoidal_encoding

F64 = torch.float64
SCALE = float(os.environ.get("HYPOTHESIS_EXAMPLES_SCALE", "1"))


def bounded(n: int) -> settings:
    return settings(max_examples=max(1, round(n * SCALE)))


seeds = st.integers(0, 2**31 - 1)


def randn(gen: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(*shape, generator=gen, dtype=F64)


def random_mask(gen: torch.Generator, shape: tuple[int, ...], density: float) -> torch.Tensor:
    return torch.rand(*shape, generator=gen) < density


def grads(fn, *inputs: torch.Tensor, cotangent: torch.Tensor) -> list[torch.Tensor]:
    """d (fn(*inputs) . cotangent) / d input, for every input (zeros where none flows)."""
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    (fn(*leaves) * cotangent).sum().backward()
    return [x.grad if x.grad is not None else torch.zeros_like(x) for x in leaves]


# --- masked softmax -------------------------------------------------------------------------


@bounded(60)
@given(seed=seeds, rows=st.integers(1, 6), k_len=st.integers(1, 9),
       scale=st.sampled_from([1e-3, 1.0, 50.0, 1e4, 1e30]),
       dtype=st.sampled_from([torch.float32, torch.float64]), data=st.data())
def test_masked_softmax_rows_sum_to_one_or_are_all_zero(seed, rows, k_len, scale, dtype, data):
    gen = torch.Generator().manual_seed(seed)
    scores = randn(gen, rows, k_len, scale=scale).to(dtype)
    mask = data.draw(boolean_masks((rows, k_len)), label="mask")
    weights = masked_softmax(scores, mask)
    assert weights.dtype == dtype and not weights.isnan().any()
    assert (weights >= 0).all() and (weights[~mask] == 0).all()
    allowed = mask.any(-1)
    torch.testing.assert_close(weights[allowed].sum(-1), torch.ones(int(allowed.sum()), dtype=dtype))
    assert (weights[~allowed] == 0).all()


@bounded(30)
@given(seed=seeds, q_len=st.integers(1, 6), k_len=st.integers(1, 6), data=st.data())
def test_attention_weights_follow_the_same_rule(seed, q_len, k_len, data):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = randn(gen, 2, q_len, 4), randn(gen, 2, k_len, 4), randn(gen, 2, k_len, 3)
    mask = data.draw(boolean_masks((2, q_len, k_len)), label="mask")
    out, weights = tl.scaled_dot_product_attention(q, k, v, mask)
    allowed = mask.any(-1)
    torch.testing.assert_close(weights.sum(-1)[allowed], torch.ones(int(allowed.sum()), dtype=F64))
    assert (weights[~mask] == 0).all() and (out[~allowed] == 0).all()


# --- blockwise, sliding-window and fused attention against the exact computation ------------

MASK_SHAPES = {  # how a mask may broadcast to (B, H, q_len, k_len)
    "none": None,
    "q k": lambda b, h, q, k: (q, k),
    "B 1 1 k": lambda b, h, q, k: (b, 1, 1, k),
    "B 1 q k": lambda b, h, q, k: (b, 1, q, k),
    "B H q k": lambda b, h, q, k: (b, h, q, k),
    "1 1 q 1": lambda b, h, q, k: (1, 1, q, 1),
}


def exact(q, k, v, mask=None):
    return tl.scaled_dot_product_attention(q, k, v, mask)[0]


@bounded(60)
@given(seed=seeds, b=st.integers(1, 2), h=st.integers(1, 3), q_len=st.integers(1, 10),
       k_len=st.integers(1, 12), d_k=st.integers(1, 6), d_v=st.integers(1, 5),
       block_size=st.integers(1, 14), mask_shape=st.sampled_from(sorted(MASK_SHAPES)),
       density=st.sampled_from([0.1, 0.5, 0.9]), scale=st.sampled_from([1.0, 30.0]))
def test_blockwise_attention_equals_exact_attention(seed, b, h, q_len, k_len, d_k, d_v, block_size,
                                                    mask_shape, density, scale):
    gen = torch.Generator().manual_seed(seed)
    q, k = randn(gen, b, h, q_len, d_k, scale=scale), randn(gen, b, h, k_len, d_k)
    v = randn(gen, b, h, k_len, d_v)
    shape = MASK_SHAPES[mask_shape]
    mask = None if shape is None else random_mask(gen, shape(b, h, q_len, k_len), density)
    out = efficient.blockwise_attention(q, k, v, mask, block_size=block_size)
    torch.testing.assert_close(out, exact(q, k, v, mask), rtol=1e-10, atol=1e-12)
    cotangent = randn(gen, *out.shape)
    for got, want in zip(
            grads(lambda q, k, v: efficient.blockwise_attention(q, k, v, mask, block_size), q, k, v,
                  cotangent=cotangent),
            grads(lambda q, k, v: exact(q, k, v, mask), q, k, v, cotangent=cotangent)):
        assert not got.isnan().any()
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


@bounded(60)
@given(seed=seeds, b=st.integers(1, 2), h=st.integers(1, 2), length=st.integers(1, 17),
       d_k=st.integers(1, 5), d_v=st.integers(1, 4), window=st.integers(1, 20),
       global_share=st.floats(0, 1), scale=st.sampled_from([1.0, 30.0]))
def test_sliding_window_attention_equals_masked_exact_attention(seed, b, h, length, d_k, d_v, window,
                                                                global_share, scale):
    n_global = round(global_share * length)
    gen = torch.Generator().manual_seed(seed)
    q, k = randn(gen, b, h, length, d_k, scale=scale), randn(gen, b, h, length, d_k)
    v = randn(gen, b, h, length, d_v)
    mask = efficient.sliding_window_mask(length, window, n_global)
    out = efficient.sliding_window_attention(q, k, v, window, n_global)
    torch.testing.assert_close(out, exact(q, k, v, mask), rtol=1e-10, atol=1e-12)
    cotangent = randn(gen, *out.shape)
    for got, want in zip(
            grads(lambda q, k, v: efficient.sliding_window_attention(q, k, v, window, n_global), q, k, v,
                  cotangent=cotangent),
            grads(lambda q, k, v: exact(q, k, v, mask), q, k, v, cotangent=cotangent)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


@bounded(30)
@given(seed=seeds, b=st.integers(1, 2), n_heads=st.sampled_from([1, 2, 4]), q_len=st.integers(1, 7),
       k_len=st.integers(1, 7), mask_shape=st.sampled_from(sorted(MASK_SHAPES)), data=st.data())
def test_fused_and_explicit_multi_head_attention_agree(seed, b, n_heads, q_len, k_len, mask_shape, data):
    """`MultiHeadAttention` takes PyTorch's fused kernel unless asked for its weights; both
    paths give the same output and the same gradients, fully masked rows included."""
    torch.manual_seed(seed)
    fused = tl.MultiHeadAttention(8, n_heads).double()
    explicit = tl.MultiHeadAttention(8, n_heads, fused=False).double()
    explicit.load_state_dict(fused.state_dict())
    gen = torch.Generator().manual_seed(seed)
    x, memory = randn(gen, b, q_len, 8), randn(gen, b, k_len, 8)
    shape = MASK_SHAPES[mask_shape]
    mask = None if shape is None else data.draw(boolean_masks(shape(b, n_heads, q_len, k_len)), label="mask")
    cotangent = randn(gen, b, q_len, 8)
    outs = [m(x, memory, memory, mask) for m in (fused, explicit)]
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-10, atol=1e-12)
    for got, want in zip(grads(lambda x, m: fused(x, m, m, mask), x, memory, cotangent=cotangent),
                         grads(lambda x, m: explicit(x, m, m, mask), x, memory, cotangent=cotangent)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


# --- causality ------------------------------------------------------------------------------


def causal_blocks():
    """Modules mapping x (B, T, 16) and a (T, T) mask to (B, T, 16), as a decoder uses them."""
    attn = tl.MultiHeadAttention(16, 4).double().eval()
    explicit = tl.MultiHeadAttention(16, 4, fused=False).double().eval()
    post = tl.EncoderLayer(16, 4, 32, dropout=0.0).double().eval()
    pre = tl.EncoderLayer(16, 4, 32, dropout=0.0, norm_first=True).double().eval()
    return {"attention (fused)": lambda x, m: attn(x, x, x, m),
            "attention (explicit)": lambda x, m: explicit(x, x, x, m),
            "encoder layer, post-norm": post, "encoder layer, pre-norm": pre}


@pytest.mark.parametrize("block", sorted(causal_blocks()))
@bounded(20)
@given(seed=seeds, b=st.integers(1, 3), length=st.integers(1, 10), t=st.integers(0, 9))
def test_no_output_depends_on_a_later_position(block, seed, b, length, t):
    """With tl.causal_mask, the outputs at positions <= t are the same whatever comes after t,
    and their gradient with respect to every later input is exactly 0."""
    t = min(t, length - 1)
    torch.manual_seed(0)
    fn = causal_blocks()[block]
    gen = torch.Generator().manual_seed(seed)
    x = randn(gen, b, length, 16)
    changed = x.clone()
    changed[:, t + 1:] = randn(gen, b, length - t - 1, 16, scale=10.0)
    mask = tl.causal_mask(length)
    torch.testing.assert_close(fn(changed, mask)[:, : t + 1], fn(x, mask)[:, : t + 1], rtol=1e-12, atol=1e-12)
    cotangent = torch.zeros(b, length, 16, dtype=F64)
    cotangent[:, : t + 1] = randn(gen, b, t + 1, 16)
    (dx,) = grads(lambda x: fn(x, mask), x, cotangent=cotangent)
    assert (dx[:, t + 1:] == 0).all()


@bounded(25)
@given(seed=seeds, b=st.integers(1, 3), src_len=st.integers(1, 8), tgt_len=st.integers(1, 9),
       t=st.integers(0, 8), norm_first=st.booleans())
def test_transformer_logits_do_not_depend_on_later_target_tokens(seed, b, src_len, tgt_len, t, norm_first):
    """logits[:, t] scores the token after tgt[:, :t+1]: changing (or padding) any later
    target token leaves it unchanged."""
    t = min(t, tgt_len - 1)
    torch.manual_seed(0)
    cfg = tl.TransformerConfig(11, 9, d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0,
                               norm_first=norm_first)
    model = tl.Transformer(cfg).double().eval()
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(1, 11, (b, src_len), generator=gen)
    src[0, -1] = 0  # some source padding
    tgt = torch.randint(1, 9, (b, tgt_len), generator=gen)
    later = tgt.clone()
    later[:, t + 1:] = torch.randint(0, 9, (b, tgt_len - t - 1), generator=gen)  # pads too
    with torch.no_grad():
        torch.testing.assert_close(model(src, later)[:, : t + 1], model(src, tgt)[:, : t + 1],
                                   rtol=1e-12, atol=1e-12)


# --- permutation equivariance ---------------------------------------------------------------


@bounded(30)
@given(seed=seeds, b=st.integers(1, 3), length=st.integers(1, 9), padded=st.booleans(),
       layer=st.booleans())
def test_attention_without_positions_is_permutation_equivariant(seed, b, length, padded, layer):
    """Self-attention (and a whole encoder layer) treats its input as a set: permuting the
    tokens, and the padding mask with them, permutes the outputs the same way."""
    torch.manual_seed(0)
    attn = tl.MultiHeadAttention(16, 4).double().eval()
    enc = tl.EncoderLayer(16, 4, 32, dropout=0.0).double().eval()
    fn = (lambda x, m: enc(x, m)) if layer else (lambda x, m: attn(x, x, x, m))
    gen = torch.Generator().manual_seed(seed)
    x = randn(gen, b, length, 16)
    keep = torch.ones(b, length, dtype=torch.bool)
    if padded and length > 1:
        keep[0, torch.randint(0, length, (1,), generator=gen)] = False
    perm = torch.randperm(length, generator=gen)
    mask = keep[:, None, None, :]
    out = fn(x, mask)
    torch.testing.assert_close(fn(x[:, perm], mask[..., perm]), out[:, perm], rtol=1e-10, atol=1e-12)


def test_positions_break_the_equivariance():
    """The contrast that the property above would miss if it held for everything: with the
    sinusoidal encoding added, swapping two tokens changes more than their order."""
    torch.manual_seed(0)
    attn = tl.MultiHeadAttention(16, 4).double().eval()
    pe = sinusoidal_encoding(5, 16, dtype=F64)
    x = torch.randn(1, 5, 16, dtype=F64)
    perm = torch.tensor([1, 0, 2, 3, 4])

    def with_pos(x):
        return attn(x + pe, x + pe, x + pe)

    assert not torch.allclose(with_pos(x[:, perm]), with_pos(x)[:, perm], atol=1e-6)


# --- the sinusoidal encoding's shift property ----------------------------------------------


@bounded(50)
@given(half=st.integers(1, 32), pos=st.integers(0, 300), k=st.integers(-300, 300))
def test_sinusoidal_shift_is_a_rotation_independent_of_position(half, pos, k):
    d_model, k = 2 * half, max(k, -pos)  # a shift back stops at position 0
    pe = sinusoidal_encoding(max(pos, pos + k) + 1, d_model, dtype=F64)
    shift = rotation_for_offset(k, d_model, dtype=F64)
    torch.testing.assert_close(shift @ pe[pos], pe[pos + k], rtol=0, atol=1e-9)
    torch.testing.assert_close(shift @ shift.T, torch.eye(d_model, dtype=F64), rtol=0, atol=1e-12)


@bounded(30)
@given(half=st.integers(1, 16), a=st.integers(-100, 100), b=st.integers(-100, 100))
def test_shifts_compose(half, a, b):
    """T(a) T(b) = T(a + b): moving by a then by b is moving by a + b."""
    d_model = 2 * half
    torch.testing.assert_close(rotation_for_offset(a, d_model, dtype=F64) @ rotation_for_offset(b, d_model, dtype=F64),
                               rotation_for_offset(a + b, d_model, dtype=F64), rtol=0, atol=1e-11)
