"""Tests for transformer_lib.vocab: the character vocabulary, collate and the batchers."""
import pytest
import torch

from transformer_lib import vocab as V
from transformer_lib.data import make_copy_pairs


def test_vocab_specials_and_round_trip():
    v = V.Vocab("abc")
    assert v.tokens[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3) == (V.PAD_ID, V.BOS_ID, V.EOS_ID, V.UNK_ID)
    ids = v.encode("cab", bos=True, eos=True)
    assert ids == [1, 6, 4, 5, 2]
    assert v.decode(ids + [0, 0]) == "cab"
    assert v.decode(torch.tensor(ids)) == "cab"
    assert v.decode([4, 2, 5]) == "a"  # stops at <eos>
    assert v.decode([4, 2, 5], stop_at_eos=False) == "ab"


def test_vocab_unknown_characters():
    v = V.Vocab("ab")
    assert v.encode("abz") == [4, 5, 3]
    assert v.decode(v.encode("abz")) == "ab?"
    with pytest.raises(ValueError, match="text"):
        v.encode("abz", strict=True)
    with pytest.raises(ValueError, match="chars"):
        V.Vocab("aba")
    with pytest.raises(ValueError, match="ids"):
        v.decode([99])
    with pytest.raises(TypeError, match="text"):
        v.encode(5)


def test_vocab_from_texts_is_order_independent_and_rebuildable():
    a = V.Vocab.from_texts(["hello", "world"])
    b = V.Vocab.from_texts(["world", "hello"])
    assert a == b
    assert V.Vocab.from_tokens(a.tokens) == a
    with pytest.raises(ValueError, match="tokens"):
        V.Vocab.from_tokens(["a", "b"])


def test_collate_pads_with_zero_and_wraps_targets():
    v = V.Vocab("abc")
    src, tgt = V.collate([("abc", "a"), ("a", "cba")], v, v)
    assert src.dtype == tgt.dtype == torch.long
    assert src.tolist() == [[4, 5, 6], [4, 0, 0]]
    assert tgt.tolist() == [[1, 4, 2, 0, 0], [1, 6, 5, 4, 2]]
    with pytest.raises(ValueError, match="pairs"):
        V.collate([], v, v)
    with pytest.raises(ValueError, match="pairs"):
        V.collate([("", "a")], v, v)


def test_batches_and_loader_cover_every_pair_once():
    v = V.Vocab("abcdefghijklmnop")
    pairs = make_copy_pairs(50, 2, 6, seed=3)
    seen = []
    for src, tgt in V.batches(pairs, 16, v, v, seed=1):
        assert src.size(0) == tgt.size(0) <= 16
        seen += [v.decode(row) for row in src]
    assert sorted(seen) == sorted(s for s, _ in pairs)
    loader = V.make_loader(pairs, v, v, batch_size=16, seed=1)
    first = [b[0].tolist() for b in loader]
    again = [b[0].tolist() for b in V.make_loader(pairs, v, v, batch_size=16, seed=1)]
    assert first == again
    with pytest.raises(ValueError, match="batch_size"):
        next(V.batches(pairs, 0, v, v))
