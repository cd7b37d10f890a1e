"""The swap points (attention_fn, encoding_fn), the planted bugs and the checks of chapter 15:
every check passes the clean model and the plain references, and fails the bug it targets."""
import copy
import math

import pytest
import torch

import transformer_lib as tl
from transformer_lib import bughunt as bh
from transformer_lib.attention import use_attention
from transformer_lib.positional import PositionalEncoding


def test_default_attention_fn_keeps_the_model_bit_identical():
    model = bh.small_model()
    swapped = use_attention(copy.deepcopy(model), tl.scaled_dot_product_attention)
    src, tgt = torch.randint(1, bh.VOCAB, (2, 5)), torch.randint(1, bh.VOCAB, (2, 6))
    with torch.no_grad():
        assert torch.equal(model(src, tgt), swapped(src, tgt))
    assert list(model.state_dict()) == list(swapped.state_dict())


def test_a_custom_attention_fn_is_called_by_every_module_and_recorded():
    calls = []

    def counting(q, k, v, mask=None, dropout=None):
        calls.append(q.shape)
        return tl.scaled_dot_product_attention(q, k, v, mask, dropout)

    model = use_attention(bh.small_model(), counting)
    src, tgt = torch.randint(1, bh.VOCAB, (2, 5)), torch.randint(1, bh.VOCAB, (2, 6))
    with tl.record_attention(model) as weights:
        model(src, tgt)
    assert len(calls) == 6  # 2 encoder self, 2 decoder self, 2 cross
    assert weights["decoder.layers.1.cross_attn"].shape == (2, bh.N_HEADS, 6, 5)


def test_swap_points_reject_what_is_not_a_function():
    with pytest.raises(TypeError, match="attention_fn"):
        tl.MultiHeadAttention(8, 2, attention_fn="softmax")
    with pytest.raises(TypeError, match="attention_fn"):
        use_attention(bh.small_model(), None)
    with pytest.raises(ValueError, match="MultiHeadAttention"):
        use_attention(torch.nn.Linear(2, 2), tl.scaled_dot_product_attention)
    with pytest.raises(TypeError, match="encoding_fn"):
        PositionalEncoding(8, 10, encoding_fn=3)
    with pytest.raises(ValueError, match="max_len=10"):
        PositionalEncoding(8, 10, encoding_fn=lambda n, d: torch.zeros(n, d + 1))


def test_positional_encoding_uses_its_encoding_fn_and_defaults_to_the_paper():
    assert torch.equal(PositionalEncoding(16, 30).pe, tl.sinusoidal_encoding(30, 16))
    ones = PositionalEncoding(16, 30, encoding_fn=lambda n, d: torch.ones(n, d))
    assert torch.equal(ones(torch.zeros(1, 4, 16)), torch.ones(1, 4, 16))


def test_plant_copies_and_leaves_the_original_alone():
    model = bh.small_model()
    planted = bh.plant(model, bh.Suspect(attention_fn=bh.attention_fill_tiny, encoding_fn=bh.plain_encoding))
    assert all(m.attention_fn is tl.scaled_dot_product_attention for m in tl.attention.attention_modules(model).values())
    assert all(m.attention_fn is bh.attention_fill_tiny for m in tl.attention.attention_modules(planted).values())
    for (name, p), q in zip(model.state_dict().items(), planted.state_dict().values()):
        assert torch.equal(p, q), name


def test_plant_swaps_the_positional_table_of_both_embeddings():
    model = bh.small_model()
    planted = bh.plant(model, bh.Suspect(encoding_fn=lambda n, d: torch.ones(n, d)))
    for embed in (planted.src_embed, planted.tgt_embed):
        assert torch.equal(embed.pos.pe, torch.ones(64, bh.D_MODEL))
    src, tgt = torch.tensor([[3, 4, 5]]), torch.tensor([[1, 6, 7]])
    with torch.no_grad():
        assert not torch.allclose(model(src, tgt), planted(src, tgt))  # the swap reaches the output


