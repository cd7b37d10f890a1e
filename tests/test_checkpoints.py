"""The one checkpoint format: round trips for both model kinds, vocabulary checks, the shipped files."""
import pytest
import torch

import transformer_lib as tl
from transformer_lib import checkpoints, rnn
from transformer_lib.data import date_vocabs
from transformer_lib.vocab import collate
from transformer_lib.vocab import Vocab

SRC, TGT = Vocab("abcdef"), Vocab("xyz")


def _models():
    torch.manual_seed(0)
    yield tl.Transformer(tl.TransformerConfig(len(SRC), len(TGT), d_model=16, n_heads=2, d_ff=32, n_layers=1,
                                              dropout=0.0))
    yield rnn.Seq2Seq(rnn.Seq2SeqConfig(len(SRC), len(TGT), emb_dim=8, hidden_size=12, attn_size=10, attention="dot"))


@pytest.mark.parametrize("model", list(_models()), ids=["transformer", "seq2seq"])
def test_round_trip_keeps_kind_weights_vocabularies_and_record(tmp_path, model):
    path = tmp_path / "m.pt"
    model.train()
    record = {"seed": 0, "history": [{"step": 1, "acc": 0.5}], "torch": torch.__version__}
    checkpoints.save(path, model, SRC, TGT, record)
    raw = torch.load(path, weights_only=True)  # plain values and tensors only
    assert raw["kind"] == type(model).__name__ and raw["format"] == checkpoints.FORMAT
    loaded, src_vocab, tgt_vocab, record = checkpoints.load(path)
    assert type(loaded) is type(model) and not loaded.training
    assert src_vocab == SRC and tgt_vocab == TGT
    assert record == {"seed": 0, "history": [{"step": 1, "acc": 0.5}], "torch": str(torch.__version__)}
    assert type(record["torch"]) is str
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
    src, tgt = collate([("abc", "xy"), ("f", "z")], SRC, TGT)
    model.eval()
    assert torch.equal(loaded(src, tgt[:, :-1]), model(src, tgt[:, :-1]))


def test_a_different_vocabulary_on_load_is_a_clear_error(tmp_path):
    model = next(_models())
    path = tmp_path / "m.pt"
    checkpoints.save(path, model, SRC, TGT)
    checkpoints.load(path, SRC, TGT)  # the same ones: fine
    with pytest.raises(ValueError, match=r"src_vocab differs .* token id 5 is 'c' in the given vocabulary but 'b'"):
        checkpoints.load(path, src_vocab=Vocab("acbdef"))
    with pytest.raises(ValueError,
                       match=r"tgt_vocab differs .* it has 5 tokens, the checkpoint 7; the stored one adds 'yz'"):
        checkpoints.load(path, tgt_vocab=Vocab("x"))


def test_save_refuses_bad_records_vocabularies_and_models(tmp_path):
    model = next(_models())
    with pytest.raises(TypeError, match="record"):
        checkpoints.save(tmp_path / "m.pt", model, SRC, TGT, {"bad": object()})
    with pytest.raises(ValueError, match="tgt_vocab: the model was built for 7 tokens, the vocabulary has 6"):
        checkpoints.save(tmp_path / "m.pt", model, SRC, Vocab("xy"))
    with pytest.raises(TypeError, match="model"):
        checkpoints.save(tmp_path / "m.pt", torch.nn.Linear(2, 2), SRC, TGT)
    torch.save({"config": {}, "state_dict": {}}, tmp_path / "old.pt")
    with pytest.raises(ValueError, match="not a 'transformer_lib checkpoint v1' file"):
        checkpoints.load(tmp_path / "old.pt")


@pytest.mark.parametrize("name", ["transformer_dates", "copy_none", "copy_additive", "copy_none_long",
                                  "date_additive", "date_dot"])
def test_shipped_checkpoints_load_in_the_one_format(name):
    path = tl.CHECKPOINTS / f"{name}.pt"
    if name.startswith("copy"):
        model, src_vocab, tgt_vocab, record = checkpoints.load(path)
        assert src_vocab == tgt_vocab == Vocab("abcdefghijklmnop")
    else:  # the date models carry exactly the vocabularies of data.date_vocabs()
        model, src_vocab, tgt_vocab, record = checkpoints.load(path, *date_vocabs())
    assert isinstance(model, tl.Transformer if name == "transformer_dates" else rnn.Seq2Seq)
    assert record["command"].startswith("python scripts/train_")
