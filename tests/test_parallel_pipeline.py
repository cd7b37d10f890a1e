"""transformer_lib.parallel's pipeline (PyTorch's GPipe and 1F1B schedules on two processes,
equal to one process in float64; the schedule simulation and its bubble) and mixed precision
(`Autocast`, `op_dtypes`). The launched workers live at the top level of this module, so that
the launched processes can import them by name."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.lm import CausalLM, CausalLMConfig
from transformer_lib.runtime import TorchTooOld

try:
    from transformer_lib import parallel
except TorchTooOld as too_old:  # chapter 17 needs a newer torch than the rest of the book
    pytest.skip(str(too_old), allow_module_level=True)

CONFIG = dict(vocab_size=20, d_model=16, n_heads=2, d_ff=32, n_layers=4, max_len=16, tie_output=False)


@pytest.fixture(scope="module")
def one_and_two():
    torch.manual_seed(0)
    model = CausalLM(CausalLMConfig(**CONFIG)).double()
    ids, targets = torch.randint(0, 20, (8, 12)), torch.randint(0, 20, (8, 12))
    loss = F.cross_entropy(model(ids).flatten(0, 1), targets.flatten())
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    results = parallel.launch(parallel.pipeline_schedules_worker, CONFIG, model.state_dict(), ids, targets, 4,
                              timeout=240)
    return loss.detach(), grads, results


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_two_stage_pipeline_equals_one_process(one_and_two, schedule):
    loss, grads, results = one_and_two
    first, last = results[0][schedule], results[1][schedule]
    assert first["loss"] is None and (first["stage"], last["stage"]) == (0, 1)
    torch.testing.assert_close(last["loss"], loss, rtol=1e-12, atol=1e-12)
    assert set(first["grads"]).isdisjoint(last["grads"])
    got = {**first["grads"], **last["grads"]}
    assert set(got) == set(grads)
    for name, grad in grads.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-10, atol=1e-12, msg=name)
    assert any(n.startswith("embed") for n in first["grads"]) and "out.weight" in last["grads"]


def test_stages_take_consecutive_layers_and_check_their_model():
    assert parallel.stage_layers(4, 2) == [[0, 1], [2, 3]]
    assert parallel.stage_layers(5, 3) == [[0, 1], [2, 3], [4]]
    model = CausalLM(CausalLMConfig(**CONFIG))
    stages = [parallel.LMStage(model, s, 2) for s in range(2)]
    ids = torch.randint(0, 20, (2, 5))
    torch.testing.assert_close(stages[1](stages[0](ids)), model(ids))
    assert stages[1].full_names()["layers.0.ff.w_1.weight"] == "layers.2.ff.w_1.weight"
    with pytest.raises(ValueError, match="stages=5"):
        parallel.stage_layers(4, 5)
    with pytest.raises(ValueError, match="stage must be"):
        parallel.LMStage(model, 2, 2)
    with pytest.raises(ValueError, match="tie_output=False"):
        parallel.LMStage(CausalLM(CausalLMConfig(**{**CONFIG, "tie_output": True})), 0, 2)
    with pytest.raises(TypeError, match="CausalLM"):
        parallel.LMStage(torch.nn.Linear(2, 2), 0, 2)
    with pytest.raises(ValueError, match="x"):
        stages[1](torch.zeros(2, 5, 7))  # not d_model wide


def test_pipeline_worker_checks_its_batch_before_communicating():
    ids = torch.zeros(6, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="micro_batches=4"):
        parallel.pipeline_worker(CONFIG, {}, ids, ids, 4)
    with pytest.raises(ValueError, match="schedule"):
        parallel.pipeline_worker(CONFIG, {}, ids, ids, 2, "zero-bubble")
    with pytest.raises(ValueError, match="targets"):
        parallel.pipeline_worker(CONFIG, {}, ids, ids[:, :3], 2)
    with pytest.raises(ValueError, match="schedules"):
        parallel.pipeline_schedules_worker(CONFIG, {}, ids, ids, 2, "gpipe")
    with pytest.raises(ValueError, match="schedule"):
        parallel.pipeline_schedules_worker(CONFIG, {}, ids, ids, 2, ("gpipe", "zb"))


def test_gpipe_and_1f1b_slots_drawn_by_hand():
    gpipe = parallel.simulate_schedule(2, 2)
    assert gpipe == [["F0", "F1", None, None, "B0", "B1"], [None, "F0", "F1", "B0", "B1", None]]
    one = parallel.simulate_schedule(2, 4, "1f1b")
    assert one[1] == [None, "F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3", None]
    assert one[0][:2] == ["F0", "F1"]


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 5), m=st.integers(1, 12), schedule=st.sampled_from(["gpipe", "1f1b"]),
       backward=st.integers(1, 3))
def test_every_stage_idles_the_bubble_fraction(p, m, schedule, backward):
    rows = parallel.simulate_schedule(p, m, schedule, backward)
    for row in rows:
        assert sorted(x for x in row if x) == sorted([f"F{i}" for i in range(m)]
                                                     + [f"B{i}" for i in range(m)] * backward)
    assert len(rows[0]) == (m + p - 1) * (1 + backward)
    for idle in parallel.idle_fraction(rows):
        assert idle == pytest.approx(parallel.bubble_formula(p, m))


@settings(max_examples=20, deadline=None)
@given(p=st.integers(2, 5), m=st.integers(1, 12))
def test_1f1b_holds_at_most_p_micro_batches_in_flight(p, m):
    """1F1B's point: stage s stores the activations of at most p - s micro-batches at once,
    GPipe's first stage all m."""
    def most_in_flight(row):
        held = most = 0
        for i, slot in enumerate(row):
            if slot and slot[0] == "F":
                held += 1
            if slot and slot[0] == "B" and (i + 1 == len(row) or row[i + 1] != slot):
                held -= 1
            most = max(most, held)
        return most
    one = parallel.simulate_schedule(p, m, "1f1b")
    assert all(most_in_flight(row) <= min(p - s, m) for s, row in enumerate(one))
    assert most_in_flight(parallel.simulate_schedule(p, m, "gpipe")[0]) == m


