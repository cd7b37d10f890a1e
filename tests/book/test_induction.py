"""Chapter 18's tools (`book.induction`) and the attention-only block they study (ffn="none")."""
import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib import lm
from transformer_lib.book import induction as ind

ALPHABET = torch.arange(4, 30)


def small_model(n_layers=2, seed=0, **changes):
    torch.manual_seed(seed)
    config = dataclasses.replace(ind.model_config(30, n_layers), max_len=16, **changes)
    return lm.CausalLM(config).eval()


# ----- the attention-only block -----

def test_an_attention_only_block_adds_attention_to_its_input_and_nothing_else():
    layer = tl.EncoderLayer(16, 4, 64, dropout=0.0, norm_first=True, ffn="none").eval()
    assert layer.ff is None and layer.norm2 is None
    x = torch.randn(2, 5, 16)
    mask = tl.causal_mask(5)
    normed = F.layer_norm(x, (16,), layer.norm1.weight, layer.norm1.bias, layer.norm1.eps)
    expected = x + layer.self_attn(normed, normed, normed, mask)
    torch.testing.assert_close(layer(x, mask), expected)
    with_ffn = tl.EncoderLayer(16, 4, 64, norm_first=True)
    assert sum(p.numel() for p in layer.parameters()) < sum(p.numel() for p in with_ffn.parameters())


def test_an_attention_only_model_has_attention_norms_and_embeddings_only():
    model = small_model()
    names = {n.split(".")[2] for n, _ in model.named_parameters() if n.startswith("layers.")}
    assert names == {"self_attn", "norm1"}
    assert model(torch.randint(0, 30, (2, 9))).shape == (2, 9, 30)


def test_match_d_ff_refuses_a_model_without_a_feed_forward_network():
    with pytest.raises(ValueError, match="ffn='none'"):
        lm.match_d_ff(ind.model_config(30), 10_000)


def test_the_recipe_is_attention_only_with_learned_positions():
    config, cfg = ind.model_config(50), ind.train_config()
    assert (config.ffn, config.positions, config.scale_embeddings, config.max_len) == ("none", "learned", False,
                                                                                      ind.LENGTH)
    assert (cfg.schedule, cfg.lr, cfg.label_smoothing) == ("constant", 3e-3, 0.0)


# ----- data -----

def test_repeated_sequences_repeat_their_first_half_with_tokens_of_the_alphabet():
    seqs = ind.repeated_sequences(ALPHABET, 5, 7, seed=3)
    assert seqs.shape == (5, 14)
    assert torch.equal(seqs[:, :7], seqs[:, 7:])
    assert torch.isin(seqs, ALPHABET).all()
    assert torch.equal(seqs, ind.repeated_sequences(ALPHABET, 5, 7, seed=3))
    assert not torch.equal(seqs, ind.repeated_sequences(ALPHABET, 5, 7, seed=4))


@pytest.mark.parametrize("kwargs, message", [
    (dict(alphabet=torch.tensor([1.0, 2.0])), "alphabet must be a 1-D tensor"),
    (dict(alphabet=torch.tensor([3])), "at least 2 tokens"),
    (dict(n=0), "n must be an integer >= 1"),
    (dict(period=1), "period must be an integer >= 2"),
])
def test_repeated_sequences_name_a_bad_argument(kwargs, message):
    args = dict(alphabet=ALPHABET, n=2, period=4) | kwargs
    with pytest.raises(ValueError, match=message):
        ind.repeated_sequences(**args)


