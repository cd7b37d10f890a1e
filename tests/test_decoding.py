"""Greedy decoding and beam search, on a trained-free hand-made model and a random Transformer."""
import math

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib.decoding import beam_search, greedy_decode, length_penalty, strip_special
from transformer_lib.metrics import bleu, character_error_rate, edit_distance, exact_match

PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4


class HandMadeModel(nn.Module):
    """Next-token probabilities that depend on the last token only:

        after <bos>: a 0.6, b 0.4
        after a:     a 0.4, b 0.3, <eos> 0.3
        after b:     <eos> 0.9, a 0.05, b 0.05

    Greedy takes a, then a, a, ... (0.6 * 0.4^n, never ending); the most probable whole
    sequence is "b <eos>" with probability 0.36.
    """

    table = {BOS: {A: 0.6, B: 0.4}, A: {A: 0.4, B: 0.3, EOS: 0.3}, B: {EOS: 0.9, A: 0.05, B: 0.05},
             EOS: {EOS: 1.0}, PAD: {EOS: 1.0}}

    def encode(self, src, src_mask=None):
        return torch.zeros(src.shape[0], src.shape[1], 1)

    def next_probs(self, prefix: list[int]) -> dict[int, float]:
        """P(next token | prefix), prefix = [<bos>, y_1, ..., y_t]."""
        return self.table[prefix[-1]]

    def decode(self, tgt, memory, src_mask=None):
        logits = torch.full((*tgt.shape, 5), -1e9)
        for b in range(tgt.shape[0]):
            for t in range(tgt.shape[1]):
                for tok, p in self.next_probs(tgt[b, : t + 1].tolist()).items():
                    logits[b, t, tok] = math.log(p)
        return logits


def test_beam_search_finds_the_sequence_greedy_misses():
    model, src = HandMadeModel(), torch.ones(1, 3, dtype=torch.long)
    greedy = greedy_decode(model, src, max_len=6)
    assert greedy.tokens[0].tolist() == [A] * 6  # never reaches <eos>
    assert greedy.scores[0].item() == pytest.approx(math.log(0.6 * 0.4**5))
    beam = beam_search(model, src, max_len=6, beam_size=2)
    assert beam.tokens[0].tolist() == [B, EOS]
    assert beam.scores[0].item() == pytest.approx(math.log(0.36))


class LateEosModel(nn.Module):
    """Writes 'a' with probability 0.99 and <eos> with 0.01 for four steps, then <eos> with 0.99:
    early <eos> hypotheses are finished but poor, and must not end the search."""

    def encode(self, src, src_mask=None):
        return torch.zeros(src.shape[0], src.shape[1], 1)

    def decode(self, tgt, memory, src_mask=None):
        logits = torch.full((*tgt.shape, 5), -1e9)
        for t in range(tgt.shape[1]):
            p_eos = 0.99 if t >= 4 else 0.01
            logits[:, t, EOS], logits[:, t, A] = math.log(p_eos), math.log(1 - p_eos)
        return logits


@pytest.mark.parametrize("beam_size", [2, 3, 4])
def test_beam_search_does_not_stop_at_poor_early_hypotheses(beam_size):
    out = beam_search(LateEosModel(), torch.ones(2, 3, dtype=torch.long), max_len=8, beam_size=beam_size)
    assert out.tokens.tolist() == [[A, A, A, A, EOS]] * 2
    assert out.scores[0].item() == pytest.approx(5 * math.log(0.99), rel=1e-5)


def test_beam_search_with_one_beam_equals_greedy_on_the_hand_made_model():
    model, src = HandMadeModel(), torch.ones(2, 3, dtype=torch.long)
    assert torch.equal(beam_search(model, src, 5, beam_size=1).tokens, greedy_decode(model, src, 5).tokens)


def random_model(seed=0):
    torch.manual_seed(seed)
    cfg = tl.TransformerConfig(12, 9, d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0)
    return tl.Transformer(cfg).eval()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_one_equals_greedy_on_random_transformers(seed):
    model = random_model(seed)
    src = torch.randint(3, 12, (5, 7))
    src[2, 5:] = PAD
    g = greedy_decode(model, src, max_len=8)
    b = beam_search(model, src, max_len=8, beam_size=1)
    for row_g, row_b in zip(g.tokens, b.tokens):
        assert strip_special(row_g, EOS) == strip_special(row_b, EOS)
    torch.testing.assert_close(g.scores, b.scores)


