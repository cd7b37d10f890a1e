"""Tests for transformer_lib.rnn: shapes, masks over padding, alignment rows, and the Transformer's
interface (forward, encode, decode) that lets one training loop and one decoder serve both."""
import pytest
import torch

from transformer_lib import data as D
from transformer_lib import vocab as V
from transformer_lib import rnn as R
from transformer_lib.decoding import greedy_decode, translate
from transformer_lib.masks import masked_softmax, padding_mask
from transformer_lib.metrics import accuracy_by_length, exact_match
from transformer_lib.recipes import rnn_config
from transformer_lib.training import TrainConfig, train

VOCAB = V.Vocab("abcdefghijklmnop")


def _batch(n=5, lo=2, hi=9, seed=0):
    pairs = D.make_copy_pairs(n, lo, hi, seed=seed)
    return pairs, *V.collate(pairs, VOCAB, VOCAB)


def _model(attention, **kw):
    torch.manual_seed(0)
    config = R.Seq2SeqConfig(len(VOCAB), len(VOCAB), emb_dim=8, hidden_size=12, attn_size=10, attention=attention, **kw)
    return R.Seq2Seq(config).eval()


# ----------------------------------------------------------------------------- masked softmax

def test_masked_softmax_zero_weight_and_rows_sum_to_one():
    scores = torch.randn(3, 4, 6)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]], dtype=torch.bool)[:, None, :]
    w = masked_softmax(scores, mask)
    assert torch.equal(w[0, :, 3:], torch.zeros(4, 3))
    torch.testing.assert_close(w[:2].sum(-1), torch.ones(2, 4))
    assert torch.equal(w[2], torch.zeros(4, 6))  # a fully masked row is zero, not NaN
    torch.testing.assert_close(w[1], torch.softmax(scores[1], -1))
    with pytest.raises(TypeError, match="mask"):
        masked_softmax(scores, mask.float())


# ----------------------------------------------------------------------------- encoder

@pytest.mark.parametrize("bidirectional", [True, False])
def test_encoder_shapes_and_padding(bidirectional):
    pairs, src, _ = _batch()
    enc = R.GRUEncoder(len(VOCAB), emb_dim=8, hidden_size=12, bidirectional=bidirectional)
    feats, summary, mask = enc(src)
    f = 24 if bidirectional else 12
    assert feats.shape == (5, src.size(1), f) and summary.shape == (5, f) and enc.feature_size == f
    assert torch.equal(mask, src != 0)
    assert torch.equal(feats[~mask], torch.zeros(int((~mask).sum()), f))
    # padding does not change any real feature: encode each sequence alone
    for i, (s, _) in enumerate(pairs):
        alone, alone_summary, _ = enc(torch.tensor([VOCAB.encode(s)]))
        torch.testing.assert_close(feats[i, : len(s)], alone[0])
        torch.testing.assert_close(summary[i], alone_summary[0])


def test_encoder_rejects_empty_and_bad_input():
    enc = R.GRUEncoder(len(VOCAB), emb_dim=8, hidden_size=12)
    with pytest.raises(ValueError, match="src_ids"):
        enc(torch.tensor([[4, 5], [0, 0]]))
    with pytest.raises(ValueError, match="src_ids"):
        enc(torch.tensor([4.0, 5.0]))


# ----------------------------------------------------------------------------- attention

@pytest.mark.parametrize("cls", [R.AdditiveAttention, R.DotProductAttention])
def test_attention_shapes_masks_and_rows(cls):
    torch.manual_seed(0)
    att = cls(7, 11)
    q, keys = torch.randn(4, 7), torch.randn(4, 6, 11)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 3, 1, 5])[:, None]
    context, w = att(q, keys, mask)
    assert context.shape == (4, 11) and w.shape == (4, 6)
    assert torch.equal(w[~mask], torch.zeros(int((~mask).sum())))
    torch.testing.assert_close(w.sum(-1), torch.ones(4))
    torch.testing.assert_close(context, torch.einsum("bt,btf->bf", w, keys))
    # changing the keys at masked positions changes nothing
    keys2 = keys.clone()
    keys2[~mask] = 100.0
    context2, w2 = att(q, keys2, mask)
    torch.testing.assert_close(w2, w)
    torch.testing.assert_close(context2, context)