@settings(max_examples=15, deadline=None)
@given(length=st.integers(8, 40), seed=st.integers(0, 500), min_repeat=st.integers(2, 4))
def test_every_repeated_row_holds_a_segment_then_its_copy_at_a_varying_offset(length, seed, min_repeat):
    ids = torch.arange(100, 400)  # text tokens outside the alphabet
    loader = ind.induction_windows(ids, ALPHABET, 6, length, 3, p_repeat=1.0, min_repeat=min_repeat, seed=seed)
    for x, y in loader:
        assert x.shape == y.shape == (6, length)
        assert torch.equal(x[:, 1:], y[:, :-1])
        full = torch.cat([x, y[:, -1:]], 1)
        for row in full:
            r = int(torch.isin(row, ALPHABET).sum()) // 2  # the segment and its copy
            assert min_repeat <= r <= length // 2
            assert torch.equal(row[:r], row[r:2 * r]) and torch.isin(row[:2 * r], ALPHABET).all()
            assert not torch.isin(row[2 * r:], ALPHABET).any()  # then the text window


def test_text_rows_are_windows_of_the_text_and_every_pass_reads_the_same_batches():
    ids = torch.arange(100, 400)
    loader = ind.induction_windows(ids, ALPHABET, 4, 12, 3, p_repeat=0.0, min_repeat=4, seed=1)
    first, again = list(loader), list(loader)
    assert len(first) == len(loader) == 3
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, again))
    for x, _ in first:
        assert torch.equal(x[:, 1:] - x[:, :-1], torch.ones(4, 11, dtype=torch.long))  # consecutive text


@pytest.mark.parametrize("kwargs, message", [
    (dict(ids=torch.zeros(2, 3, dtype=torch.long)), "ids must be a 1-D tensor"),
    (dict(p_repeat=1.5), "p_repeat must be a probability"),
    (dict(min_repeat=7), "min_repeat=7 must be at most length // 2 = 6"),
    (dict(batch_size=0), "batch_size must be an integer >= 1"),
    (dict(ids=torch.arange(10)), "too few for windows of length 12"),
])
def test_induction_windows_name_a_bad_argument(kwargs, message):
    args = dict(ids=torch.arange(100, 400), alphabet=ALPHABET, batch_size=2, length=12, steps=2, min_repeat=4) | kwargs
    with pytest.raises(ValueError, match=message):
        ind.induction_windows(**args)


# ----- scores from attention weights -----

def heads_of(*patterns):
    return torch.stack(patterns)[None]  # (1, n_heads, T, T)


def test_previous_token_score_is_one_for_a_head_that_looks_one_back():
    T = 6
    previous = torch.diag(torch.ones(T - 1), -1)
    previous[0, 0] = 1.0
    uniform = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    score = ind.previous_token_score(heads_of(previous, uniform, torch.eye(T)))
    expected_uniform = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)
    torch.testing.assert_close(score, torch.tensor([1.0, expected_uniform, 0.0]))