def test_wider_beams_never_score_worse_than_greedy_without_length_penalty():
    model = random_model(3)
    src = torch.randint(3, 12, (6, 5))
    g = greedy_decode(model, src, max_len=12)
    finished = [(row == EOS).any().item() for row in g.tokens]
    assert sum(finished) >= 3, "the check needs rows where greedy finished"
    b = beam_search(model, src, max_len=12, beam_size=4)
    compared = [i for i, done in enumerate(finished) if done]  # like with like: complete sequences
    assert all(b.scores[i] >= g.scores[i] - 1e-5 for i in compared)


def test_greedy_stops_every_row_after_eos_and_pads():
    model = random_model(8)  # a seed where rows end at different steps
    out = greedy_decode(model, torch.randint(3, 12, (4, 6)), max_len=10)
    rows = [row for row in out.tokens.tolist() if EOS in row]
    assert rows and any(row.index(EOS) < len(row) - 1 for row in rows), "need a row that ended early"
    for row in rows:
        assert all(t == PAD for t in row[row.index(EOS) + 1 :])


class TwoEndingsModel(HandMadeModel):
    """After <bos>: a (0.6) or b (0.4); after a: <eos>; after b: b, b, then <eos>, all certain.
    So log P("a <eos>") = log 0.6 = -0.51 over two tokens and log P("b b b <eos>") = log 0.4 =
    -0.92 over four. With alpha = 0 the short one wins; dividing by lp(Y) = ((5 + |Y|) / 6)^alpha
    with alpha = 5 favours the long one: -0.51 / 2.16 = -0.24 against -0.92 / 7.59 = -0.12."""

    def next_probs(self, prefix: list[int]) -> dict[int, float]:
        written = prefix[1:]
        if not written:
            return {A: 0.6, B: 0.4}
        return {EOS: 1.0} if written[0] == A or len(written) >= 3 else {B: 1.0}


def test_length_penalty_changes_which_hypothesis_beam_search_picks():
    src = torch.ones(1, 2, dtype=torch.long)
    plain = beam_search(TwoEndingsModel(), src, max_len=6, beam_size=3, alpha=0.0)
    assert plain.tokens[0].tolist() == [A, EOS]
    assert plain.scores[0].item() == pytest.approx(math.log(0.6))
    penalised = beam_search(TwoEndingsModel(), src, max_len=6, beam_size=3, alpha=5.0)
    assert penalised.tokens[0].tolist() == [B, B, B, EOS]
    assert penalised.scores[0].item() == pytest.approx(math.log(0.4))  # scores: before the penalty


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_decoding_restores_the_callers_mode(mode):
    model = random_model(6)
    model.train(mode == "train")
    src = torch.randint(3, 12, (2, 4))
    greedy_decode(model, src, max_len=3)
    assert model.training == (mode == "train")
    beam_search(model, src, max_len=3, beam_size=2)
    assert model.training == (mode == "train")


def test_decoding_checks_source_ids_once_per_call():
    model = random_model(7)
    with pytest.raises(ValueError, match="src holds token ids"):
        greedy_decode(model, torch.tensor([[3, 12]]), max_len=3)  # 12 is outside the 12-token vocabulary
    with pytest.raises(ValueError, match="src holds token ids"):
        beam_search(model, torch.tensor([[3, -1]]), max_len=3)


def test_decoded_attention_has_every_layer_and_head_with_the_right_shapes():
    model = random_model(5)
    src = torch.randint(3, 12, (2, 6))
    for result in (greedy_decode(model, src, 4, return_attention=True),
                   beam_search(model, src, 4, beam_size=3, return_attention=True)):
        att = result.attention
        t = result.tokens.shape[1] + 1  # <bos> + output
        assert [w.shape for w in att["encoder"]] == [(2, 2, 6, 6)] * 2
        assert [w.shape for w in att["decoder"]] == [(2, 2, t, t)] * 2
        assert [w.shape for w in att["cross"]] == [(2, 2, t, 6)] * 2
        for w in att["decoder"]:  # causal: nothing above the diagonal
            assert w.triu(1).abs().max() == 0


