"""One way to build, train, save and load every model of the book."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import checkpoints, lm, rnn
from transformer_lib.book import norm_study
from transformer_lib.schedules import lr_schedule
from transformer_lib.training import TrainConfig, train
from transformer_lib.vocab import Vocab


def test_train_reverse_runs_the_one_loop_and_equals_the_loop_it_replaced():
    # The loop chapter 7 used to carry, written out: Adam (0.9, 0.98), eps 1e-8, a linear ramp.
    def old_loop(n_layers, norm_first, warmup, steps=12, lr=1e-2):
        torch.manual_seed(0)
        data = torch.Generator().manual_seed(1)
        model = norm_study.ReverseTagger(n_layers, norm_first)
        opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))
        ramp = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
        losses = []
        for _ in range(steps):
            x, y = norm_study.reverse_batch(data)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            ramp.step()
            losses.append(loss.item())
        return losses

    for warmup in (0, 5):
        assert norm_study.train_reverse(2, False, warmup, steps=12) == old_loop(2, False, warmup)


def test_linear_warmup_schedule_ramps_then_holds():
    cfg = TrainConfig(schedule="linear_warmup", warmup=4, lr=0.02)
    lr_at = lr_schedule(cfg, torch.nn.Linear(1, 1))
    assert [lr_at(s) for s in (1, 2, 4, 5, 100)] == [0.005, 0.01, 0.02, 0.02, 0.02]


def test_a_language_model_trains_through_the_one_loop():
    text = "the cat sat on the mat. " * 40
    vocab = Vocab.from_texts([text])
    ids = torch.tensor(vocab.encode(text))
    torch.manual_seed(0)
    model = lm.CausalLM(lm.CausalLMConfig(len(vocab), d_model=32, n_heads=4, d_ff=64, n_layers=1, max_len=32))
    loader = lm.random_windows(ids, batch_size=16, length=16, steps=60, seed=0)
    val = list(lm.random_windows(ids, batch_size=8, length=16, steps=2, seed=1))
    before = lm.lm_evaluate(model, val, TrainConfig())
    cfg = TrainConfig(max_steps=60, warmup=10, factor=1.0, label_smoothing=0.0, eval_every=30, progress=False)
    hist = train(model, loader, val, cfg, loss_fn=lm.lm_loss, eval_fn=lm.lm_evaluate)
    assert hist.eval_step == [30, 60] and len(hist.loss) == 60
    assert hist.eval_loss[-1] < before[1] - 1.0 and hist.eval_accuracy[-1] > before[0]
    assert list(loader)[0][0].tolist() == list(loader)[0][0].tolist()  # every pass draws the same windows
    x, y = next(iter(loader))
    assert torch.equal(x[:, 1:], y[:, :-1])


@pytest.mark.parametrize("options", [dict(), dict(positions="rope", norm="rms", ffn="swiglu", n_kv_heads=1,
                                                  bias=False, tie_output=False)])
def test_checkpoints_round_trip_a_language_model(tmp_path, options):
    vocab = Vocab.from_texts(["abcdef"])
    torch.manual_seed(0)
    model = lm.CausalLM(lm.CausalLMConfig(len(vocab), d_model=16, n_heads=4, d_ff=32, max_len=20, **options))
    checkpoints.save(tmp_path / "lm.pt", model, vocab, vocab, record={"steps": 0})
    loaded, src_vocab, tgt_vocab, record = checkpoints.load(tmp_path / "lm.pt", vocab, vocab)
    assert type(loaded) is lm.CausalLM and loaded.config == model.config and record == {"steps": 0}
    assert src_vocab.tokens == tgt_vocab.tokens == vocab.tokens
    ids = torch.tensor([vocab.encode("abcabc")])
    with torch.no_grad():
        assert torch.equal(loaded(ids), model.eval()(ids))
    other = Vocab.from_texts(["abcdeg"])
    with pytest.raises(ValueError, match="one vocabulary"):
        checkpoints.save(tmp_path / "bad.pt", model, vocab, other)


def test_every_kind_is_built_one_way_from_its_stored_config(tmp_path):
    vocab = Vocab.from_texts(["abc"])
    models = [tl.Transformer(tl.TransformerConfig(len(vocab), len(vocab), d_model=8, n_heads=2, d_ff=8, n_layers=1)),
              rnn.Seq2Seq(rnn.Seq2SeqConfig(len(vocab), len(vocab), emb_dim=4, hidden_size=4, attn_size=4)),
              lm.CausalLM(lm.CausalLMConfig(len(vocab), d_model=8, n_heads=2, d_ff=8, n_layers=1))]
    for model in models:
        checkpoints.save(tmp_path / "m.pt", model, vocab, vocab)
        loaded = checkpoints.load(tmp_path / "m.pt")[0]
        assert type(loaded) is type(model) and dataclasses.asdict(loaded.config) == dataclasses.asdict(model.config)
    assert set(checkpoints.MODELS) == {"Transformer", "Seq2Seq", "CausalLM"}