def test_plain_references_equal_the_library():
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64) for _ in range(3))
    mask = tl.causal_mask(5)
    torch.testing.assert_close(bh.plain_attention(q, k, v, mask)[0], tl.scaled_dot_product_attention(q, k, v, mask)[0])
    torch.testing.assert_close(bh.plain_encoding(40, 16), tl.sinusoidal_encoding(40, 16))
    logits, target = torch.randn(4, 6, 11), torch.randint(0, 11, (4, 6))
    target[0, 0] = 5  # at least one non-padding target
    q_entropy_free = tl.LabelSmoothingLoss(0.1, pad_id=0)(logits, target) - bh.plain_smoothed_loss(logits, target)
    eps, others = 0.1, 10  # q puts 1 - eps + eps/10 on the answer and eps/10 on 9 others
    hi, lo = 1 - eps + eps / others, eps / others
    entropy = -(hi * math.log(hi) + (others - 1) * lo * math.log(lo))
    assert abs(q_entropy_free.item() - entropy) < 1e-5


@pytest.mark.parametrize("check", list(bh.CHECKS))
def test_every_check_passes_the_clean_model_and_the_plain_references(check):
    assert bh.CHECKS[check](bh.Suspect())
    assert bh.CHECKS[check](bh.Suspect("plain", bh.plain_attention, bh.plain_encoding, bh.plain_smoothed_loss))


@pytest.mark.parametrize("check, suspect", [
    ("torch.nn", bh.Suspect(attention_fn=bh.attention_scaled_by_d_model)),
    ("variance", bh.Suspect(attention_fn=bh.attention_scaled_by_d_model)),
    ("torch.nn", bh.Suspect(attention_fn=bh.attention_fill_tiny)),
    ("causal", bh.Suspect(attention_fn=bh.attention_fill_tiny)),
    ("finite loss", bh.Suspect(loss=bh.smoothed_loss_log_of_softmax)),
    ("rotation", bh.Suspect(encoding_fn=bh.encoding_frequency_per_channel)),
])
def test_each_check_fails_the_bug_it_targets(check, suspect):
    assert not bh.CHECKS[check](suspect)


def test_no_check_catches_the_minus_1e4_mask_but_a_test_at_scale_does():
    suspect = bh.Suspect(attention_fn=bh.attention_fill_1e4)
    assert not any(bh.caught_by([suspect], bh.CHECKS)[suspect.name].values())

    def leaks_at_scale(attention_fn):  # allowed scores near -28000: below the -1e4 fill
        q = torch.full((1, 1, 4, 8), 100.0)
        k = -q
        v = torch.randn(1, 1, 4, 8)
        v2 = v.clone()
        v2[..., 1:, :] += 1.0  # change everything after position 0
        mask = tl.causal_mask(4)
        return not torch.allclose(attention_fn(q, k, v, mask)[0][..., 0, :], attention_fn(q, k, v2, mask)[0][..., 0, :])

    assert leaks_at_scale(bh.attention_fill_1e4)
    assert not leaks_at_scale(tl.scaled_dot_product_attention)
    assert not leaks_at_scale(bh.plain_attention)


def test_the_scale_bug_gives_score_variance_one_over_n_heads():
    assert abs(bh.score_variance(bh.Suspect(attention_fn=bh.attention_scaled_by_d_model)) - 1 / bh.N_HEADS) < 0.05
    assert abs(bh.score_variance(bh.Suspect()) - 1.0) < 0.1


def test_show_diff_shows_the_one_changed_line():
    for bug in (bh.attention_scaled_by_d_model, bh.attention_fill_tiny, bh.attention_fill_1e4):
        lines = bh.show_diff(bh.plain_attention, bug).splitlines()
        assert len(lines) == 2 and lines[0].startswith("- ") and lines[1].startswith("+ ")
    assert bh.show_diff(bh.plain_encoding, bh.plain_encoding) == ""
    assert "softmax(-1).log()" in bh.show_diff(bh.plain_smoothed_loss, bh.smoothed_loss_log_of_softmax)


def test_format_table_marks_caught_cells():
    text = bh.format_table({"a bug": {"x": True, "y": False}})
    assert text.splitlines()[1].split() == ["a", "bug", "caught", "."]