def test_additive_and_dot_scores_follow_their_formulas():
    torch.manual_seed(0)
    add = R.AdditiveAttention(5, 8, attn_size=6)
    q, keys = torch.randn(2, 5), torch.randn(2, 4, 8)
    # e[b, t] = v . tanh(W_q q_b + W_k a_bt)
    e = torch.tanh((q @ add.W_q.weight.T)[:, None, :] + keys @ add.W_k.weight.T) @ add.v.weight[0]
    torch.testing.assert_close(add.scores(q, keys), e)
    dot = R.DotProductAttention(5, 8)
    # e[b, t] = q_b . (W a_bt)
    torch.testing.assert_close(dot.scores(q, keys), torch.einsum("bq,qk,btk->bt", q, dot.W.weight, keys))
    plain = R.DotProductAttention(8, 8, general=False)
    q8 = torch.randn(2, 8)
    torch.testing.assert_close(plain.scores(q8, keys), torch.einsum("bk,btk->bt", q8, keys))
    with pytest.raises(ValueError, match="general"):
        R.DotProductAttention(5, 8, general=False)


# ----------------------------------------------------------------------------- seq2seq

def test_summary_read_back_from_the_features_equals_the_encoder_summary():
    _, src, _ = _batch()
    for bidirectional in (True, False):
        enc = _model("additive", bidirectional=bidirectional).encoder
        feats, summary, mask = enc(src)
        assert torch.equal(enc.summary_of(feats, mask), summary)


@pytest.mark.parametrize("attention", R.ATTENTION_KINDS)
def test_seq2seq_logits_and_alignment(attention):
    _, src, tgt = _batch()
    model = _model(attention)
    logits = model(src, tgt[:, :-1])
    assert logits.shape == (5, tgt.size(1) - 1, len(VOCAB))
    if attention is None:
        with pytest.raises(ValueError, match="no attention"):
            model.alignment(src, tgt[:, :-1])
        return
    w = model.alignment(src, tgt[:, :-1])
    assert w.shape == (5, tgt.size(1) - 1, src.size(1))  # (batch, T_y, T_x)
    pad = (src == 0)[:, None, :].expand_as(w)
    assert pad.any() and torch.equal(w[pad], torch.zeros(int(pad.sum())))  # exactly zero on padding
    torch.testing.assert_close(w.sum(-1), torch.ones(5, tgt.size(1) - 1))


@pytest.mark.parametrize("attention", R.ATTENTION_KINDS)
def test_padding_does_not_change_outputs(attention):
    pairs, src, tgt = _batch()
    assert (src == 0).any() and (tgt == 0).any()
    model = _model(attention)
    logits = model(src, tgt[:, :-1])
    for i, (s, t) in enumerate(pairs):
        s1, t1 = V.collate([(s, t)], VOCAB, VOCAB)
        alone = model(s1, t1[:, :-1])
        torch.testing.assert_close(logits[i, : len(t) + 1], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attention", R.ATTENTION_KINDS)
def test_decode_of_every_prefix_equals_teacher_forced_forward(attention):
    _, src, tgt = _batch()
    model = _model(attention)
    logits = model(src, tgt[:, :-1])
    memory = model.encode(src)
    assert memory.shape == (5, src.size(1), model.encoder.feature_size)
    for t in range(1, tgt.size(1)):
        # with attention the same steps run in the same order: bit for bit; without, one fused
        # GRU call over a different length may round differently in the last bit
        got = model.decode(tgt[:, :t], memory, padding_mask(src, 0))
        if attention is None:
            torch.testing.assert_close(got, logits[:, :t])
        else:
            assert torch.equal(got, logits[:, :t])


@pytest.mark.parametrize("attention", R.ATTENTION_KINDS)
def test_greedy_decoding_agrees_with_teacher_forcing_on_its_own_output(attention):
    _, src, _ = _batch()
    model = _model(attention)
    out = greedy_decode(model, src, max_len=7)
    ids = out.tokens
    assert ids.shape[0] == 5 and ids.shape[1] <= 7
    tgt_in = torch.cat([torch.full((5, 1), V.BOS_ID), ids[:, :-1]], dim=1)
    logits = model(src, tgt_in)
    steps = ids.shape[1]
    # every output token is the argmax (over the tokens decoding may write) of the forward pass
    allowed = logits.clone()
    allowed[..., [V.PAD_ID, V.BOS_ID]] = float("-inf")
    written = ids != V.PAD_ID
    assert torch.equal(allowed.argmax(-1)[written], ids[written])
    logp = logits.log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1)  # <pad>, <bos>: never written
    torch.testing.assert_close(out.scores, (logp * written).sum(1))
    assert steps >= 1 and written.sum() > 5


