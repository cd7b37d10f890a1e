"""Teacher forcing, label smoothing, the warm-up schedule, checkpoints, and a real training run."""

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib.data import make_copy_pairs
from transformer_lib.vocab import Vocab, collate
from transformer_lib.decoding import greedy_decode
from transformer_lib import checkpoints
from transformer_lib.recipes import DATE_MODEL, DATE_RECIPE, evenly_spaced, recipe_config
from transformer_lib.losses import LabelSmoothingLoss
from transformer_lib.schedules import factor_for_peak, noam_lr
from transformer_lib.training import Batch, TrainConfig, evaluate, train


def test_schedule_follows_equation_3():
    d_model, warmup = 512, 4000
    for step in (1, 10, 100, 3999, 4000, 4001, 10_000, 100_000):
        expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert noam_lr(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)
    # rises linearly, peaks at warmup, then decays like 1/sqrt(step)
    assert noam_lr(2000, d_model, warmup) == pytest.approx(noam_lr(1000, d_model, warmup) * 2)
    peak = max(noam_lr(s, d_model, warmup) for s in range(1, 20_000))
    assert peak == pytest.approx(noam_lr(warmup, d_model, warmup)) == pytest.approx((d_model * warmup) ** -0.5)
    assert noam_lr(16_000, d_model, warmup) == pytest.approx(noam_lr(4000, d_model, warmup) / 2)


def test_train_follows_equation_3_step_by_step():
    model = tl.Transformer(tl.TransformerConfig(10, 10, d_model=16, n_heads=2, d_ff=32, n_layers=1))
    batches = [collate([("abc", "abc")], Vocab("abc"), Vocab("abc"))]
    lr = train(model, batches, None, TrainConfig(max_steps=30, warmup=10, factor=2.0, progress=False)).lr
    assert lr == pytest.approx([noam_lr(s, 16, 10, 2.0) for s in range(1, 31)])


def test_label_smoothing_equals_its_closed_form():
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.0, 1.0, 3.0, -2.0]])
    target = torch.tensor([1, 2])
    eps, pad = 0.1, 0
    loss = LabelSmoothingLoss(eps, pad_id=pad)(logits, target)
    logp = F.log_softmax(logits, -1)
    by_hand = 0.0
    for row, y in enumerate(target.tolist()):
        q = torch.full((4,), eps / 3)  # eps spread over the 3 non-pad tokens
        q[pad] = 0.0
        q[y] += 1 - eps
        assert q.sum().item() == pytest.approx(1.0)
        by_hand += -(q * logp[row]).sum().item()
    assert loss.item() == pytest.approx(by_hand / 2, rel=1e-6)


def test_label_smoothing_matches_pytorch_without_a_pad_class_and_ignores_pad_targets():
    logits, target = torch.randn(6, 9), torch.randint(0, 9, (6,))
    ours = LabelSmoothingLoss(0.2, pad_id=None)(logits, target)
    assert ours.item() == pytest.approx(F.cross_entropy(logits, target, label_smoothing=0.2).item(), rel=1e-6)
    assert LabelSmoothingLoss(0.0)(logits, target.clamp_min(1)).item() == pytest.approx(
        F.cross_entropy(logits, target.clamp_min(1)).item(), rel=1e-6)
    target[:3] = 0  # padding targets do not count
    full = LabelSmoothingLoss(0.1)(logits, target)
    assert full.item() == pytest.approx(LabelSmoothingLoss(0.1)(logits[3:], target[3:]).item(), rel=1e-6)


def test_label_smoothing_stays_finite_where_a_hand_written_kl_gives_nan():
    logits = torch.tensor([[200.0, -200.0, 0.0, -200.0]])  # softmax underflows to exact zeros
    target = torch.tensor([2])
    q = torch.tensor([[0.0, 0.05, 0.9, 0.05]])
    naive = (q * (q.log() - logits.softmax(-1).log())).sum()  # 0 * log 0 and log(0): NaN / inf
    assert not torch.isfinite(naive)
    loss = LabelSmoothingLoss(0.1)(logits, target)
    assert torch.isfinite(loss) and loss.item() > 100


def test_batch_shifts_the_target_right():
    src = torch.tensor([[5, 6, 7], [5, 6, 0]])
    tgt = torch.tensor([[1, 8, 9, 2], [1, 8, 2, 0]])
    b = Batch.from_ids(src, tgt, pad_id=0)
    assert b.tgt_in.tolist() == [[1, 8, 9], [1, 8, 2]]
    assert b.tgt_out.tolist() == [[8, 9, 2], [8, 2, 0]]
    assert b.src_mask.shape == (2, 1, 1, 3) and b.tgt_mask.shape == (2, 1, 3, 3)
    with pytest.raises(ValueError, match="same batch size"):
        Batch.from_ids(src, tgt[:1])


