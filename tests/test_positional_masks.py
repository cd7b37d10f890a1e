"""Sinusoidal and learned positions; masks."""
import math

import pytest
import torch

import transformer_lib as tl
from transformer_lib.positional import rotation_for_offset


def test_sinusoidal_matches_the_paper_formula():
    pe = tl.sinusoidal_encoding(50, 16, dtype=torch.float64)
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert math.isclose(pe[pos, 2 * i], math.sin(angle), abs_tol=1e-12)
            assert math.isclose(pe[pos, 2 * i + 1], math.cos(angle), abs_tol=1e-12)


def test_relative_position_is_a_rotation_that_depends_on_the_offset_only():
    pe = tl.sinusoidal_encoding(100, 32, dtype=torch.float64)
    for k in (1, 5, 17):
        t = rotation_for_offset(k, 32, dtype=torch.float64)
        torch.testing.assert_close(pe[:-k] @ t.T, pe[k:], atol=1e-12, rtol=0)
        torch.testing.assert_close(t @ t.T, torch.eye(32, dtype=torch.float64), atol=1e-12, rtol=0)


def test_dot_products_depend_only_on_the_offset():
    pe = tl.sinusoidal_encoding(60, 64, dtype=torch.float64)
    gram = pe @ pe.T
    for k in (0, 3, 10):
        diag = torch.diagonal(gram, offset=k)
        assert (diag - diag[0]).abs().max() < 1e-10


def test_positional_encoding_module_adds_the_table():
    module = tl.PositionalEncoding(8, max_len=20)
    x = torch.zeros(2, 5, 8)
    torch.testing.assert_close(module(x), tl.sinusoidal_encoding(5, 8).expand(2, 5, 8))
    with pytest.raises(ValueError, match="max_len=20"):
        module(torch.zeros(1, 21, 8))


def test_learned_positions_cannot_extrapolate():
    module = tl.LearnedPositionalEncoding(8, max_len=10)
    assert module(torch.zeros(1, 10, 8)).shape == (1, 10, 8)
    with pytest.raises(ValueError, match="max_len=10"):
        module(torch.zeros(1, 11, 8))


def test_masks():
    causal = tl.causal_mask(4)
    assert causal.dtype == torch.bool and causal.shape == (4, 4)
    assert causal.tolist() == [[True, False, False, False], [True, True, False, False],
                               [True, True, True, False], [True, True, True, True]]
    ids = torch.tensor([[5, 6, 0], [7, 0, 0]])
    pad = tl.padding_mask(ids, pad_id=0)
    assert pad.shape == (2, 1, 1, 3)
    assert pad[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]
    tgt = tl.target_mask(ids, pad_id=0)
    assert tgt.shape == (2, 1, 3, 3)
    assert tgt[1, 0].tolist() == [[True, False, False], [True, False, False], [True, False, False]]


def test_to_torch_mask_inverts_the_convention_for_pytorch_modules():
    from torch import nn

    from transformer_lib.masks import to_torch_mask

    mask = tl.causal_mask(5)
    assert torch.equal(to_torch_mask(mask), ~mask) and to_torch_mask(None) is None
    # the converted mask gives PyTorch's module the same answer as ours gets from our mask
    mha = nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64).eval()
    ours = tl.from_torch(mha).eval()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    theirs, _ = mha(x, x, x, attn_mask=to_torch_mask(mask), need_weights=False)
    assert (ours(x, x, x, mask) - theirs).abs().max() < 1e-12
    unconverted, _ = mha(x, x, x, attn_mask=mask, need_weights=False)  # the classic mistake
    assert not torch.allclose(unconverted.nan_to_num(), theirs)
    with pytest.raises(TypeError, match="mask: expected a boolean tensor"):
        to_torch_mask(mask.float())


def test_a_learned_positional_table_starts_as_documented_alone_and_inside_a_model():
    # Alone: N(0, 1/d_model). Inside a model, init_weights makes it Xavier-uniform like every
    # matrix (documented in both places: chapter 16 reads the small table this gives).
    torch.manual_seed(0)
    alone = tl.LearnedPositionalEncoding(64, max_len=512).pe.weight
    assert abs(alone.std().item() - 64**-0.5) < 0.01
    model = tl.lm.CausalLM(tl.lm.CausalLMConfig(50, d_model=64, max_len=512, positions="learned"))
    inside = model.embed.pos.pe.weight
    xavier = (2 / (512 + 64)) ** 0.5
    assert abs(inside.std().item() - xavier) < 0.005 and inside.abs().max() <= (6 / (512 + 64)) ** 0.5
