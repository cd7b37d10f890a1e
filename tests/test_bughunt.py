"""The swap points (attention_fn, encoding_fn and the Suspect's other pieces), the planted bugs
and the checks of chapter 15: every check passes the clean model and the plain references, and
fails the bug it targets; the attention checks try several scales by default."""
import copy
import math

import pytest
import torch

import transformer_lib as tl
from transformer_lib.book import bughunt as bh
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
    modules = tl.attention.attention_modules(model).values()
    assert all(m.attention_fn is tl.scaled_dot_product_attention for m in modules)
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


PLAIN = bh.Suspect("plain", bh.plain_attention, bh.plain_encoding, bh.plain_smoothed_loss,
                   bh.plain_padding_mask, bh.plain_shift, bh.plain_greedy)
BUGS = {
    "1": bh.Suspect("1", attention_fn=bh.attention_scaled_by_d_model),
    "2": bh.Suspect("2", attention_fn=bh.attention_fill_tiny),
    "3": bh.Suspect("3", loss=bh.smoothed_loss_log_of_softmax),
    "4": bh.Suspect("4", encoding_fn=bh.encoding_frequency_per_channel),
    "5": bh.Suspect("5", padding_mask_fn=bh.padding_mask_on_queries),
    "6": bh.Suspect("6", shift_fn=bh.target_not_shifted),
    "7": bh.Suspect("7", decode_fn=bh.greedy_dropout_on),
    "8": bh.Suspect("8", attention_fn=bh.attention_fill_1e4),
}  # numbered as chapter 15 numbers them


def test_plain_padding_shift_and_greedy_equal_the_library():
    ids = torch.tensor([[4, 5, 0], [6, 0, 0]])
    assert torch.equal(bh.plain_padding_mask(ids), tl.padding_mask(ids, 0))
    tgt = torch.tensor([[1, 5, 6, 2], [1, 7, 2, 0]])
    for got, want in zip(bh.plain_shift(tgt), bh.library_shift(tgt)):
        assert torch.equal(got, want)
    model = bh.small_model()
    src = torch.randint(3, bh.VOCAB, (3, 5), generator=torch.Generator().manual_seed(0))
    ours, lib = bh.plain_greedy(model, src, 6), bh.library_greedy(model, src, 6)
    # the library stops at <eos> and pads after it; up to there the tokens agree
    for row_ours, row_lib in zip(ours.tolist(), lib.tolist()):
        cut = row_lib.index(bh.EOS) + 1 if bh.EOS in row_lib else len(row_lib)
        assert row_ours[:cut] == row_lib[:cut]


@pytest.mark.parametrize("check", list(bh.CHECKS))
def test_every_check_passes_the_clean_model_and_the_plain_references(check):
    assert bh.CHECKS[check](bh.Suspect())
    assert bh.CHECKS[check](PLAIN)


