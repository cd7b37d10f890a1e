"""Today's decoder parts (chapter 16), each checked against its definition and against PyTorch
where PyTorch has it: RMSNorm, rotary positions, SwiGLU, no biases, untied output."""
from __future__ import annotations

import math

import pytest
import torch

import transformer_lib as tl
from transformer_lib import lm
from transformer_lib.residual import AddRMSNorm, make_norm


def test_rms_norm_equals_pytorch_and_drops_the_mean_and_the_bias():
    x = torch.randn(3, 5, 16, dtype=torch.float64) + 2.0
    ours = AddRMSNorm(16, eps=1e-6).double()
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
    theirs = torch.nn.RMSNorm(16, eps=1e-6).double()
    theirs.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(x), theirs(x))
    by_hand = x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * ours.weight
    torch.testing.assert_close(ours(x), by_hand)
    assert [name for name, _ in ours.named_parameters()] == ["weight"]
    assert ours(x).mean(-1).abs().max() > 0.1  # no mean subtracted: LayerNorm would give 0
    assert isinstance(make_norm("rms", 16), AddRMSNorm)


def test_rotary_embedding_is_a_rotation_whose_scores_depend_on_the_offset_only():
    rope = tl.RotaryEmbedding(8)
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    def rows(v):  # the same vector at every position
        return v.expand(64, 8)

    q_rot, k_rot = rope(rows(q)), rope(rows(k))
    torch.testing.assert_close(q_rot.norm(dim=-1), q.norm().expand(64))  # lengths kept
    for offset in (0, 3, 17):
        scores = torch.stack([q_rot[m] @ k_rot[m - offset] for m in range(offset, 64)])
        torch.testing.assert_close(scores, scores[0].expand_as(scores), atol=1e-12, rtol=0)
    scores_at = [q_rot[m] @ k_rot[0] for m in (1, 2)]
    assert not math.isclose(scores_at[0], scores_at[1])  # but it does change with the offset


def test_rotary_embedding_equals_its_complex_number_form_and_counts_from_start():
    rope = tl.RotaryEmbedding(8)
    x = torch.randn(2, 3, 10, 8, dtype=torch.float64)
    z = torch.view_as_complex(x.reshape(2, 3, 10, 4, 2).contiguous())  # pairs (2i, 2i+1) as complex numbers
    theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    turn = torch.polar(torch.ones(10, 4, dtype=torch.float64), (torch.arange(5, 15)[:, None] * theta))
    expected = torch.view_as_real(z * turn).flatten(-2)
    torch.testing.assert_close(rope(x, start=5), expected)
    with pytest.raises(ValueError, match="start"):
        rope(x, start=-1)
    with pytest.raises(ValueError, match="d_k must be even"):
        tl.RotaryEmbedding(7)


def test_swiglu_with_two_thirds_of_d_ff_keeps_the_parameter_count():
    relu, swiglu = tl.FeedForward(48, 192), tl.SwiGLU(48, 128)
    def matrices(m):
        return sum(p.numel() for p in m.parameters() if p.dim() == 2)

    assert matrices(relu) == matrices(swiglu) == 2 * 48 * 192  # three 48 x 128 matrices = two 48 x 192
    assert tl.count_parameters(swiglu) - tl.count_parameters(relu) == 2 * 128 - 192  # only the biases differ
    x = torch.randn(2, 3, 48)
    s = swiglu
    torch.testing.assert_close(s(x), s.w_2(torch.nn.functional.silu(s.w_gate(x)) * s.w_1(x)))


def test_no_bias_means_no_bias_anywhere_and_untied_output_adds_one_matrix():
    base = dict(vocab_size=30, d_model=16, n_heads=4, d_ff=32, n_layers=2, max_len=16)
    plain = lm.CausalLM(lm.CausalLMConfig(**base, bias=False, norm="rms"))
    assert not [n for n, _ in plain.named_parameters() if n.endswith("bias")]
    tied = lm.CausalLM(lm.CausalLMConfig(**base))
    untied = lm.CausalLM(lm.CausalLMConfig(**base, tie_output=False))
    assert tied.out.weight is tied.embed.weight and untied.out.weight is not untied.embed.weight
    assert tl.count_parameters(untied) - tl.count_parameters(tied) == 30 * 16


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "rope", "none"])
def test_every_positional_scheme_keeps_the_model_causal(positions):
    torch.manual_seed(0)
    model = lm.CausalLM(lm.CausalLMConfig(20, d_model=16, n_heads=4, d_ff=32, max_len=16, positions=positions))
    ids = torch.randint(0, 20, (2, 10))
    changed = ids.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 20
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert torch.equal(a[:, :6], b[:, :6]) and not torch.allclose(a[:, 6:], b[:, 6:])


def test_without_positions_one_layer_cannot_tell_order_but_rope_or_a_second_layer_can():
    # One causal layer without positions sees its prefix as a set; RoPE sees the order; so does a
    # second layer, because the first layer's outputs at earlier positions saw different prefixes
    # (Haviv et al. 2022: causal language models learn positions without an encoding).
    ids = torch.tensor([[3, 4, 5, 6]])
    swapped = torch.tensor([[4, 3, 5, 6]])  # the first two tokens exchanged
    for positions, n_layers, order_blind in (("none", 1, True), ("rope", 1, False), ("none", 2, False)):
        torch.manual_seed(0)
        model = lm.CausalLM(lm.CausalLMConfig(20, d_model=16, n_heads=4, d_ff=32, max_len=16, n_layers=n_layers,
                                              positions=positions)).double()
        with torch.no_grad():
            last = model(ids)[0, -1], model(swapped)[0, -1]
        assert torch.allclose(*last, atol=1e-12) == order_blind, (positions, n_layers)


def test_causal_mask_for_new_queries_after_a_cache():
    mask = tl.causal_mask(2, k_len=5)
    assert mask.tolist() == [[True, True, True, True, False], [True] * 5]
    assert torch.equal(tl.causal_mask(4, k_len=4), tl.causal_mask(4))
    with pytest.raises(ValueError, match="k_len"):
        tl.causal_mask(3, k_len=2)


def test_embeddings_scale_and_add_positions_from_start():
    torch.manual_seed(0)
    embed = tl.Embeddings(10, 8, max_len=20)
    ids = torch.tensor([[1, 2, 3]])
    expected = embed.weight[ids] * math.sqrt(8) + tl.sinusoidal_encoding(20, 8)[4:7]
    torch.testing.assert_close(embed(ids, start=4), expected)
    unscaled = tl.Embeddings(10, 8, positions="none", scale=False)
    torch.testing.assert_close(unscaled(ids), unscaled.weight[ids])
