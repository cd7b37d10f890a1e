"""Encoder/decoder layers and stacks: equal to PyTorch's after `tl.from_torch` (with and without
masks, float64 and float32), the residual sub-layer `AddNorm`, and the state_dict keys."""
import pytest
import torch
from torch import nn

import transformer_lib as tl
from conftest import to_torch_padding

D, H, FF = 32, 4, 64
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
DTYPES = [torch.float64, torch.float32]


def batch(dtype, s=7, t=6):
    src = torch.randn(3, s, D, dtype=dtype)
    tgt = torch.randn(3, t, D, dtype=dtype)
    src_keep = torch.ones(3, s, dtype=torch.bool)
    src_keep[1, 5:] = False
    src_keep[2, 3:] = False
    tgt_keep = torch.ones(3, t, dtype=torch.bool)
    tgt_keep[2, 4:] = False
    return src, tgt, src_keep[:, None, None, :], tgt_keep[:, None, None, :]


def real(x, keep):
    """Only the real (unpadded) positions: PyTorch's fast path may zero the padded ones."""
    return x[keep[:, 0, 0, :]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(dtype, norm_first):
    theirs = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=True, norm_first=norm_first,
                                        dtype=dtype).eval()
    ours = tl.from_torch(theirs).eval()
    src, _, keep, _ = batch(dtype)
    assert (ours(src) - theirs(src)).abs().max() < TOL[dtype]
    got = ours(src, keep)
    want = theirs(src, src_key_padding_mask=to_torch_padding(keep))
    assert (real(got, keep) - real(want, keep)).abs().max() < TOL[dtype]
    causal = tl.causal_mask(src.shape[1])
    assert (ours(src, causal) - theirs(src, src_mask=~causal)).abs().max() < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(dtype, norm_first):
    theirs = nn.TransformerDecoderLayer(D, H, FF, dropout=0.1, batch_first=True, norm_first=norm_first,
                                        dtype=dtype).eval()
    ours = tl.from_torch(theirs).eval()
    src, tgt, src_keep, tgt_keep = batch(dtype)
    causal = tl.causal_mask(tgt.shape[1])
    got = ours(tgt, src, causal & tgt_keep, src_keep)
    want = theirs(tgt, src, tgt_mask=~causal, tgt_key_padding_mask=to_torch_padding(tgt_keep),
                  memory_key_padding_mask=to_torch_padding(src_keep))
    assert (real(got, tgt_keep) - real(want, tgt_keep)).abs().max() < TOL[dtype]
    assert (ours(tgt, src) - theirs(tgt, src)).abs().max() < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_and_full_transformer_match_torch(dtype, norm_first):
    theirs = nn.Transformer(D, H, num_encoder_layers=2, num_decoder_layers=3, dim_feedforward=FF, dropout=0.1,
                            batch_first=True, norm_first=norm_first, dtype=dtype).eval()
    ours = tl.from_torch(theirs).eval()
    assert len(ours.encoder.layers) == 2 and len(ours.decoder.layers) == 3
    src, tgt, src_keep, tgt_keep = batch(dtype)
    causal = tl.causal_mask(tgt.shape[1])
    got = ours(src, tgt, src_keep, causal & tgt_keep, src_keep)
    want = theirs(src, tgt, tgt_mask=~causal, src_key_padding_mask=to_torch_padding(src_keep),
                  tgt_key_padding_mask=to_torch_padding(tgt_keep), memory_key_padding_mask=to_torch_padding(src_keep))
    assert (real(got, tgt_keep) - real(want, tgt_keep)).abs().max() < TOL[dtype]
    # the stacks alone
    enc = tl.from_torch(theirs.encoder).eval()
    assert (enc(src) - theirs.encoder(src)).abs().max() < TOL[dtype]
    dec = tl.from_torch(theirs.decoder).eval()
    memory = enc(src)
    assert (dec(tgt, memory, causal) - theirs.decoder(tgt, memory, tgt_mask=~causal)).abs().max() < TOL[dtype]


