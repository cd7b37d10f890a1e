"""The special tokens have one owner, `transformer_lib.special_tokens`: every part of the library
that pads, masks, starts, stops or stores reads its ids from there, and these tests check that
they all agree with it."""
import dataclasses

import pytest
import torch

import transformer_lib as tl
from transformer_lib import checkpoints, decoding, lm, rnn, training
from transformer_lib import special_tokens as S
from transformer_lib.data import date_vocabs, make_copy_pairs
from transformer_lib.vocab import Vocab, collate, make_loader


def test_the_ids_are_the_positions_of_the_tokens_in_every_vocabulary():
    assert S.SPECIALS == (S.PAD, S.BOS, S.EOS, S.UNK) and (S.PAD_ID, S.BOS_ID, S.EOS_ID, S.UNK_ID) == (0, 1, 2, 3)
    for vocab in (Vocab("xyz"), *date_vocabs()):
        assert tuple(vocab.tokens[:4]) == S.SPECIALS
        assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id) == (S.PAD_ID, S.BOS_ID, S.EOS_ID, S.UNK_ID)
    assert tl.vocab.PAD_ID is S.PAD_ID and tl.vocab.SPECIALS is S.SPECIALS  # handed on, not copied


def test_batches_are_padded_started_and_ended_with_them():
    v = Vocab("abc")
    src, tgt = collate([("abc", "a"), ("b", "cab")], v, v)
    assert src[1, 1:].tolist() == [S.PAD_ID] * 2
    assert tgt[:, 0].tolist() == [S.BOS_ID] * 2 and tgt[0].tolist()[2:] == [S.EOS_ID, S.PAD_ID, S.PAD_ID]
    batch = next(iter(make_loader(make_copy_pairs(8, 2, 5, seed=0), v, v, batch_size=8)))
    b = training.Batch.from_ids(*batch)
    assert torch.equal(b.src_mask[:, 0, 0], batch[0] != S.PAD_ID)


def _transformer(vocab: int = 9) -> tl.Transformer:
    torch.manual_seed(0)
    return tl.Transformer(tl.TransformerConfig(vocab, vocab, d_model=8, n_heads=2, d_ff=16, n_layers=1)).eval()


def test_the_models_mask_exactly_the_pad_id():
    model = _transformer()
    src = torch.tensor([[4, 5, 6, S.PAD_ID], [7, 8, 4, 5]])
    with torch.no_grad():
        assert torch.equal(model.encode(src), model.encode(src, tl.padding_mask(src, S.PAD_ID)))
    seq2seq = rnn.Seq2Seq(rnn.Seq2SeqConfig(9, 9, emb_dim=4, hidden_size=4, attn_size=4))
    assert seq2seq.encoder.embedding.padding_idx == seq2seq.decoder.embedding.padding_idx == S.PAD_ID
    _, _, mask = seq2seq.encoder(src)
    assert torch.equal(mask, src != S.PAD_ID)


@pytest.mark.parametrize("config_cls, kwargs", [(tl.TransformerConfig, dict(src_vocab=9, tgt_vocab=9)),
                                                (rnn.Seq2SeqConfig, dict(src_vocab=9, tgt_vocab=9)),
                                                (training.TrainConfig, dict())])
def test_no_config_carries_a_copy_of_an_id(config_cls, kwargs):
    names = {f.name for f in dataclasses.fields(config_cls)}
    assert not names & {"pad_id", "bos_id", "eos_id"}
    with pytest.raises(TypeError, match="pad_id"):
        config_cls(**kwargs, pad_id=3)


def test_the_loss_leaves_padding_out_and_decoding_never_outputs_bos_or_pad():
    model = _transformer()
    src, tgt = torch.tensor([[4, 5, S.PAD_ID]]), torch.tensor([[S.BOS_ID, 6, S.EOS_ID, S.PAD_ID]])
    cfg = training.TrainConfig()
    with torch.no_grad():
        a = training.seq2seq_loss(model, (src, tgt), cfg)
        b = tl.LabelSmoothingLoss(cfg.label_smoothing, S.PAD_ID)(model(src, tgt[:, :-1]), tgt[:, 1:])
    torch.testing.assert_close(a, b)
    assert S.NEVER_GENERATED == (S.BOS_ID, S.PAD_ID)
    out = decoding.greedy_decode(model, torch.randint(4, 9, (6, 5)), max_len=8)
    assert not (out.tokens == S.BOS_ID).any()
    for row in out.tokens.tolist():  # after <eos>, only <pad>
        if S.EOS_ID in row:
            assert set(row[row.index(S.EOS_ID) + 1:]) <= {S.PAD_ID}


def test_checkpoints_store_vocabularies_that_start_with_them_and_refuse_another_pad_id(tmp_path):
    model, src_vocab, tgt_vocab, _ = checkpoints.load(tl.CHECKPOINTS / "transformer_dates.pt")
    assert tuple(src_vocab.tokens[:4]) == tuple(tgt_vocab.tokens[:4]) == S.SPECIALS
    blob = torch.load(tl.CHECKPOINTS / "transformer_dates.pt", weights_only=True)
    # files made before special_tokens carry pad_id in their config; today's carry none, and a
    # file that names another padding id is refused
    assert blob["config"].get("pad_id", S.PAD_ID) == S.PAD_ID
    blob["config"]["pad_id"] = 3
    torch.save(blob, tmp_path / "other_pad.pt")
    with pytest.raises(ValueError, match="pad_id=3.*special_tokens"):
        checkpoints.load(tmp_path / "other_pad.pt")


def test_the_language_models_text_and_the_bug_hunt_use_them_too():
    from transformer_lib.book import bughunt

    assert (bughunt.PAD, bughunt.BOS, bughunt.EOS) == (S.PAD_ID, S.BOS_ID, S.EOS_ID)
    v = Vocab.from_texts([lm.load_corpus()[:2000]])
    assert tuple(v.tokens[:4]) == S.SPECIALS