EXPECTED = {  # bug -> the checks that catch it, at the default scales
    "1": {"torch.nn", "variance"},
    "2": {"torch.nn", "causal", "padding"},
    "3": {"finite loss"},
    "4": {"rotation"},
    "5": {"torch.nn", "padding"},
    "6": {"next token"},
    "7": {"eval mode"},
    "8": {"causal", "padding"},
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_each_bug_is_caught_by_exactly_the_expected_checks(bug):
    row = bh.caught_by([BUGS[bug]], bh.CHECKS)[bug]
    assert {name for name, verdict in row.items() if verdict == "caught"} == EXPECTED[bug]
    assert "error" not in row.values()


def test_the_minus_1e4_fill_is_caught_only_when_the_checks_try_large_scores():
    at_one = bh.caught_by([BUGS["8"]], bh.checks(scales=(1.0,)))["8"]
    assert set(at_one.values()) == {"."}  # at scores of order 1 every check passes
    assert bh.CHECKS["causal"].keywords["scales"] == bh.SCALES and max(bh.SCALES) >= 1e4

    def leaks_at_scale(attention_fn):  # allowed scores near -28000: below the -1e4 fill
        q = torch.full((1, 1, 4, 8), 100.0)
        k = -q
        v = torch.randn(1, 1, 4, 8)
        v2 = v.clone()
        v2[..., 1:, :] += 1.0  # change everything after position 0
        mask = tl.causal_mask(4)
        first = attention_fn(q, k, v, mask)[0][..., 0, :]
        return not torch.allclose(first, attention_fn(q, k, v2, mask)[0][..., 0, :])

    assert leaks_at_scale(bh.attention_fill_1e4)
    assert not leaks_at_scale(tl.scaled_dot_product_attention)
    assert not leaks_at_scale(bh.plain_attention)


def test_scale_queries_multiplies_every_score():
    model = bh.small_model()
    scaled = bh.scale_queries(copy.deepcopy(model), 10.0)
    for name, attn in tl.attention.attention_modules(model).items():
        other = tl.attention.attention_modules(scaled)[name]
        torch.testing.assert_close(other.w_q.weight, 10 * attn.w_q.weight)
        torch.testing.assert_close(other.w_k.weight, attn.w_k.weight)


def test_the_query_side_padding_mask_is_refused_when_lengths_differ():
    # (B, 1, S, 1) cannot broadcast to cross-attention's (B, h, T, S) unless T == S: the
    # library's mask check raises, and caught_by reports "error"
    model = bh.small_model()
    src, tgt = torch.randint(3, bh.VOCAB, (2, 6)), torch.randint(3, bh.VOCAB, (2, 4))
    with pytest.raises(ValueError, match="mask"):
        bh.run(model, BUGS["5"], src, tgt)

    def unequal(suspect):
        bh.run(bh.small_model(), suspect, src, tgt)
        return True

    assert bh.caught_by([BUGS["5"]], {"unequal lengths": unequal})["5"] == {"unequal lengths": "error"}


def test_copies_input_accuracy_is_chance_for_the_shifted_target_and_one_for_the_bug():
    assert bh.copies_input_accuracy(bh.Suspect()) < 0.15
    assert bh.copies_input_accuracy(BUGS["6"]) == 1.0


def test_suspect_pieces_are_checked_when_made():
    with pytest.raises(TypeError, match="shift_fn"):
        bh.Suspect(shift_fn=3)
    with pytest.raises(TypeError, match="decode_fn"):
        bh.Suspect(decode_fn=None)
    with pytest.raises(ValueError, match="scales"):
        bh.checks(scales=())
    with pytest.raises(ValueError, match="scales"):
        bh.checks(scales=(1.0, -2.0))


def test_the_scale_bug_gives_score_variance_one_over_n_heads():
    assert abs(bh.score_variance(BUGS["1"]) - 1 / bh.N_HEADS) < 0.05
    assert abs(bh.score_variance(bh.Suspect()) - 1.0) < 0.1


def test_show_diff_shows_the_one_changed_line():
    for bug in (bh.attention_scaled_by_d_model, bh.attention_fill_tiny, bh.attention_fill_1e4):
        lines = bh.show_diff(bh.plain_attention, bug).splitlines()
        assert len(lines) == 2 and lines[0].startswith("- ") and lines[1].startswith("+ ")
    assert bh.show_diff(bh.plain_encoding, bh.plain_encoding) == ""
    assert "softmax(-1).log()" in bh.show_diff(bh.plain_smoothed_loss, bh.smoothed_loss_log_of_softmax)
    assert bh.show_diff(bh.plain_padding_mask, bh.padding_mask_on_queries).count("\n") == 1
    assert bh.show_diff(bh.plain_shift, bh.target_not_shifted).count("\n") == 1
    assert bh.show_diff(bh.plain_greedy, bh.greedy_dropout_on) == "- model.eval()"


def test_format_table_marks_caught_cells_with_a_check_per_row_and_fits_the_page():
    caught = {"clean (the library)": {"x": ".", "y": ".", "z": "."},
              "4 a bug": {"x": "caught", "y": ".", "z": "error"}}
    lines = bh.format_table(caught).splitlines()
    assert lines[0].split() == ["check", "clean", "4"]
    assert [line.split() for line in lines[1:4]] == [["x", ".", "X"], ["y", ".", "."],
                                                      ["z", ".", "E"]]
    assert lines[-1] == "4 = a bug" and all(len(line) <= 88 for line in lines)
    long_names = [bh.Suspect()] + [bh.Suspect(f"{n} a planted bug with a long name {n}")
                                   for n in range(1, 9)]
    table = bh.caught_by(long_names, {"rotation": bh.rotation_holds})
    text = bh.format_table(table)
    assert max(len(line) for line in text.splitlines()) <= 88
    assert "8 = a planted bug with a long name 8" in " ".join(text.split())
    with pytest.raises(ValueError, match="wider than width=20"):
        bh.format_table(caught, width=20)


@pytest.mark.slow
def test_the_cheat_sheet_of_bug_2_trains_as_well_as_the_clean_model_and_breaks_greedy_output():
    # chapter 15 claims, over 5 seeds and three kernel sets, a training loss below 1.3 times
    # the clean model's (it was lower in 14 of 15 runs) and a greedy exact match below 10%
    clean = bh.train_briefly(bh.Suspect(), steps=120)
    leaky = bh.train_briefly(BUGS["2"], steps=120)
    assert leaky["train loss"] < 1.3 * clean["train loss"]
    assert leaky["greedy"] < 0.1 < leaky["teacher-forced"]
    assert set(clean) == {"train loss", "teacher-forced", "greedy"}
    with pytest.raises(ValueError, match="steps"):
        bh.train_briefly(bh.Suspect(), steps=0)


def cache_agrees(model):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.vocab_size, (2, 9), generator=g)
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache(2)
        pieces = [model(ids[:, a:b], cache=cache) for a, b in [(0, 5), (5, 8), (8, 9)]]
    return torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-5)


def square_only(model):  # never leaves the square case
    ids = torch.randint(0, model.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return torch.allclose(model(ids), model(ids), atol=1e-5)


def test_the_causal_flag_equals_the_library_on_square_passes_only():
    model = bh.small_lm()
    flagged = use_attention(copy.deepcopy(model), bh.attention_causal_flag)
    ids = torch.randint(0, bh.VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(flagged(ids), model(ids))
    assert cache_agrees(model) and not cache_agrees(flagged)


def test_the_causal_flag_is_caught_by_torch_nn_and_refused_by_variance_with_a_reason():
    """It ignores the mask it is given (encoder and cross-attention turn causal) and returns
    no weights: the torch.nn check catches it, the variance check says why it cannot run."""
    flagged = bh.Suspect("9 is_causal flag", attention_fn=bh.attention_causal_flag)
    with pytest.raises(ValueError, match="returned no weights"):
        bh.score_variance(flagged)
    checks = {name: bh.CHECKS[name] for name in ("torch.nn", "variance", "causal")}
    row = bh.caught_by([flagged], checks)[flagged.name]
    assert row == {"torch.nn": "caught", "variance": "error", "causal": "."}