def test_length_penalty():
    assert length_penalty(7, 0.0) == 1.0
    assert length_penalty(1, 1.0) == pytest.approx(1.0)
    assert length_penalty(7, 0.6) == pytest.approx((12 / 6) ** 0.6)


def test_decoding_argument_errors():
    with pytest.raises(ValueError, match="max_len must be a positive integer"):
        greedy_decode(HandMadeModel(), torch.ones(1, 2, dtype=torch.long), max_len=0)
    with pytest.raises(ValueError, match="beam_size must be a positive integer"):
        beam_search(HandMadeModel(), torch.ones(1, 2, dtype=torch.long), 3, beam_size=0)
    with pytest.raises(ValueError, match="src must have 2 dimensions"):
        greedy_decode(HandMadeModel(), torch.ones(2, dtype=torch.long), 3)


def test_metrics():
    assert exact_match(["1998-03-03", "2000-01-01"], ["1998-03-03", "2000-01-02"]) == 0.5
    assert edit_distance("kitten", "sitting") == 3
    assert character_error_rate(["abc", "de"], ["abd", "de"]) == pytest.approx(1 / 5)
    assert bleu(["1998-03-03"], ["1998-03-03"]) == pytest.approx(100.0)
    assert bleu(["1998-03-03"], ["2011-12-25"]) < 20
    with pytest.raises(ValueError, match="same length"):
        exact_match(["a"], ["a", "b"])
    with pytest.raises(TypeError, match="sequences of strings"):
        bleu("abc", "abc")


def test_translate_decodes_strings_in_batches_like_greedy_decode():
    from transformer_lib.vocab import Vocab, collate
    from transformer_lib.decoding import translate

    vocab = Vocab("abcdef")
    torch.manual_seed(0)
    model = tl.Transformer(tl.TransformerConfig(len(vocab), len(vocab), d_model=16, n_heads=2, d_ff=32,
                                                n_layers=1, dropout=0.0)).eval()
    sources = ["abc", "fed", "a", "bbbbbb", "cafe"]
    src, _ = collate([(s, "") for s in sources], vocab, vocab)
    expected = [vocab.decode(r) for r in greedy_decode(model, src, max_len=7).tokens]
    assert translate(model, sources, vocab, vocab, max_len=7, batch_size=2) == expected
    assert len(translate(model, sources, vocab, vocab, max_len=7, beam_size=3)) == 5
    with pytest.raises(TypeError, match="not a single string"):
        translate(model, "abc", vocab, vocab)


def test_alignment_of_gives_the_weights_seen_while_decoding():
    model, src_vocab, tgt_vocab, _ = tl.checkpoints.load(tl.CHECKPOINTS / "date_additive.pt")
    sources = ["mardi 3 mars 1998", "3/3/98"]
    outputs = tl.decoding.translate(model, sources, src_vocab, tgt_vocab, max_len=11)
    maps = tl.decoding.alignment_of(model, sources, outputs, src_vocab, tgt_vocab)
    for source, output, w in zip(sources, outputs, maps):
        assert w.shape == (len(output) + 1, len(source))
        torch.testing.assert_close(w.sum(-1), torch.ones(len(output) + 1))
        # the first row, decoded alone from <bos>, is the first step's weights
        src, _ = tl.vocab.collate([(source, "")], src_vocab, tgt_vocab)
        first = model.alignment(src, torch.tensor([[tl.vocab.BOS_ID]]))[0, 0]
        torch.testing.assert_close(w[0], first)
    with pytest.raises(ValueError, match="pair up"):
        tl.decoding.alignment_of(model, sources, outputs[:1], src_vocab, tgt_vocab)


# --- Added for issue 19: tensors on src's device, beam search's tokens checked exactly ---------


@pytest.mark.parametrize("decode", ["greedy", "beam"])
def test_decoding_builds_every_tensor_on_the_device_of_src(decode):
    """Every tensor decoding makes is on src's device (the beam-on-src's-device fix). PyTorch's
    default device is set to `meta` (tensors without data) while CPU tensors are decoded: a
    tensor made without `device=` would land on `meta`, and mixing it with src's tensors, or
    reading it, fails. The results must be those of a plain run, on src's device."""
    model = random_model(4)
    src = torch.randint(3, 12, (5, 7))
    src[1, 4:] = PAD
    run = {"greedy": lambda: greedy_decode(model, src, 8, return_attention=True),
           "beam": lambda: beam_search(model, src, 8, beam_size=3, return_attention=True)}[decode]
    plain = run()
    with torch.device("meta"):
        assert torch.empty(1).is_meta  # the default device really is meta here
        moved = run()
    tensors = [moved.tokens, moved.scores] + [w for ws in moved.attention.values() for w in ws]
    assert all(t.device == src.device for t in tensors)
    assert torch.equal(moved.tokens, plain.tokens)
    torch.testing.assert_close(moved.scores, plain.scores)