def copy_task(n_train=3000, seed=0):
    vocab = Vocab("abcdef")
    train_pairs = make_copy_pairs(n_train, 3, 7, "abcdef", seed=seed)
    test_pairs = make_copy_pairs(100, 3, 7, "abcdef", seed=seed + 1)
    return vocab, train_pairs, test_pairs


@pytest.mark.slow
def test_short_training_run_learns_the_copy_task(tmp_path):
    tl.runtime.setup(seed=0, threads=1)
    vocab, train_pairs, test_pairs = copy_task()
    loader = [collate(train_pairs[i : i + 50], vocab, vocab) for i in range(0, len(train_pairs), 50)]
    val = [collate(test_pairs, vocab, vocab)]
    model = tl.Transformer(tl.TransformerConfig(len(vocab), len(vocab), d_model=32, n_heads=4, d_ff=64,
                                                n_layers=2, dropout=0.0, max_len=32))
    cfg = TrainConfig(max_steps=1500, warmup=100, factor=0.5, eval_every=100, target_accuracy=1.0,
                      progress=False, checkpoint=str(tmp_path / "copy.pt"))
    with pytest.raises(ValueError, match="vocabs"):  # a checkpoint needs the vocabularies, asked up front
        train(model, loader, val, cfg)
    hist = train(model, loader, val, cfg, vocabs=(vocab, vocab))
    assert hist.best_accuracy == 1.0, hist
    assert 0 < hist.eval_seconds < hist.seconds
    assert hist.loss[-1] < hist.loss[0] / 3
    # the checkpoint holds the best model, its vocabularies and the step, in the one format
    loaded, src_vocab, tgt_vocab, record = checkpoints.load(tmp_path / "copy.pt", vocab, vocab)
    assert record == {"step": hist.best_step, "accuracy": 1.0} and src_vocab == vocab
    src, tgt = val[0]
    out = greedy_decode(loaded, src, max_len=tgt.shape[1])
    preds = [vocab.decode(row) for row in out.tokens]
    assert tl.metrics.exact_match(preds, [t for _, t in test_pairs]) == 1.0


def _by_hand(model, batches, steps, cfg):
    """The Transformer's training step written out: Adam (0.9, 0.98, 1e-9), equation (3) as the
    learning rate of step s, label smoothing, clipping. train() must do exactly this arithmetic:
    its multi-tensor Adam (foreach) must match the per-parameter loop here bit for bit."""
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, foreach=False)
    d_model = model.config.d_model
    factor = cfg.factor if cfg.peak_lr is None else cfg.peak_lr * (d_model * cfg.warmup) ** 0.5  # peaks at peak_lr
    lr_at = lambda s: noam_lr(s, d_model, cfg.warmup, factor)  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_at(i + 1))
    loss_fn = LabelSmoothingLoss(cfg.label_smoothing)
    losses = []
    model.train()
    for i in range(steps):
        b = Batch.from_ids(*batches[i % len(batches)])
        loss = loss_fn(model(b.src, b.tgt_in, b.src_mask, b.tgt_mask), b.tgt_out)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def test_transformer_losses_are_bit_identical_to_the_written_out_step():
    tl.runtime.setup(seed=0, threads=1)
    vocab, train_pairs, _ = copy_task(n_train=200)
    batches = [collate(train_pairs[i : i + 50], vocab, vocab) for i in range(0, 200, 50)]
    cfg = recipe_config(max_steps=20)
    runs, weights = [], []
    for how in ("train", "train", "by hand"):
        torch.manual_seed(0)
        model = tl.Transformer(tl.TransformerConfig(len(vocab), len(vocab), d_model=16, n_heads=2, d_ff=32,
                                                    n_layers=1, dropout=0.0))
        runs.append(train(model, batches, None, cfg).loss if how == "train" else _by_hand(model, batches, 20, cfg))
        weights.append(model.state_dict())
    assert len(runs[0]) == 20 and runs[0] == runs[1] == runs[2]  # exactly equal, not close
    assert all(torch.equal(w[k], weights[2][k]) for w in weights[:2] for k in w)  # after the 20th update too


def test_noam_lr_rejects_step_zero_and_negative_steps():
    assert noam_lr(1, 64, 10) > 0
    for bad in (0, -1, -100):
        with pytest.raises(ValueError, match="step must be a positive integer"):
            noam_lr(bad, 64, 10)