@pytest.mark.parametrize("attention", R.ATTENTION_KINDS)
@pytest.mark.parametrize("chunks", [(1, 1, 1, 1, 1, 1), (3, 1, 2), (6,)])
def test_decoding_with_the_cache_gives_the_logits_of_the_whole_prefix(attention, chunks):
    _, src, tgt = _batch()
    model = _model(attention)
    memory, mask = model.encode(src), padding_mask(src, 0)
    full = model.decode(tgt[:, :6], memory, mask)
    cache = model.new_cache(5, src.size(1))
    got, start = [], 0
    for n in chunks:  # the prefix fed in pieces: each call reads only the tokens after the cached ones
        got.append(model.decode(tgt[:, start:start + n], memory, mask, cache=cache))
        start += n
        assert cache[0].length == start
    torch.testing.assert_close(torch.cat(got, 1), full, rtol=0, atol=1e-6)


@pytest.mark.parametrize("attention", R.ATTENTION_KINDS)
@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_and_uncached_decoding_give_the_same_tokens_and_scores(attention, beam_size):
    from transformer_lib.decoding import beam_search
    _, src, _ = _batch(n=7, seed=2)
    model = _model(attention)
    search = (lambda **kw: greedy_decode(model, src, 9, **kw)) if beam_size == 1 else (
        lambda **kw: beam_search(model, src, 9, beam_size, **kw))
    cached, plain = search(use_cache=True), search(use_cache=False)
    assert torch.equal(cached.tokens, plain.tokens)
    torch.testing.assert_close(cached.scores, plain.scores, rtol=0, atol=1e-5)


def test_the_cache_reorders_its_state_and_refuses_what_is_not_its_own():
    _, src, tgt = _batch()
    model = _model("additive")
    memory, mask = model.encode(src), padding_mask(src, 0)
    cache = model.new_cache(5, src.size(1))
    with pytest.raises(ValueError, match="empty"):
        cache[0].reorder(torch.arange(5))
    model.decode(tgt[:, :2], memory, mask, cache=cache)
    state = cache[0].state.clone()
    rows = torch.tensor([4, 4, 0, 1, 2])
    cache[0].reorder(rows)
    assert torch.equal(cache[0].state, state[rows])
    with pytest.raises(ValueError, match="one source row per sequence"):
        cache[0].reorder(torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="rows must have 1 dimensions"):
        cache[0].reorder(rows[None])
    with pytest.raises(ValueError, match="cache holds 5 sequences but tgt has 2"):
        model.decode(tgt[:2, 2:3], memory[:2], cache=cache)
    with pytest.raises(ValueError, match="memory of the cache's first call"):
        model.decode(tgt[:, 2:3], memory + 1, mask, cache=cache)
    with pytest.raises(TypeError, match="new_cache"):
        model.decode(tgt[:, 2:3], memory, cache=[object()])
    with pytest.raises(ValueError, match="batch_size"):
        model.new_cache(0, 4)
    with pytest.raises(ValueError, match="cache holds 3 sequences but tgt has 5"):
        model.decode(tgt[:, :1], memory, mask, cache=model.new_cache(3, src.size(1)))
    with pytest.raises(ValueError, match="memory"):
        model.decode(tgt, torch.zeros(5, 3, 7), cache=model.new_cache(5, 3))


@pytest.mark.parametrize("name", ["copy_none", "copy_none_long", "copy_additive", "date_additive", "date_dot"])
def test_the_shipped_recurrent_models_decode_the_same_with_the_cache(name):
    """The same tokens and scores. With attention the decoder steps one token at a time either way,
    the same calls in the same order: bit for bit. Without attention the uncached decoder reads the
    whole prefix in one GRU call, whose matrix products can round in another order than one step
    at a time: bit for bit on an Intel Xeon, scores up to 1.1e-5 apart (of up to 18) on an AMD
    EPYC, both with AVX512 kernels; the bound, 1e-4, is about 9 times that."""
    from transformer_lib import checkpoints
    from transformer_lib.decoding import beam_search
    model, src_vocab, tgt_vocab, _ = checkpoints.load(checkpoints.CHECKPOINTS / f"{name}.pt")
    if name.startswith("date"):
        pairs, max_len = D.make_date_splits(seed=0).test[::40], 12  # 92 dates across the century
    else:
        pairs, max_len = D.make_copy_pairs(60, 4, 30, seed=5), 32
    src, _ = V.collate(pairs, src_vocab, tgt_vocab)
    for search in (lambda **kw: greedy_decode(model, src, max_len, **kw),
                   lambda **kw: beam_search(model, src, max_len, 4, **kw)):
        cached, plain = search(use_cache=True), search(use_cache=False)
        assert torch.equal(cached.tokens, plain.tokens)
        if model.decoder.attention is not None:
            assert torch.equal(cached.scores, plain.scores)
        else:
            torch.testing.assert_close(cached.scores, plain.scores, rtol=0, atol=1e-4)


