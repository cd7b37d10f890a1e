"""Scaled dot-product and multi-head attention: equation 1, masks, both paths, PyTorch parity."""

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib.attention import fused_attention
from transformer_lib.masks import masked_softmax


def test_sdpa_matches_the_formula_by_hand():
    q, k, v = (torch.randn(2, n, d, dtype=torch.float64) for n, d in ((3, 4), (5, 4), (5, 6)))
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


def test_unscaled_dot_products_have_variance_d_k():
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


def test_each_head_sees_only_its_own_slice_of_the_projections():
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


def _masked_batch():
    """q, k, v (2, 3, 5, 4) / (2, 3, 6, 4) in float64 and a mask with fully masked rows."""
    q = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    k, v = torch.randn(2, 3, 6, 4, dtype=torch.float64), torch.randn(2, 3, 6, 4, dtype=torch.float64)
    mask = torch.rand(2, 1, 5, 6) > 0.4
    mask[0, :, 2] = False  # query 2 of sentence 0 may attend to nothing
    mask[1, :, 4] = False
    mask[1, :, 0] = True
    return q, k, v, mask


def test_both_paths_follow_masked_softmax_on_fully_masked_rows():
    q, k, v, mask = _masked_batch()
    reference = masked_softmax(q @ k.transpose(-2, -1) / 2.0, mask)  # d_k = 4
    out, weights = tl.scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(weights, reference)  # the explicit path IS the rule
    torch.testing.assert_close(out, reference @ v)
    torch.testing.assert_close(fused_attention(q, k, v, mask), reference @ v)
    assert (out[0, :, 2] == 0).all() and (fused_attention(q, k, v, mask)[1, :, 4] == 0).all()


def _dropout_mha(p, fused):
    mha = tl.MultiHeadAttention(32, 4, dropout=p).double()
    mha.fused = fused
    return mha


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "explicit"])
def test_dropout_changes_the_output_in_training_only(fused):
    mha = _dropout_mha(0.3, fused)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    mask = tl.causal_mask(7)
    mha.eval()
    eval_out = mha(x, x, x, mask)
    assert torch.equal(mha(x, x, x, mask), eval_out)  # eval: deterministic
    mha.train()
    first, second = mha(x, x, x, mask), mha(x, x, x, mask)
    assert (first - eval_out).abs().max() > 1e-3  # training: dropout is on ...
    assert (first - second).abs().max() > 1e-3  # ... and random


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "explicit"])
def test_dropout_zero_in_training_equals_eval(fused):
    mha = _dropout_mha(0.0, fused)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    mask = tl.causal_mask(7)
    eval_out = mha.eval()(x, x, x, mask)
    assert (mha.train()(x, x, x, mask) - eval_out).abs().max() < 1e-12


def test_explicit_path_drops_the_expected_fraction_of_weights():
    p = 0.3
    mha = _dropout_mha(p, fused=False).train()
    mha.record_weights = True
    x = torch.randn(8, 40, 32, dtype=torch.float64)
    mha.eval()(x, x, x)  # no mask: every weight is positive before dropout
    clean = mha.last_weights
    mha.train()(x, x, x)
    w = mha.last_weights  # (8, 4, 40, 40), after dropout
    zero = (w == 0).double().mean().item()
    assert abs(zero - p) < 0.01  # 51,200 weights: the standard error is 0.002
    kept = w != 0
    torch.testing.assert_close(w[kept], clean[kept] / (1 - p))  # survivors scaled by 1 / (1 - p)


def test_dropout_in_the_fused_path_is_unbiased():
    # The fused kernel hides its weights: check instead that dropout leaves the mean output
    # unchanged (inverted dropout) while the single outputs vary.
    mha = _dropout_mha(0.5, fused=True)
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    eval_out = mha.eval()(x, x, x)
    mha.train()
    outs = torch.stack([mha(x, x, x) for _ in range(400)])
    assert outs.std(0).mean() > 0.01
    standard_error = outs.std(0) / 400 ** 0.5
    assert ((outs.mean(0) - eval_out).abs() < 5 * standard_error).all()