class RandomTableModel(nn.Module):
    """A hand-made model whose next-token distribution over <eos>, a, b, c is a fixed random
    function of the whole prefix and of the source's first token, so that batch rows differ
    and beam search has real choices to make. src (B, S) ids; memory carries src along."""

    def __init__(self, seed: int):
        super().__init__()
        self.seed = seed
        self.cache: dict = {}

    def encode(self, src, src_mask=None):
        return src[..., None].float()  # (B, S, 1)

    def next_probs(self, row: int, prefix: tuple[int, ...]) -> dict[int, float]:
        key = (row, prefix)
        if key not in self.cache:
            import random
            rng = random.Random(f"{self.seed}-{row}-{prefix}")
            weights = [rng.random() ** 3 + 1e-3 for _ in range(4)]
            weights[0] *= 0.1 + 0.3 * (len(prefix) - 1)  # <eos> rare at first, likelier later
            self.cache[key] = {tok: w / sum(weights) for tok, w in zip((EOS, A, B, 5), weights)}
        return self.cache[key]

    def decode(self, tgt, memory, src_mask=None):
        logits = torch.full((*tgt.shape, 6), -1e9)
        for b in range(tgt.shape[0]):
            row = int(memory[b, 0, 0])
            for t in range(tgt.shape[1]):
                for tok, p in self.next_probs(row, tuple(tgt[b, : t + 1].tolist())).items():
                    logits[b, t, tok] = math.log(p)
        return logits


def exhaustive_best(model, row: int, max_len: int, alpha: float) -> tuple[list[int], float]:
    """The hypothesis beam search ranks best, found by scoring every one: each sequence that
    ends in <eos> within max_len tokens, and each max_len-token sequence without <eos>, ranked
    by log P(Y) / lp(Y). Returns (tokens, log P)."""
    best, stack = None, [([BOS], 0.0)]
    while stack:
        prefix, logp = stack.pop()
        for tok, p in model.next_probs(row, tuple(prefix)).items():
            ys, score = prefix[1:] + [tok], logp + math.log(p)
            if tok == EOS or len(ys) == max_len:
                rank = score / length_penalty(len(ys), alpha)
                if best is None or rank > best[0]:
                    best = (rank, ys, score)
            else:
                stack.append((prefix + [tok], score))
    return best[1], best[2]


@pytest.mark.parametrize("seed", [0, 1, 3])
@pytest.mark.parametrize("alpha", [0.0, 2.0])
def test_wide_beam_search_finds_the_exhaustive_best(seed, alpha):
    """With a beam as wide as every candidate (4 * 3^(max_len - 1): nothing is ever pruned),
    beam search must return exactly the best hypothesis, tokens and log-probability. (On these
    tables greedy misses the best in 4 of the 9 rows at alpha = 0, and alpha = 2 changes the
    best in 4 rows.)"""
    model, max_len = RandomTableModel(seed), 4
    src = torch.tensor([[3, 3], [4, 3], [5, 3]])
    out = beam_search(model, src, max_len, beam_size=4 * 3 ** (max_len - 1), alpha=alpha)
    for b, row in enumerate(src[:, 0].tolist()):
        tokens, logp = exhaustive_best(model, row, max_len, alpha)
        assert out.tokens[b, : len(tokens)].tolist() == tokens
        assert all(t == PAD for t in out.tokens[b, len(tokens):].tolist())
        assert out.scores[b].item() == pytest.approx(logp, abs=1e-5)