def test_bad_arguments():
    with pytest.raises(ValueError, match="attention"):
        R.Seq2SeqConfig(10, 10, attention="cosine")
    with pytest.raises(ValueError, match="hidden_size"):
        R.Seq2SeqConfig(10, 10, hidden_size=0)
    model = _model("additive")
    _, src, tgt = _batch()
    with pytest.raises(ValueError, match="tgt"):
        model(src, tgt[:2])
    with pytest.raises(ValueError, match="tgt_in holds token ids"):
        model(src, tgt + len(VOCAB))
    with pytest.raises(ValueError, match="memory"):
        model.decode(tgt, torch.zeros(5, 3, 7))


# ----------------------------------------------------------------------------- training and evaluation

@pytest.mark.slow
def test_train_trains_a_small_seq2seq_deterministically():
    pairs = D.make_copy_pairs(200, 2, 4, alphabet="abcd", seed=0)
    runs = []
    for _ in range(2):
        loader = V.make_loader(pairs, VOCAB, VOCAB, batch_size=32, seed=3)  # a fresh loader: the same batches
        model = _model("additive").train()
        runs.append(train(model, loader, None, rnn_config(max_steps=150, lr=1e-2)).loss)
    assert runs[0] == runs[1]
    assert sum(runs[0][-10:]) / 10 < 0.5 * sum(runs[0][:10]) / 10
    assert model.training  # train() gives the model back in the mode it came in
    train(model.eval(), loader, None, rnn_config(max_steps=1))
    assert not model.training
    preds = translate(model, [s for s, _ in pairs[:50]], VOCAB, VOCAB, max_len=6)
    assert exact_match(preds, [t for _, t in pairs[:50]]) > 0.5  # chance is far below: 4^-n per string


def test_the_warmup_schedule_needs_the_models_width_which_a_seq2seq_has_not():
    model = _model("dot")
    batches = [V.collate([("ab", "ab")], VOCAB, VOCAB)]
    for cfg in (TrainConfig(max_steps=1, progress=False), TrainConfig(max_steps=1, peak_lr=1e-3, progress=False)):
        with pytest.raises(ValueError, match="needs the model's width.*config.d_model"):
            train(model, batches, None, cfg)
    hist = train(model, batches, None, TrainConfig(max_steps=2, schedule="linear_warmup", warmup=4, progress=False))
    assert hist.step == [1, 2] and hist.lr[1] == pytest.approx(2 * hist.lr[0])


def test_rnn_config_schedule_is_constant_then_linear_to_zero():
    model = _model(None)
    batches = [V.collate([("ab", "ab"), ("c", "c")], VOCAB, VOCAB)]
    lr = train(model, batches, None, rnn_config(max_steps=8)).lr
    assert lr == pytest.approx([1e-3] * 5 + [0.75e-3, 0.5e-3, 0.25e-3])


def test_accuracy_by_length_groups_by_source_length():
    sources, preds, refs = ["abc", "ab", "p", "pa"], ["abc", "ab", "x", "pa"], ["abc", "ba", "p", "pa"]
    assert accuracy_by_length(sources, preds, refs) == {1: 0.0, 2: 0.5, 3: 1.0}
    with pytest.raises(ValueError, match="sources"):
        accuracy_by_length(sources[:2], preds, refs)


def test_draw_seq2seq_draws_the_bottleneck_and_one_alignment_row():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transformer_lib.book.pictures import draw_seq2seq

    ax = draw_seq2seq(list("pqr"), list("xy"))
    assert "c" in [t.get_text() for t in ax.texts]  # the one summary vector
    w = torch.tensor([[0.7, 0.2, 0.1], [0.0, 0.5, 0.5]])
    ax2 = draw_seq2seq(list("pqr"), list("xy"), weights=w, step=1)
    assert "c" not in [t.get_text() for t in ax2.texts]
    with pytest.raises(ValueError, match="weights"):
        draw_seq2seq(list("pqr"), list("xy"), weights=w.T, step=0)
    with pytest.raises(ValueError, match="step"):
        draw_seq2seq(list("pqr"), list("xy"), weights=w, step=2)
    plt.close("all")