def test_factor_for_peak_puts_the_peak_of_equation_3_where_asked():
    factor = factor_for_peak(2e-3, 64, 200)
    assert noam_lr(200, 64, 200, factor) == pytest.approx(2e-3, rel=1e-12)
    assert max(noam_lr(s, 64, 200, factor) for s in range(1, 2000)) == pytest.approx(2e-3, rel=1e-12)
    with pytest.raises(ValueError, match="peak_lr"):
        factor_for_peak(0.0, 64, 200)


def test_recipe_config_follows_the_shared_recipe():
    cfg = recipe_config(max_steps=7)
    assert cfg.max_steps == 7 and cfg.warmup == DATE_RECIPE["warmup"] and cfg.peak_lr == DATE_RECIPE["peak_lr"]
    assert cfg.target_accuracy is None and cfg.eval_every == DATE_RECIPE["eval_every"]  # the hook stops it


@pytest.mark.parametrize("d_model", [DATE_MODEL["d_model"], 128, 256])
@pytest.mark.parametrize("warmup", [None, 20])
def test_the_recipes_peak_is_its_peak_lr_whatever_the_width_and_warmup(d_model, warmup):
    # recipe_config once turned peak_lr into a factor for d_model 64: at 128 the run peaked at
    # 2.12e-3, at 256 at 1.5e-3; and a shorter warm-up kept the factor of 300 steps (1.16e-2).
    from transformer_lib.schedules import lr_schedule

    cfg = recipe_config() if warmup is None else recipe_config(warmup=warmup)
    with torch.device("meta"):
        model = tl.Transformer(tl.TransformerConfig(12, 12, d_model=d_model, n_heads=4, d_ff=32, n_layers=1))
    lr_at = lr_schedule(cfg, model)
    rates = [lr_at(s) for s in range(1, 3 * cfg.warmup)]
    assert max(rates) == pytest.approx(DATE_RECIPE["peak_lr"], rel=1e-12) == pytest.approx(lr_at(cfg.warmup))
    wrapped = torch.nn.parallel.DistributedDataParallel.__new__(torch.nn.parallel.DistributedDataParallel)
    torch.nn.Module.__init__(wrapped)
    wrapped.module = model  # as DDP holds it: the width is read through .module
    assert lr_schedule(cfg, wrapped)(cfg.warmup) == pytest.approx(DATE_RECIPE["peak_lr"], rel=1e-12)


def test_peak_lr_and_factor_are_one_setting_given_once():
    with pytest.raises(ValueError, match="peak_lr sets the peak"):
        TrainConfig(peak_lr=1e-3, factor=2.0)
    with pytest.raises(ValueError, match="peak_lr sets the peak"):
        TrainConfig(peak_lr=1e-3, schedule="constant")


def test_train_rejects_a_one_shot_iterator_up_front():
    vocab, train_pairs, _ = copy_task(n_train=100)
    model = tl.Transformer(tl.TransformerConfig(len(vocab), len(vocab), d_model=16, n_heads=2, d_ff=16, n_layers=1))
    one_shot = (collate(train_pairs[i : i + 50], vocab, vocab) for i in range(0, 100, 50))  # 2 batches, once
    before = [p.detach().clone() for p in model.parameters()]
    rng = torch.random.get_rng_state()
    for loader in (one_shot, iter([collate(train_pairs[:50], vocab, vocab)])):
        with pytest.raises(TypeError, match="one-shot iterator"):
            train(model, loader, None, TrainConfig(max_steps=5, progress=False))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())), "no step may run before the error"
    assert torch.equal(torch.random.get_rng_state(), rng), "the check must draw nothing"
    assert next(one_shot)[0].shape[0] == 50, "the check must read nothing from the loader"
    with pytest.raises(TypeError, match="re-iterable"):
        train(model, 3, None, TrainConfig(max_steps=5, progress=False))
    # a list of the same batches is re-iterable: five steps over two batches work
    batches = [collate(train_pairs[i : i + 50], vocab, vocab) for i in range(0, 100, 50)]
    hist = train(model, batches, None, TrainConfig(max_steps=5, progress=False))
    assert hist.step == [1, 2, 3, 4, 5] and hist.eval_seconds == 0.0


