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


def test_loader_covers_every_pair_once_per_pass_and_repeats_with_its_seed():
    v = V.Vocab("abcdefghijklmnop")
    pairs = make_copy_pairs(50, 2, 6, seed=3)
    loader = V.make_loader(pairs, v, v, batch_size=16, seed=1)
    assert len(loader) == 4
    for _ in range(2):  # each pass: every pair once, in a new order
        seen = []
        for src, tgt in loader:
            assert src.size(0) == tgt.size(0) <= 16 and src.device.type == "cpu"
            seen += [v.decode(row) for row in src]
        assert sorted(seen) == sorted(s for s, _ in pairs)
    first = [b[0].tolist() for b in V.make_loader(pairs, v, v, batch_size=16, seed=1)]
    assert first == [b[0].tolist() for b in V.make_loader(pairs, v, v, batch_size=16, seed=1)]
    assert len(V.make_loader(pairs, v, v, batch_size=16, drop_last=True)) == 3
    with pytest.raises(ValueError, match="batch_size"):
        V.make_loader(pairs, v, v, batch_size=0)


def test_pass_k_reads_the_order_that_seed_and_k_give_and_nothing_else():
    v = V.Vocab("abcdefghijklmnop")
    pairs = make_copy_pairs(70, 2, 6, seed=4)
    loader = V.make_loader(pairs, v, v, batch_size=16, seed=5)
    orders = [loader.order(k) for k in range(3)]
    assert all(sorted(o) == list(range(70)) for o in orders) and len({tuple(o) for o in orders}) == 3
    assert orders == [V.make_loader(pairs, v, v, batch_size=16, seed=5).order(k) for k in range(3)]
    assert orders[0] != V.make_loader(pairs, v, v, batch_size=16, seed=6).order(0)
    iter(loader), iter(loader)  # passes begun and never read: they draw nothing, and move nothing on
    for k in range(3):
        rows = [row for src, _ in loader for row in src.tolist()]
        expected = V.collate([pairs[i] for i in orders[k]], v, v)[0]
        assert [[t for t in row if t] for row in rows] == [[t for t in row if t] for row in expected.tolist()]
    assert V.make_loader(pairs, v, v, batch_size=16, shuffle=False).order(7) == list(range(70))
    with pytest.raises(ValueError, match="seed"):
        V.make_loader(pairs, v, v, seed=-1)


def test_train_reads_the_batches_a_for_loop_reads_in_the_same_order():
    import transformer_lib as tl

    v = V.Vocab("abcdefghijklmnop")
    pairs = make_copy_pairs(40, 2, 5, seed=2)
    loader = V.make_loader(pairs, v, v, batch_size=16, seed=7)
    plain = [src.tolist() for _ in range(3) for src, _ in loader]  # three passes over one loader
    seen = []

    def recording_loss(model, batch, cfg):
        seen.append(batch[0].tolist())
        return tl.training.seq2seq_loss(model, batch, cfg)

    model = tl.Transformer(tl.TransformerConfig(len(v), len(v), d_model=8, n_heads=2, d_ff=8, n_layers=1))
    cfg = tl.TrainConfig(max_steps=len(plain), progress=False)
    tl.train(model, V.make_loader(pairs, v, v, batch_size=16, seed=7), None, cfg, loss_fn=recording_loss)
    assert len(plain) == 9 and seen == plain  # three passes of three batches, batch for batch


def test_loader_works_when_the_default_device_is_not_the_cpu():
    v = V.Vocab("abc")
    with torch.device("meta"):  # as under setup(device="cuda"): factories default elsewhere
        src, tgt = next(iter(V.make_loader([("ab", "ba"), ("c", "c")], v, v, batch_size=2)))
    assert src.device.type == tgt.device.type == "cpu"