def test_the_simulation_checks_its_arguments():
    with pytest.raises(ValueError, match="stages"):
        parallel.simulate_schedule(0, 2)
    with pytest.raises(ValueError, match="micro_batches"):
        parallel.simulate_schedule(2, 0)
    with pytest.raises(ValueError, match="schedule"):
        parallel.simulate_schedule(2, 2, "interleaved")
    with pytest.raises(ValueError, match="backward_slots"):
        parallel.simulate_schedule(2, 2, "gpipe", 0)
    with pytest.raises(ValueError, match="rows"):
        parallel.idle_fraction([])
    assert parallel.bubble_formula(2, 8) == pytest.approx(1 / 9)


# --------------------------------------------------------------------------- mixed precision


def test_autocast_keeps_float32_master_weights_and_computes_products_in_bfloat16():
    torch.manual_seed(0)
    model = CausalLM(CausalLMConfig(**CONFIG))
    amp = parallel.Autocast(model)
    ids = torch.randint(0, 20, (2, 6))
    seen = parallel.op_dtypes(lambda: F.cross_entropy(amp(ids).flatten(0, 1), ids.flatten()).backward())
    assert amp(ids).dtype == torch.float32
    assert seen["addmm"] == [torch.bfloat16] or torch.bfloat16 in seen["addmm"]
    assert seen["_log_softmax"] == [torch.float32]
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
    assert list(amp.state_dict())[0].startswith("module.")
    # close to float32, not equal to it
    diff = (amp(ids) - model(ids)).abs().max().item()
    assert 0 < diff < 0.5
    plain = parallel.op_dtypes(lambda: model(ids))
    assert all(dtypes == [torch.float32] for dtypes in plain.values())


def test_autocast_and_op_dtypes_check_their_arguments():
    with pytest.raises(TypeError, match="model"):
        parallel.Autocast("a model")
    with pytest.raises(ValueError, match="dtype"):
        parallel.Autocast(torch.nn.Linear(2, 2), dtype=torch.float64)
    with pytest.raises(ValueError, match="device_type"):
        parallel.Autocast(torch.nn.Linear(2, 2), device_type="tpu")
    with pytest.raises(ValueError, match="float32"):
        parallel.Autocast(torch.nn.Linear(2, 2).double())
    with pytest.raises(TypeError, match="fn"):
        parallel.op_dtypes(3)


# --------------------------------------------------------------------------- two dimensions: a (dp, tp) mesh


