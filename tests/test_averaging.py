"""Checkpoint averaging (`training.average_weights`) and the hook that trains the date model with
it (`training.AverageAndStop`): the average is the element-wise mean of the snapshots, the hook
keeps the last `keep` of them, judges their average and stops `train` when the average and its
confirmation reach their targets."""
import copy

import pytest
import torch

import transformer_lib as tl
from transformer_lib.recipes import DATE_MODEL
from transformer_lib.training import AverageAndStop, TrainConfig, average_weights, evaluate, train
from transformer_lib.vocab import collate, make_loader


def test_average_is_the_elementwise_mean_and_leaves_the_snapshots_alone():
    a = {"w": torch.tensor([1.0, 2.0]), "steps": torch.tensor(3)}
    b = {"w": torch.tensor([3.0, 6.0]), "steps": torch.tensor(4)}
    before = copy.deepcopy([a, b])
    avg = average_weights([a, b])
    assert torch.equal(avg["w"], torch.tensor([2.0, 4.0]))
    assert avg["steps"] == 4 and avg["steps"].dtype == torch.int64  # integers: the last snapshot's
    assert all(torch.equal(x[k], y[k]) for x, y in zip([a, b], before) for k in x)
    # one snapshot is its own average; a model's own state dict round-trips
    model = tl.Transformer(tl.TransformerConfig(20, 15, **DATE_MODEL))
    same = average_weights([model.state_dict()])
    assert all(torch.equal(same[k], v) for k, v in model.state_dict().items())
    model.load_state_dict(average_weights([model.state_dict(), model.state_dict()]))


@pytest.mark.parametrize("bad, message", [
    ([], "non-empty list"),
    ({"w": torch.zeros(2)}, "non-empty list"),
    ([{"w": torch.zeros(2)}, {"v": torch.zeros(2)}], "keys differ"),
    ([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}], "has shape"),
    ([{"w": torch.zeros(2)}, [1, 2]], "expected a state dict"),
])
def test_average_refuses_what_is_not_snapshots_of_one_model(bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        average_weights(bad)


@pytest.fixture(scope="module")
def dates():
    model, src_vocab, tgt_vocab, _ = tl.checkpoints.load(tl.CHECKPOINTS / "transformer_dates.pt")
    splits = tl.data.make_date_splits(seed=0)
    quick = [collate(splits.valid[:300], src_vocab, tgt_vocab)]
    other = [collate(splits.valid, src_vocab, tgt_vocab)]  # the shipped model gets a few wrong
    return model, src_vocab, tgt_vocab, splits, quick, other


def test_the_hook_keeps_the_last_snapshots_and_judges_their_average(dates):
    model, _, _, _, quick, other = dates
    model = copy.deepcopy(model)
    lines = []
    hook = AverageAndStop(model, quick, other, target=0.5, confirm_target=1.0, keep=2, report=lines.append)
    first = {k: v.clone() for k, v in model.state_dict().items()}
    assert hook(100, 0.9) is False  # the average reaches 0.5, but the confirmation cannot reach 1.0 ...
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    assert hook(200, 0.8) is False
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    assert hook(300, 0.7) is False
    assert len(hook.snapshots) == 2  # ... and only the last `keep` snapshots are kept
    second = {k: v - 0.01 if v.is_floating_point() and k in dict(model.named_parameters()) else v
              for k, v in model.state_dict().items()}
    expected = average_weights([second, model.state_dict()])
    assert all(torch.allclose(hook.average[k], expected[k]) for k in expected)
    assert hook.log["step"] == [100, 200, 300] and hook.log["raw"] == [0.9, 0.8, 0.7]
    assert hook.log["confirmed"][0] is not None and hook.log["confirmed"][0] < 1.0
    assert len(lines) == 3 and lines[0].startswith("step   100: quick check 0.900 raw") and "go on" in lines[0]
    # after the first call, the average of one snapshot is the model as it was
    fresh = tl.Transformer(model.config)
    fresh.load_state_dict(first)
    assert hook.log["averaged"][0] == evaluate(fresh, quick, TrainConfig())[0]
    assert hook.load_average(fresh) is fresh
    assert all(torch.equal(fresh.state_dict()[k], hook.average[k]) for k in hook.average)


def test_train_stops_where_the_hook_says(dates):
    model, src_vocab, tgt_vocab, splits, quick, other = dates
    model = copy.deepcopy(model)
    hook = AverageAndStop(model, quick, other, target=0.5, confirm_target=0.5)
    loader = make_loader(splits.train[:640], src_vocab, tgt_vocab, batch_size=64, seed=0)
    cfg = TrainConfig(max_steps=300, eval_every=20, schedule="constant", lr=1e-5, progress=False)
    hist = train(model, loader, quick, cfg, on_eval=hook)
    assert hist.step[-1] == 20 and hook.stopped_at == 20 and "on_eval" in hist.stopped


@pytest.mark.parametrize("kwargs, message", [
    (dict(keep=0), "keep"),
    (dict(target=1.5), "target must be an accuracy"),
    (dict(confirm_target=0), "confirm_target must be an accuracy"),
    (dict(report="print"), "report must be a function"),
])
def test_the_hook_checks_its_settings(dates, kwargs, message):
    model, _, _, _, quick, other = dates
    settings = dict(target=0.9, confirm_target=0.9) | kwargs
    with pytest.raises((ValueError, TypeError), match=message):
        AverageAndStop(model, quick, other, **settings)


def test_load_average_needs_an_evaluation_first(dates):
    model, _, _, _, quick, other = dates
    with pytest.raises(ValueError, match="no evaluation has run"):
        AverageAndStop(model, quick, other, 0.9, 0.9).load_average(model)
