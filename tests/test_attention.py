"""Scaled dot-product and multi-head attention: equation 1, masks, both paths, PyTorch parity."""

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib.attention import fused_attention


def test_sdpa_matches_the_formula_by_hand():
    q, k, v = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 5, 4, dtype=torch.float64), torch.randn(2, 5, 6, dtype=torch.float64)
    out, w = tl.scaled_dot_product_attention(q, k, v)
    expected_w = torch.exp(q @ k.transpose(1, 2) / 2.0)
    expected_w = expected_w / expected_w.sum(-1, keepdim=True)
    torch.testing.assert_close(w, expected_w)
    torch.testing.assert_close(out, expected_w @ v)
    assert out.shape == (2, 3, 6) and w.shape == (2, 3, 5)


def test_sdpa_matches_torch_functional_with_mask():
    q, k, v = (torch.randn(2, 4, 7, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(2, 1, 7, 7) > 0.3
    mask[..., 0] = True  # every row keeps a key, so PyTorch's result is defined
    ours, _ = tl.scaled_dot_product_attention(q, k, v, mask)
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (ours - theirs).abs().max() < 1e-12


def test_weights_rows_sum_to_one_and_masked_keys_get_zero():
    q, k, v = torch.randn(3, 6, 4), torch.randn(3, 6, 4), torch.randn(3, 6, 4)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    _, w = tl.scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 6))
    assert (w[:, ~mask] == 0).all()


def test_fully_masked_row_gives_zero_weights_and_finite_output_and_gradients():
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    mask = torch.ones(1, 1, 3, 5, dtype=torch.bool)
    mask[..., 1, :] = False  # query 1 may look at nothing
    out, w = tl.scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and (w[..., 1, :] == 0).all() and (out[..., 1, :] == 0).all()
    fused = fused_attention(q, k, v, mask)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(fused, out)
    (out.sum() + fused.sum()).backward()
    assert torch.isfinite(q.grad).all()


def test_scores_grow_like_sqrt_dk_without_scaling():
    # the claim of footnote 4: q.k has variance d_k when components are N(0, 1)
    for d_k in (4, 64, 256):
        q, k = torch.randn(20000, d_k, dtype=torch.float64), torch.randn(20000, d_k, dtype=torch.float64)
        var = (q * k).sum(-1).var().item()
        assert abs(var / d_k - 1) < 0.06


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_multihead_matches_torch(bias, dtype, tol):
    torch_mha = nn.MultiheadAttention(32, 4, bias=bias, batch_first=True, dtype=dtype).eval()
    ours = tl.from_torch(torch_mha).eval()
    x, mem = torch.randn(3, 7, 32, dtype=dtype), torch.randn(3, 5, 32, dtype=dtype)
    pad = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] * 4 + [False]])  # True = real
    causal = tl.causal_mask(7)
    # self-attention, causal
    theirs, _ = torch_mha(x, x, x, attn_mask=~causal, need_weights=False)
    assert (ours(x, x, x, causal) - theirs).abs().max() < tol
    # cross-attention with key padding
    theirs, _ = torch_mha(x, mem, mem, key_padding_mask=~pad, need_weights=False)
    assert (ours(x, mem, mem, pad[:, None, None, :]) - theirs).abs().max() < tol
    # no mask
    theirs, _ = torch_mha(x, x, x, need_weights=False)
    assert (ours(x, x, x) - theirs).abs().max() < tol


def test_recorded_weights_match_torch_per_head():
    torch_mha = nn.MultiheadAttention(16, 2, batch_first=True, dtype=torch.float64).eval()
    ours = tl.from_torch(torch_mha).eval()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    _, theirs = torch_mha(x, x, x, need_weights=True, average_attn_weights=False)
    ours.record_weights = True
    ours(x, x, x)
    assert ours.last_weights.shape == (2, 2, 6, 6)
    assert (ours.last_weights - theirs).abs().max() < 1e-12


def test_fused_and_explicit_paths_agree_in_eval_and_backward():
    mha = tl.MultiHeadAttention(24, 3).double()
    x = torch.randn(2, 9, 24, dtype=torch.float64, requires_grad=True)
    mask = tl.target_mask(torch.tensor([[1] * 9, [1] * 6 + [0] * 3]), pad_id=0)
    mha.fused = True
    out_fused = mha(x, x, x, mask)
    (g_fused,) = torch.autograd.grad(out_fused.square().sum(), x)
    mha.fused = False
    out_explicit = mha(x, x, x, mask)
    (g_explicit,) = torch.autograd.grad(out_explicit.square().sum(), x)
    assert (out_fused - out_explicit).abs().max() < 1e-12
    assert (g_fused - g_explicit).abs().max() < 1e-10


def test_heads_run_in_one_batched_product_not_a_loop():
    # Each head must see only its own d_k slice: zeroing head 0's query projection must
    # leave heads 1.. unchanged and make head 0's weights uniform.
    mha = tl.MultiHeadAttention(8, 2).double().eval()
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    mha.record_weights = True
    mha(x, x, x)
    before = mha.last_weights.clone()
    with torch.no_grad():
        mha.w_q.weight[:4].zero_()
        mha.w_q.bias[:4].zero_()
    mha(x, x, x)
    after = mha.last_weights
    torch.testing.assert_close(after[:, 1], before[:, 1])
    torch.testing.assert_close(after[:, 0], torch.full((1, 4, 4), 0.25, dtype=torch.float64))


def test_self_attention_without_positions_is_permutation_equivariant():
    mha = tl.MultiHeadAttention(16, 4).double().eval()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    perm = torch.randperm(6)
    out = mha(x, x, x)
    out_perm = mha(x[:, perm], x[:, perm], x[:, perm])
    assert (out_perm - out[:, perm]).abs().max() < 1e-12


def test_multihead_parameter_count_equals_one_full_width_head():
    d_model = 64
    many = tl.MultiHeadAttention(d_model, 8)
    one = tl.MultiHeadAttention(d_model, 1)
    assert tl.count_parameters(many) == tl.count_parameters(one) == 4 * (d_model * d_model + d_model)


def test_record_attention_collects_every_module():
    model = tl.Transformer(tl.TransformerConfig(11, 11, d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0)).eval()
    src, tgt = torch.randint(1, 11, (2, 5)), torch.randint(1, 11, (2, 4))
    with tl.record_attention(model) as weights:
        model(src, tgt)
    assert len(weights) == 2 + 2 * 2
    assert weights["encoder.layers.0.self_attn"].shape == (2, 2, 5, 5)
    assert weights["decoder.layers.1.cross_attn"].shape == (2, 2, 4, 5)
    assert all(not m.record_weights for m in tl.attention.attention_modules(model).values())