@pytest.mark.slow
def test_a_two_by_two_mesh_trains_one_step_like_one_process():
    torch.manual_seed(0)
    layer = tl.EncoderLayer(32, 4, 64, 0.0).double()
    x = torch.randn(4, 6, 32, dtype=torch.float64)
    reference, loss = parallel.one_process_step(layer, x, 0.1)
    results = parallel.launch(parallel.mesh_step_worker, layer, x, 0.1, world_size=4, timeout=240)
    full = dict(reference.named_parameters())
    moved = max((full[n] - p).abs().max().item() for n, p in layer.named_parameters())
    assert moved > 1e-3  # the step changed the weights
    assert [(r["dp_rank"], r["tp_rank"]) for r in results] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [r["tp_group"] for r in results] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["dp_group"] for r in results] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    for r in results:
        torch.testing.assert_close(r["loss"], loss, rtol=1e-12, atol=1e-12)
        half = parallel.one_process_step(layer, x.chunk(2)[r["dp_rank"]], 0.1)[1]  # the rows it read
        torch.testing.assert_close(r["own_loss"], half, rtol=1e-12, atol=1e-12)
        mine = parallel.shard_like(parallel.tensor_parallel(layer, r["tp_rank"], 2), full)
        assert set(r["state"]) == set(mine)
        for name, value in mine.items():
            torch.testing.assert_close(r["state"][name], value, rtol=1e-10, atol=1e-12, msg=name)
    # the two replicas of each slice agree bit for bit
    for a, b in ((0, 2), (1, 3)):
        assert all(torch.equal(results[a]["state"][n], results[b]["state"][n]) for n in results[a]["state"])


def test_the_mesh_step_checks_its_arguments_before_communicating():
    layer = tl.EncoderLayer(8, 2, 16, 0.0).double()
    with pytest.raises(ValueError, match="lr"):
        parallel.mesh_step_worker(layer, torch.zeros(2, 3, 8), 0.0)
    with pytest.raises(ValueError, match="dp"):
        parallel.mesh_step_worker(layer, torch.zeros(2, 3, 8), 0.1, dp=0)
    with pytest.raises(ValueError, match="lr"):
        parallel.one_process_step(layer, torch.zeros(2, 3, 8), -1.0)


def test_the_benchmark_reports_the_precision_and_mesh_study():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "parallel.py"
    spec = importlib.util.spec_from_file_location("bench_parallel", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    runs = {name: {"seconds_per_step": s, "mean_loss_of_20_steps_ending_at": {"100": 1.1, "400": loss}}
            for name, s, loss in (("float32", 0.05, 0.64), ("bfloat16 autocast", 0.1, 0.65))}
    data = {"precision": {"date": "2026-11-26 20:33", "commit": "abc", "steps": 400, "load": 1.0, "runs": runs,
                          "mesh": {"seconds": 9.5, "worst_weight_difference": 3e-17, "worst_loss_difference": 6e-17}}}
    text = "\n".join(bench.section(data))
    assert "Awaiting the final run" in text  # the timing table is not measured yet
    assert "steps 381-400" in text and "| bfloat16 autocast | 100.0 | 1.100 | 0.650 |" in text
    assert "2.00 times as long" in text and "9.5 s" in text
    assert bench.precision_section({}) == []


def test_the_schedule_figure_draws_every_pass_and_refuses_bad_input():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transformer_lib.book import parallel_layouts

    rows = {s: parallel.simulate_schedule(2, 4, s, 2) for s in ("gpipe", "1f1b")}
    fig = parallel_layouts.draw_schedule(rows)
    try:
        axes = fig.axes
        assert len(axes) == 2
        for ax, r in zip(axes, rows.values()):
            labels = [t.get_text() for t in ax.texts]
            passes = [slot for row in r for slot in dict.fromkeys(row) if slot is not None]
            assert sorted(labels) == sorted(p[1:] for p in passes)  # one label per pass
            widths = sorted(p.get_width() for p in ax.patches if p.get_facecolor()[:3] != (1, 1, 1))
            assert widths == sorted(1 if p[0] == 'F' else 2 for p in passes)  # a backward: 2 slots
            assert [t.get_text() for t in ax.get_yticklabels()] == ["stage 0", "stage 1"]
            assert min(t.get_fontsize() for t in ax.texts) >= 9
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="schedules"):
        parallel_layouts.draw_schedule({})
