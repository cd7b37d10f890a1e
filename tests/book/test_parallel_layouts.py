"""Chapter 17's picture at scale on paper (`book.parallel_layouts.at_scale`): the counts follow
the chapter's formulas, and Llama 3 405B's published sizes and layouts come out as reported."""
import pytest

from transformer_lib.book import parallel_layouts as pl

SMALL = pl.ModelSizes(n_layers=4, d_model=8, d_ff=16, n_heads=4, n_kv_heads=2, vocab=10)


def test_parameters_counted_by_hand():
    # W^Q, W^O: 8 x 8 each; W^K, W^V: 8 x (2 heads x 2) each; three 8 x 16 matrices (SwiGLU)
    per_layer = 2 * 64 + 2 * 32 + 3 * 128
    assert SMALL.layer_parameters() == per_layer
    assert SMALL.parameters() == 4 * per_layer + 2 * 10 * 8
    tied = pl.ModelSizes(4, 8, 16, 4, 2, 10, gated=False, tied=True)
    assert tied.parameters() == 4 * (2 * 64 + 2 * 32 + 2 * 128) + 10 * 8


def test_llama3_405b_has_405_billion_parameters():
    assert round(pl.LLAMA3_405B.parameters() / 1e9) == 406  # "405B": 405.85 billion


@pytest.mark.parametrize("name", list(pl.LLAMA3_405B_LAYOUTS))
def test_the_published_layouts_give_the_gpus_and_the_16m_token_batches(name):
    layout = pl.LLAMA3_405B_LAYOUTS[name]
    r = pl.at_scale(pl.LLAMA3_405B, layout)
    assert r["gpus"] == int(name.split()[0].replace(",", ""))
    assert r["tokens_per_step"] == 2**24
    held = r["memory"]["weights"] + r["memory"]["training state"] + r["memory"]["activations, recomputed"]
    assert held < 80e9  # fits an 80 GB H100 with recomputation


def test_one_gpu_holds_everything_and_sends_nothing():
    r = pl.at_scale(SMALL, pl.Layout(seq_len=16, batch_per_dp=2))
    psi = SMALL.parameters()
    assert r["memory"]["weights"] == 2 * psi and r["memory"]["training state"] == 16 * psi
    assert r["sent"] == {"data": 0, "tensor": 0, "pipeline": 0, "context": 0}


def test_data_parallel_traffic_is_the_chapter_formula():
    psi = SMALL.parameters()
    P = 4
    ddp = pl.at_scale(SMALL, pl.Layout(dp=P, shard="none", seq_len=16))["sent"]["data"]
    zero3 = pl.at_scale(SMALL, pl.Layout(dp=P, shard="zero3", seq_len=16))["sent"]["data"]
    once = pl.at_scale(SMALL, pl.Layout(dp=P, shard="no-reshard", seq_len=16))["sent"]["data"]
    assert ddp == pytest.approx(2 * (P - 1) / P * 2 * psi)
    assert zero3 == pytest.approx(1.5 * ddp) and once == pytest.approx(ddp)


def test_tensor_pipeline_and_context_traffic_counted_by_hand():
    layout = pl.Layout(tp=2, cp=2, pp=2, seq_len=16, batch_per_dp=4, micro_batch=2)
    r = pl.at_scale(SMALL, layout)["sent"]
    activation = 2 * (16 // 2) * 2 * 8  # bf16, s / cp positions, micro-batch 2, width 8
    micro, layers = 2, 2
    assert r["tensor"] == pytest.approx(micro * layers * 4 * 2 * (1 / 2) * activation)
    assert r["pipeline"] == pytest.approx(micro * 2 * activation / 2)
    kv = 2 * 2 * 16 * 2 * 2 * 2 / 2  # bf16, K and V, whole sequence, micro-batch 2, 2 heads of 2, / tp
    assert r["context"] == pytest.approx(micro * layers * 2 * (1 / 2) * kv)


def test_bad_sizes_and_layouts_are_refused_with_their_names():
    with pytest.raises(ValueError, match="n_layers"):
        pl.ModelSizes(0, 8, 16, 4, 2, 10)
    with pytest.raises(ValueError, match="divisible by n_heads"):
        pl.ModelSizes(2, 10, 16, 4, 2, 10)
    with pytest.raises(ValueError, match="tp"):
        pl.Layout(tp=0)
    with pytest.raises(ValueError, match="shard"):
        pl.Layout(shard="zero2")
    with pytest.raises(ValueError, match="cp"):
        pl.Layout(cp=3, seq_len=16)
    with pytest.raises(ValueError, match="tp"):
        pl.at_scale(SMALL, pl.Layout(tp=8, seq_len=16))
    with pytest.raises(ValueError, match="pp"):
        pl.at_scale(SMALL, pl.Layout(pp=8, seq_len=16))


def test_runs_of_a_schedule_row_merge_one_pass_and_keep_each_wait():
    assert pl._runs(["F0", "B0", "B0", None, None, "F1"]) == [
        (0, "F0", 1), (1, "B0", 2), (3, None, 1), (4, None, 1), (5, "F1", 1)]


def test_the_state_bars_and_the_loss_pair_draw_and_refuse_bad_input():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    column = {"parameters": 2**20, "gradients": 2**20, "optimizer": 2**21}
    fig = pl.draw_state_bars({"DDP\nprocess 0": column, "FSDP\nprocess 0":
                              {k: v / 2 for k, v in column.items()}})
    try:
        ax = fig.axes[0]
        heights = [p.get_height() for p in ax.patches]
        assert heights == [1, 1, 2, 0.5, 0.5, 1]                  # MiB, stacked per column
        assert ax.get_ylabel() == "MiB held (float64)"
    finally:
        plt.close(fig)
    fig = pl.plot_loss_pair({"float32": [3, 2, 1], "bfloat16": [3, 2.1, 1.1]}, "two runs")
    try:
        lines = fig.axes[0].get_lines()
        assert [list(line.get_xdata()) for line in lines] == [[1, 2, 3]] * 2
        assert [line.get_linestyle() for line in lines] == ["-", "--"]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="gradients"):
        pl.draw_state_bars({"DDP": {"parameters": 1}})
    with pytest.raises(ValueError, match="same number of steps"):
        pl.plot_loss_pair({"a": [1, 2], "b": [1]}, "t")