def test_feed_forward_is_position_wise():
    ff = tl.FeedForward(8, 16).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    out = ff(x)
    for t in range(5):  # each position alone gives the same answer as inside the sequence
        torch.testing.assert_close(ff(x[:, t : t + 1]), out[:, t : t + 1])
    w1, w2 = ff.w_1, ff.w_2
    torch.testing.assert_close(out, torch.relu(x @ w1.weight.T + w1.bias) @ w2.weight.T + w2.bias)


def test_post_norm_output_is_normalised_and_pre_norm_is_not():
    x = 5 * torch.randn(2, 4, D) + 3
    post = tl.EncoderLayer(D, H, FF, dropout=0.0).eval()(x)
    pre = tl.EncoderLayer(D, H, FF, dropout=0.0, norm_first=True).eval()(x)
    assert post.mean(-1).abs().max() < 1e-5 and (post.std(-1, unbiased=False) - 1).abs().max() < 1e-3
    assert pre.std(-1, unbiased=False).mean() > 2  # the residual stream keeps the input's scale


def test_final_norm_defaults_follow_norm_first():
    assert tl.Encoder(D, H, FF, 2).norm is None
    assert tl.Encoder(D, H, FF, 2, norm_first=True).norm is not None
    assert tl.Decoder(D, H, FF, 2, final_norm=True).norm is not None


def test_add_norm_is_the_papers_residual_sub_layer():
    torch.manual_seed(0)
    norm = tl.AddNorm(D, dropout=0.0).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.normal_()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    sub = nn.Linear(D, D).double()
    def ln(t):
        return nn.functional.layer_norm(t, (D,), norm.weight, norm.bias, norm.eps)

    torch.testing.assert_close(norm(x), ln(x))  # alone: the LayerNorm
    torch.testing.assert_close(norm(x, sub), ln(x + sub(x)))  # post-norm: LayerNorm(x + Sublayer(x))
    norm.norm_first = True
    torch.testing.assert_close(norm(x, sub), x + sub(ln(x)))  # pre-norm: x + Sublayer(LayerNorm(x))


def test_add_norm_drops_the_sub_layer_output_before_the_sum():
    norm = tl.AddNorm(D, dropout=0.5, norm_first=True).train()
    x = torch.zeros(4, 50, D)
    delta = norm(x, lambda h: torch.ones_like(h)) - x  # the dropped sub-layer output, 0 or 1 / (1 - p) = 2
    assert set(delta.unique().tolist()) == {0.0, 2.0}
    assert abs((delta == 0).float().mean().item() - 0.5) < 0.05
    assert torch.equal(norm.eval()(x, lambda h: torch.ones_like(h)), torch.ones_like(x))


@pytest.mark.parametrize("norm_first", [False, True])
def test_state_dict_keys_are_the_checkpoints(norm_first):
    # Checkpoints and the chapters load state_dicts by these names: they must not change.
    mha = ["w_q.weight", "w_q.bias", "w_k.weight", "w_k.bias", "w_v.weight", "w_v.bias", "w_o.weight", "w_o.bias"]
    ff = ["ff.w_1.weight", "ff.w_1.bias", "ff.w_2.weight", "ff.w_2.bias"]
    def norms(n):
        return [f"norm{i}.{w}" for i in range(1, n + 1) for w in ("weight", "bias")]

    enc = [f"self_attn.{k}" for k in mha] + ff + norms(2)
    dec = [f"self_attn.{k}" for k in mha] + [f"cross_attn.{k}" for k in mha] + ff + norms(3)
    final = ["norm.weight", "norm.bias"] if norm_first else []
    assert list(tl.EncoderLayer(D, H, FF, norm_first=norm_first).state_dict()) == enc
    assert list(tl.DecoderLayer(D, H, FF, norm_first=norm_first).state_dict()) == dec
    assert list(tl.Encoder(D, H, FF, 2, norm_first=norm_first).state_dict()) == \
        [f"layers.{i}.{k}" for i in range(2) for k in enc] + final
    assert list(tl.Decoder(D, H, FF, 2, norm_first=norm_first).state_dict()) == \
        [f"layers.{i}.{k}" for i in range(2) for k in dec] + final