@pytest.mark.parametrize("beam_size", [1, 2, 3])
def test_narrow_beam_returns_a_real_hypothesis_with_its_own_score(beam_size):
    """A narrow beam may miss the best hypothesis, but what it returns is a hypothesis of the
    model whose score is its log-probability, and no better than the exhaustive best."""
    model, max_len = RandomTableModel(3), 4  # a beam of 2 misses the best of row 0
    src = torch.tensor([[3, 3], [4, 3], [5, 3], [6, 3]])
    out = beam_search(model, src, max_len, beam_size=beam_size)
    for b, row in enumerate(src[:, 0].tolist()):
        tokens = strip_special(out.tokens[b], eos_id=-1)  # keep <eos>, drop padding
        ended = EOS in tokens
        assert (ended and tokens.index(EOS) == len(tokens) - 1) or len(tokens) == max_len
        logp, prefix = 0.0, [BOS]
        for tok in tokens:
            logp += math.log(model.next_probs(row, tuple(prefix))[tok])
            prefix.append(tok)
        assert out.scores[b].item() == pytest.approx(logp, abs=1e-5)
        assert logp <= exhaustive_best(model, row, max_len, 0.0)[1] + 1e-9


def test_beam_search_agrees_with_greedy_on_the_date_model_where_it_must():
    """On the shipped date model, beam search (alpha = 0) must return greedy's output whenever
    no other hypothesis can outscore it. Sufficient condition, from the greedy tokens' own
    probabilities p_1..p_L (L: its <eos>): any other sequence leaves greedy's path at some
    step j with probability at most 1 - p_j, so it scores at most P(y_<j) (1 - p_j), while
    greedy's scores P(y_<j) p_j ... p_L; if p_j ... p_L > 1 - p_j for every j, greedy's
    output is the most probable sequence, and its prefix leads the beam at every step."""
    import datetime as dt
    import random

    from transformer_lib import dates
    from transformer_lib.masks import padding_mask

    model, src_vocab, tgt_vocab, _ = tl.checkpoints.load(tl.CHECKPOINTS / "transformer_dates.pt")
    rng = random.Random(0)
    sources = [dates.render_date(dt.date(rng.randint(1950, 2049), rng.randint(1, 12), rng.randint(1, 28)),
                                 locale, fmt)
               for locale in ("en", "fr", "de", "es") for fmt in dates.date_patterns(locale)]
    src, _ = tl.vocab.collate([(s, "") for s in sources], src_vocab, tgt_vocab)
    greedy = greedy_decode(model, src, 12)
    beam = beam_search(model, src, 12, beam_size=3)
    ys = torch.cat([torch.full((len(sources), 1), tl.vocab.BOS_ID), greedy.tokens], 1)
    with torch.no_grad():
        mask = padding_mask(src, tl.vocab.PAD_ID)
        logp = model.decode(ys[:, :-1], model.encode(src, mask), mask).log_softmax(-1)
    p = logp.gather(-1, greedy.tokens[..., None])[..., 0].exp()  # (B, L): each token's probability
    must_agree = []
    for b, row in enumerate(greedy.tokens.tolist()):
        assert tl.vocab.EOS_ID in row, f"greedy did not finish {sources[b]!r}"
        q = p[b, : row.index(tl.vocab.EOS_ID) + 1]
        must_agree.append(all(q[j:].prod() > 1 - q[j] + 1e-3 for j in range(len(q))))
    assert sum(must_agree) >= 0.9 * len(sources), "the check needs rows where greedy must win"
    rows = torch.tensor(must_agree)
    assert torch.equal(beam.tokens[rows, : greedy.tokens.shape[1]], greedy.tokens[rows])
    torch.testing.assert_close(beam.scores[rows], greedy.scores[rows])


def test_translate_with_a_beam_returns_beam_searchs_tokens():
    from transformer_lib.decoding import translate
    from transformer_lib.vocab import Vocab, collate

    vocab = Vocab("abcdef")
    torch.manual_seed(0)
    model = tl.Transformer(tl.TransformerConfig(len(vocab), len(vocab), d_model=16, n_heads=2, d_ff=32,
                                                n_layers=1, dropout=0.0)).eval()
    sources = ["abc", "fed", "a", "bbbbbb", "cafe"]
    src, _ = collate([(s, "") for s in sources], vocab, vocab)
    expected = [vocab.decode(r) for r in beam_search(model, src, max_len=7, beam_size=3, alpha=0.6).tokens]
    assert translate(model, sources, vocab, vocab, max_len=7, beam_size=3, alpha=0.6, batch_size=2) == expected