def test_on_eval_can_stop_training_and_train_gives_the_model_back_in_its_mode():
    vocab, train_pairs, _ = copy_task(n_train=100)
    model = tl.Transformer(tl.TransformerConfig(len(vocab), len(vocab), d_model=16, n_heads=2, d_ff=16, n_layers=1))
    batches = [collate(train_pairs[i : i + 50], vocab, vocab) for i in range(0, 100, 50)]
    seen = []

    def stop_at_the_second(step, accuracy):
        seen.append(step)
        return step >= 4  # True: stop here

    cfg = TrainConfig(max_steps=20, eval_every=2, progress=False)
    hist = train(model.eval(), batches, batches, cfg, on_eval=stop_at_the_second)
    assert seen == [2, 4] and hist.step[-1] == 4 and hist.stopped == "on_eval stopped training at step 4"
    assert not model.training  # it came in eval mode
    hist = train(model.train(), batches, batches, cfg, on_eval=lambda step, accuracy: None)
    assert hist.step[-1] == 20 and model.training  # None (or anything but True) goes on


def _script():
    path = Path(__file__).resolve().parent.parent / "scripts" / "train_transformer.py"
    spec = importlib.util.spec_from_file_location("train_transformer_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_script_writes_to_scratch_unless_told_to_update_the_shipped_checkpoint():
    script = _script()
    assert script.SHIPPED == tl.CHECKPOINTS / "transformer_dates.pt"
    assert script.SCRATCH.parent != script.SHIPPED.parent
    with pytest.raises(SystemExit):  # --out and --update-shipped exclude each other
        script.main(["--out", "x.pt", "--update-shipped"])


def test_train_script_fails_and_keeps_the_old_file_when_the_run_reaches_the_cap(tmp_path, capsys):
    script = _script()
    out = tmp_path / "dates.pt"
    out.write_bytes(b"an older checkpoint")
    # one step, then one evaluation of an untrained model: far from the stopping rule, so the
    # run ends at its cap and nothing is written
    assert script.main(["--max-steps", "1", "--out", str(out), "--threads", "1"]) == 1
    assert "reached the cap of 1 steps before the stopping rule" in capsys.readouterr().err
    assert out.read_bytes() == b"an older checkpoint" and not out.with_suffix(".json").exists()


def test_evenly_spaced_spreads_over_the_list():
    items = list(range(100))
    assert evenly_spaced(items, 4) == [0, 25, 50, 75]
    assert evenly_spaced(items, 500) == items
    with pytest.raises(ValueError, match="n must be a positive integer"):
        evenly_spaced(items, 0)


def _greedy_right(model, pairs, src_vocab, tgt_vocab):
    outs = tl.decoding.translate(model, [s for s, _ in pairs], src_vocab, tgt_vocab,
                                 max_len=max(len(t) for _, t in pairs) + 1)
    return [o == t for o, (_, t) in zip(outs, pairs)]


def _teacher_forced_right(model, pairs, src_vocab, tgt_vocab, cfg):
    return [evaluate(model, [collate([p], src_vocab, tgt_vocab)], cfg)[0] == 1.0 for p in pairs]


def test_evaluate_counts_exactly_the_targets_greedy_decoding_gets_right_rnn():
    # an RNN without attention on copy strings of length 12-20: about half right, half wrong
    model, src_vocab, tgt_vocab, _ = checkpoints.load(tl.CHECKPOINTS / "copy_none.pt")
    pairs = [p for n in (12, 16, 20) for p in make_copy_pairs(60, n, n, seed=50 + n)]
    greedy = _greedy_right(model, pairs, src_vocab, tgt_vocab)
    assert 0.2 < sum(greedy) / len(greedy) < 0.8  # both kinds of outcome are tested
    assert _teacher_forced_right(model, pairs, src_vocab, tgt_vocab, TrainConfig(label_smoothing=0.0)) == greedy


@pytest.mark.slow
def test_evaluate_counts_exactly_the_targets_greedy_decoding_gets_right_transformer():
    model, src_vocab, tgt_vocab, _ = checkpoints.load(tl.CHECKPOINTS / "transformer_dates.pt")
    test = tl.data.make_date_splits(seed=0).test
    greedy = _greedy_right(model, test, src_vocab, tgt_vocab)
    wrong = [p for p, ok in zip(test, greedy) if not ok]
    assert wrong, "the shipped model makes a few errors on the test dates"
    sample = wrong + [p for p, ok in zip(test, greedy) if ok][:200]
    expected = [False] * len(wrong) + [True] * (len(sample) - len(wrong))
    assert _teacher_forced_right(model, sample, src_vocab, tgt_vocab, recipe_config()) == expected
    batch = [collate(test, src_vocab, tgt_vocab)]  # one padded batch: the same count
    assert evaluate(model, batch, recipe_config())[0] == sum(greedy) / len(test)
