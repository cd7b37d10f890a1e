"""Tests for transformer_lib.rnn: shapes, masks over padding, alignment rows, helpers."""
import pytest
import torch

from transformer_lib import data as D
from transformer_lib import rnn as R
from transformer_lib.masks import masked_softmax

VOCAB = D.Vocab("abcdefghijklmnop")


def _batch(n=5, lo=2, hi=9, seed=0):
    pairs = D.make_copy_pairs(n, lo, hi, seed=seed)
    return pairs, *D.collate(pairs, VOCAB, VOCAB)


def _model(attention, **kw):
    torch.manual_seed(0)
    return R.Seq2Seq(len(VOCAB), len(VOCAB), emb_dim=8, hidden_size=12, attn_size=10, attention=attention, **kw).eval()


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

@pytest.mark.parametrize("attention", R.ATTENTION_KINDS)
def test_seq2seq_shapes_and_alignment(attention):
    pairs, src, tgt = _batch()
    model = _model(attention)
    logits, w = model(src, tgt[:, :-1])
    assert logits.shape == (5, tgt.size(1) - 1, len(VOCAB))
    if attention is None:
        assert w is None
        return
    assert w.shape == (5, tgt.size(1) - 1, src.size(1))  # (batch, T_y, T_x)
    pad = (src == 0)[:, None, :].expand_as(w)
    assert torch.equal(w[pad], torch.zeros(int(pad.sum())))  # exactly zero on padding
    torch.testing.assert_close(w.sum(-1), torch.ones(5, tgt.size(1) - 1))


@pytest.mark.parametrize("attention", R.ATTENTION_KINDS)
def test_padding_does_not_change_outputs(attention):
    pairs, src, tgt = _batch()
    model = _model(attention)
    logits, _ = model(src, tgt[:, :-1])
    for i, (s, t) in enumerate(pairs):
        s1, t1 = D.collate([(s, t)], VOCAB, VOCAB)
        alone, _ = model(s1, t1[:, :-1])
        torch.testing.assert_close(logits[i, : len(t) + 1], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attention", R.ATTENTION_KINDS)
def test_greedy_matches_teacher_forcing_on_its_own_output(attention):
    _, src, _ = _batch()
    model = _model(attention)
    ids, w = model.greedy(src, max_len=7)
    assert ids.shape[0] == 5 and ids.shape[1] <= 7
    tgt_in = torch.cat([torch.full((5, 1), D.BOS_ID), ids[:, :-1]], dim=1)
    logits, w_tf = model(src, tgt_in)
    # the first step never depends on earlier outputs, so it is always equal
    assert torch.equal(logits[:, 0].argmax(-1), ids[:, 0])
    if attention is not None:
        assert w.shape == (5, ids.shape[1], src.size(1))
        torch.testing.assert_close(w[:, 0], w_tf[:, 0])


def test_bad_arguments():
    with pytest.raises(ValueError, match="attention"):
        R.Seq2Seq(10, 10, attention="cosine")
    with pytest.raises(ValueError, match="hidden_size"):
        R.Seq2Seq(10, 10, hidden_size=0)
    model = _model("additive")
    _, src, tgt = _batch()
    with pytest.raises(ValueError, match="tgt_in"):
        model(src, tgt[:2])
    with pytest.raises(ValueError, match="max_len"):
        model.greedy(src, max_len=0)
    with pytest.raises(ValueError, match="steps"):
        R.train_seq2seq(model, [("ab", "ab")], VOCAB, VOCAB, steps=0)


# ----------------------------------------------------------------------------- helpers

def test_training_is_deterministic_and_learns_a_tiny_copy_task():
    pairs = D.make_copy_pairs(200, 2, 4, alphabet="abcd", seed=0)
    runs = []
    for _ in range(2):
        model = _model("additive")
        runs.append(R.train_seq2seq(model, pairs, VOCAB, VOCAB, steps=150, batch_size=32, lr=1e-2, seed=3))
    assert runs[0] == runs[1]
    assert sum(runs[0][-10:]) / 10 < 0.5 * sum(runs[0][:10]) / 10
    acc = R.exact_match(model, pairs[:50], VOCAB, VOCAB)
    assert 0.0 <= acc <= 1.0
    by_len = R.accuracy_by_length(model, pairs[:50], VOCAB, VOCAB)
    assert set(by_len) <= {2, 3, 4} and all(0 <= a <= 1 for a in by_len.values())
    outs, ws = R.greedy_decode(model, ["abc", "d"], VOCAB, VOCAB, max_len=6, return_weights=True)
    assert len(outs) == 2 and ws[0].shape[1] == 3 and ws[1].shape[1] == 1
    assert R.translate(model, ["abc", "d"], VOCAB, VOCAB, max_len=6) == outs


def test_exact_match_counts_only_identical_strings():
    class Echo(R.Seq2Seq):  # copies its input: a perfect copy model
        @torch.no_grad()
        def greedy(self, src_ids, max_len, bos_id=1, eos_id=2):
            ids = torch.cat([src_ids, torch.zeros(src_ids.size(0), 1, dtype=torch.long)], 1)
            lengths = (src_ids != 0).sum(1)
            ids[torch.arange(len(ids)), lengths] = eos_id
            return ids, None

    model = Echo(len(VOCAB), len(VOCAB), emb_dim=4, hidden_size=4)
    pairs = [("abc", "abc"), ("ab", "ba"), ("p", "p"), ("pa", "pa")]
    assert R.exact_match(model, pairs, VOCAB, VOCAB) == 0.75
    assert R.accuracy_by_length(model, pairs, VOCAB, VOCAB) == {1: 1.0, 2: 0.5, 3: 1.0}


def test_checkpoint_round_trip(tmp_path):
    model = _model("dot")
    path = tmp_path / "m.pt"
    R.save_checkpoint(path, model, VOCAB, D.Vocab("xyz"), meta={"seed": 0, "note": "test"})
    raw = torch.load(path, weights_only=True)
    assert raw["config"]["attention"] == "dot"
    loaded, sv, tv, meta = R.load_checkpoint(path)
    assert sv == VOCAB and tv == D.Vocab("xyz") and meta == {"seed": 0, "note": "test"}
    _, src, tgt = _batch()
    torch.testing.assert_close(loaded(src, tgt[:, :-1])[0], model(src, tgt[:, :-1])[0])
    # str subclasses (torch.__version__) are stored as str; other objects are refused
    R.save_checkpoint(path, model, VOCAB, VOCAB, meta={"torch": torch.__version__})
    assert type(R.load_checkpoint(path)[3]["torch"]) is str
    with pytest.raises(TypeError, match="meta"):
        R.save_checkpoint(path, model, VOCAB, VOCAB, meta={"bad": object()})