def test_induction_score_is_one_for_a_head_that_looks_at_the_token_after_the_earlier_copy():
    period, T = 4, 8
    w = torch.eye(T)
    for i in range(period, T):
        w[i] = 0
        w[i, i - period + 1] = 1.0
    score = ind.induction_score(heads_of(w, torch.eye(T)), period)
    torch.testing.assert_close(score, torch.tensor([1.0, 0.0]))
    shifted = torch.roll(w, 1, dims=1)  # one position too far right: the copy of the current token
    assert ind.induction_score(heads_of(shifted), period).item() == 0.0


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 1000), T=st.integers(4, 12), heads=st.integers(1, 4), batch=st.integers(1, 3))
def test_scores_of_any_causal_attention_lie_between_zero_and_one(seed, T, heads, batch):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, heads, T, T, generator=g).masked_fill(~tl.causal_mask(T), float("-inf"))
    w = scores.softmax(-1)
    for s in (ind.previous_token_score(w), ind.induction_score(w, T // 2)):
        assert s.shape == (heads,) and bool(((s >= 0) & (s <= 1)).all())


@pytest.mark.parametrize("call, message", [
    (lambda: ind.previous_token_score(torch.rand(3, 4, 5)), r"\(\.\.\., n_heads, T, T\)"),
    (lambda: ind.induction_score(torch.rand(2, 6, 6), 4), "fewer than 2 \\* period = 8"),
    (lambda: ind.induction_score(torch.rand(2, 6, 6), 1), "period must be an integer >= 2"),
])
def test_scores_name_bad_weights(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ----- copying -----

def test_copying_score_is_one_for_a_head_that_copies_and_minus_one_for_one_that_suppresses():
    model = small_model(n_layers=1)
    attn = model.layers[0].self_attn
    with torch.no_grad():
        W = torch.randn(64, 16)  # head 0 reads through W and writes back through W^T: E W W^T E^T
        attn.w_v.weight[:16] = W.T
        attn.w_o.weight[:, :16] = W
        attn.w_v.weight[16:32] = W.T  # head 1 writes back through -W^T
        attn.w_o.weight[:, 16:32] = -W
    # E W W^T E^T is positive semi-definite: every eigenvalue >= 0 (norm gains are 1 at init)
    scores = ind.copying_score(model, 0)
    torch.testing.assert_close(scores[:2], torch.tensor([1.0, -1.0]), atol=1e-4, rtol=0)
    assert scores.shape == (4,)
    assert ind.copying_score(model, 0, ALPHABET).shape == (4,)


def test_copying_score_names_a_bad_layer():
    with pytest.raises(ValueError, match=r"layer must be an integer in \[0, 1\]"):
        ind.copying_score(small_model(), 2)
    with pytest.raises(TypeError, match="CausalLM"):
        ind.copying_score(torch.nn.Linear(2, 2), 0)


# ----- losses -----

def test_half_losses_are_the_mean_losses_of_the_two_halves():
    model = small_model()
    seqs = ind.repeated_sequences(ALPHABET, 3, 8, seed=1)
    with torch.no_grad():
        loss = F.cross_entropy(model(seqs[:, :-1]).transpose(1, 2), seqs[:, 1:], reduction="none")
    first, repeat = ind.half_losses(model, seqs)
    assert first == pytest.approx(loss[:, :7].mean().item(), rel=1e-5)
    assert repeat == pytest.approx(loss[:, 8:].mean().item(), rel=1e-5)
    with pytest.raises(ValueError, match="2 \\* period"):
        ind.half_losses(model, seqs[:, :-1])


def test_in_context_score_is_late_loss_minus_early_loss():
    model = small_model()
    windows = torch.randint(0, 30, (4, 17))
    with torch.no_grad():
        loss = F.cross_entropy(model(windows[:, :-1]).transpose(1, 2), windows[:, 1:], reduction="none").mean(0)
    got = ind.in_context_score(model, windows, (0, 4), (10, 16))
    assert got == pytest.approx((loss[10:16].mean() - loss[0:4].mean()).item(), rel=1e-5, abs=1e-6)
    with pytest.raises(ValueError, match="late must be"):
        ind.in_context_score(model, windows, (0, 4), (10, 17))


# ----- ablation -----

def test_ablating_every_head_equals_zeroing_the_output_projections_and_the_hooks_go_away():
    model = small_model()
    x = torch.randint(0, 30, (2, 10))
    before = model(x)
    silenced = copy.deepcopy(model)
    with torch.no_grad():
        for layer in silenced.layers:
            layer.self_attn.w_o.weight.zero_()
    with ind.ablate_heads(model, [(layer, head) for layer in range(2) for head in range(4)]):
        torch.testing.assert_close(model(x), silenced(x))
    torch.testing.assert_close(model(x), before)


def test_ablating_one_head_changes_the_output_only_through_that_head():
    model = small_model(n_layers=1)
    x = torch.randint(0, 30, (2, 10))
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.layers[0].self_attn.w_o.weight[:, 16:32] = 0  # head 1's columns of W_O
    with ind.ablate_heads(model, [(0, 1)]):
        torch.testing.assert_close(model(x), other(x))
        assert not torch.allclose(model(x), small_model(n_layers=1)(x))


def test_hooks_are_removed_even_when_the_block_raises():
    model = small_model()
    x = torch.randint(0, 30, (1, 6))
    before = model(x)
    with pytest.raises(RuntimeError, match="inside"):
        with ind.ablate_heads(model, [(0, 0)]):
            raise RuntimeError("inside")
    torch.testing.assert_close(model(x), before)


@pytest.mark.parametrize("heads, message", [
    ([(2, 0)], r"layer must be an integer in \[0, 1\]"),
    ([(0, 4)], r"head must be an integer in \[0, 3\]"),
    ([0], "heads must be \\(layer, head\\) pairs"),
])
def test_ablate_heads_names_a_bad_head(heads, message):
    with pytest.raises(ValueError, match=message):
        with ind.ablate_heads(small_model(), heads):
            pass


# ----- the in-context shift, and attention with queries and keys from two streams -----

def test_in_context_shift_is_the_mean_after_minus_the_mean_before():
    curve = {"step": list(range(0, 1000, 100)), "icl": [0.0] * 5 + [-1.0] * 5}
    assert ind.in_context_shift(curve, 500) == -1.0
    assert ind.in_context_shift(curve, 400, k=2) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="evaluations before step 100"):
        ind.in_context_shift(curve, 100)
    with pytest.raises(ValueError, match="not one of the curve's evaluation steps"):
        ind.in_context_shift(curve, 150)


def test_attention_from_one_stream_is_the_layers_own_attention():
    model = small_model()
    ids = torch.randint(0, 30, (3, 12))
    with torch.no_grad(), tl.record_attention(model) as weights:
        model(ids)
    for layer in range(2):
        x = ind.stream_into(model, ids, layer)
        torch.testing.assert_close(ind.attention_weights(model, layer, x, x),
                                   weights[f"layers.{layer}.self_attn"])


def test_the_stream_into_a_layer_feels_an_ablation_before_it_and_the_keys_follow_their_stream():
    model = small_model()
    ids = torch.randint(0, 30, (2, 10))
    on = ind.stream_into(model, ids, 1)
    with ind.ablate_heads(model, [(0, 1)]):
        off = ind.stream_into(model, ids, 1)
    assert not torch.allclose(on, off)
    torch.testing.assert_close(ind.stream_into(model, ids, 0), ind.stream_into(model, ids, 0))
    mixed = ind.attention_weights(model, 1, on, off)
    assert not torch.allclose(mixed, ind.attention_weights(model, 1, on, on))
    torch.testing.assert_close(mixed.sum(-1), torch.ones(2, 4, 10))


def test_attention_weights_refuses_streams_of_different_shapes_and_rotary_layers():
    model = small_model()
    x = torch.randn(2, 5, 64)
    with pytest.raises(ValueError, match="both be \\(B, T, d_model\\)"):
        ind.attention_weights(model, 1, x, x[:, :4])
    with pytest.raises(ValueError, match="without rotary positions"):
        ind.attention_weights(small_model(positions="rope"), 0, x, x)


def test_the_held_out_sets_are_fixed_and_one_evaluation_appends_to_every_list():
    held = torch.arange(100, 400)
    test, windows = ind.held_out_sets(ALPHABET, held)
    assert test.shape == (256, ind.LENGTH) and windows.shape == (512, ind.LENGTH + 1)
    again = ind.held_out_sets(ALPHABET, held)
    assert torch.equal(test, again[0]) and torch.equal(windows, again[1])
    assert torch.equal(windows[:, 1:] - windows[:, :-1], torch.ones(512, ind.LENGTH, dtype=torch.long))
    with pytest.raises(ValueError, match="held_ids must be a 1-D tensor"):
        ind.held_out_sets(ALPHABET, torch.arange(10))
    model = lm.CausalLM(ind.model_config(400)).eval()
    curve = {"step": [], "first": [], "repeat": [], "icl": []}
    ind.measure(model, curve, 7, test[:4], windows[:4])
    assert curve["step"] == [7]
    assert curve["first"] == [pytest.approx(ind.half_losses(model, test[:4])[0])]
    assert curve["icl"] == [pytest.approx(ind.in_context_score(model, windows[:4], ind.EARLY, ind.LATE))]
