"""The pictures of chapter 17: who holds what under each kind of parallelism (`draw_layouts`;
what each sends for the chapter's models is `transformer_lib.parallel.communication_per_step`),
pipeline schedules (`draw_schedule`), the training state each process holds (`draw_state_bars`),
two training runs' losses side by side (`plot_loss_pair`),
and the picture at scale, on paper (`ModelSizes`, `Layout`, `at_scale`): memory per GPU and
numbers sent per GPU per training step for a decoder-only model under a 4-D layout (tensor,
context, pipeline and sharded data parallelism), from the chapter's formulas, with the model and
the layouts published for Llama 3 405B (Dubey et al. 2024, arXiv:2407.21783, Tables 3 and 4)
to check them against.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["draw_layouts", "draw_schedule", "draw_state_bars", "plot_loss_pair", "ModelSizes", "Layout", "at_scale",
           "LLAMA3_405B", "LLAMA3_405B_LAYOUTS"]


@dataclass(frozen=True)
class ModelSizes:
    """A decoder-only Transformer's sizes: `n_layers` layers of width `d_model`, a gated (SwiGLU,
    three matrices) or plain (two) feed-forward of `d_ff` units, `n_heads` query heads and
    `n_kv_heads` key/value heads (grouped-query attention), a vocabulary of `vocab` tokens with
    separate input and output matrices unless `tied`. Norm weights are left out (a few per layer)."""
    n_layers: int
    d_model: int
    d_ff: int
    n_heads: int
    n_kv_heads: int
    vocab: int
    gated: bool = True
    tied: bool = False

    def __post_init__(self):
        for name in ("n_layers", "d_model", "d_ff", "n_heads", "n_kv_heads", "vocab"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}), "
                             f"and n_heads by n_kv_heads ({self.n_kv_heads})")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def layer_parameters(self) -> int:
        kv = self.n_kv_heads * self.d_head
        attention = 2 * self.d_model * self.d_model + 2 * self.d_model * kv  # W^Q, W^O; W^K, W^V
        return attention + (3 if self.gated else 2) * self.d_model * self.d_ff

    def parameters(self) -> int:
        return self.n_layers * self.layer_parameters() + (1 if self.tied else 2) * self.vocab * self.d_model


@dataclass(frozen=True)
class Layout:
    """`tp` x `cp` x `pp` x `dp` GPUs: tensor parallel (Megatron, with its sequence parallelism),
    context parallel (each GPU holds `seq_len / cp` positions), pipeline parallel (`n_layers / pp`
    layers per stage) and data parallel with the training state sharded (`shard`: "zero3", the
    weights gathered twice per step; "no-reshard", gathered once and kept through the backward
    pass, as Llama 3's FSDP does; "none", plain DDP). Each data-parallel rank reads
    `batch_per_dp` sequences of `seq_len` tokens per step, in micro-batches of `micro_batch`."""
    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    seq_len: int = 8192
    batch_per_dp: int = 1
    micro_batch: int = 1
    shard: str = "zero3"

    def __post_init__(self):
        for name in ("tp", "cp", "pp", "dp", "seq_len", "batch_per_dp", "micro_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.shard not in ("zero3", "no-reshard", "none"):
            raise ValueError(f"shard must be 'zero3', 'no-reshard' or 'none', got {self.shard!r}")
        if self.seq_len % self.cp or self.batch_per_dp % self.micro_batch:
            raise ValueError(f"seq_len ({self.seq_len}) must be divisible by cp ({self.cp}) and "
                             f"batch_per_dp ({self.batch_per_dp}) by micro_batch ({self.micro_batch})")

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def tokens_per_step(self) -> int:
        return self.dp * self.batch_per_dp * self.seq_len


def at_scale(model: ModelSizes, layout: Layout, weight_bytes: int = 2, state_bytes: int = 16) -> dict:
    """Memory per GPU and numbers sent per GPU per step, in bytes, from the chapter's formulas.

    Memory: the bf16 weights a GPU holds (`weight_bytes` each: its `1/(tp pp)` slice; under
    "zero3" only the `1/dp` shard it keeps at rest, leaving out the one layer's slice gathered
    whole while that layer runs; under "no-reshard", the whole slice); the training state (fp32 master
    weights, gradients and Adam's two moments: `state_bytes` = 16 per parameter, divided by
    `tp pp dp` when sharded, by `tp pp` under "none"); the activations of a stage, kept for the
    backward pass for up to `pp` micro-batches in flight (1F1B), of `s = seq_len / cp` positions
    each, with sequence parallelism: with full recomputation each layer's input only,
    `2 s b h / tp` bytes ("activations, recomputed"), and with nothing recomputed Korthikanti et
    al.'s `34 s b h / tp` bytes per layer (a GPT layer in 16 bits, the attention scores not
    stored, as in FlashAttention; "activations, stored").

    Sent per step (ring collectives, `2 (P-1)/P n` for an all-reduce, `(P-1)/P n` for an
    all-gather or a reduce-scatter): data parallel, the gradients all-reduced (or reduce-scattered
    with the weights all-gathered once or twice), gradients and weights both counted at
    `weight_bytes` (Llama 3 reduce-scatters its gradients in fp32, twice the gradients' share
    counted here); tensor parallel, two all-reduces (or a
    reduce-scatter and an all-gather) of the activations per layer each way, per micro-batch;
    pipeline, one micro-batch's activations forward and its gradient back per stage boundary;
    context parallel, the keys and values all-gathered per layer going forward and their
    gradients reduce-scattered going back (Llama 3's all-gather form; a ring sends as much).
    The weights are spread evenly over the stages, embedding and output matrices included; the
    busiest stage runs `ceil(n_layers / pp)` layers (Llama 3 takes a layer from the first and
    the last stage, which hold the embedding and the output matrix: 126 = 16 x 8 - 2). Returns
    a dict of byte counts and the layout's sizes."""
    if model.n_layers < layout.pp:
        raise ValueError(f"n_layers ({model.n_layers}) must be at least pp ({layout.pp}): one per stage")
    if model.n_heads % layout.tp:
        raise ValueError(f"n_heads ({model.n_heads}) must be divisible by tp ({layout.tp})")
    psi = model.parameters()
    split = layout.tp * layout.pp
    held = psi / split  # the parameters of one GPU's slice of the model
    dp = layout.dp
    sharded = layout.shard != "none"
    weights = weight_bytes * held / (dp if layout.shard == "zero3" else 1)
    state = state_bytes * held / (dp if sharded else 1)
    s, b, h = layout.seq_len // layout.cp, layout.micro_batch, model.d_model
    activation = weight_bytes * s * b * h  # one layer's input for one micro-batch, whole
    layers_here = math.ceil(model.n_layers / layout.pp)  # the busiest stage
    micro_batches = layout.batch_per_dp // layout.micro_batch
    in_flight = min(layout.pp, micro_batches)  # 1F1B: the first stage holds up to pp micro-batches
    recomputed = activation / layout.tp * layers_here * in_flight
    stored = 17 * activation / layout.tp * layers_here * in_flight  # 34 s b h bytes per layer

    def ring(P, n, passes):  # passes: 2 for an all-reduce, 1 for an all-gather or reduce-scatter
        return passes * (P - 1) / P * n

    gathers = {"zero3": 2, "no-reshard": 1, "none": 0}[layout.shard]
    data = (ring(dp, weight_bytes * held, 2) if not sharded
            else ring(dp, weight_bytes * held, 1) * (gathers + 1))
    tensor = micro_batches * layers_here * 4 * ring(layout.tp, activation, 2)
    pipeline = micro_batches * 2 * activation / layout.tp if layout.pp > 1 else 0.0
    kv = weight_bytes * 2 * layout.seq_len * b * model.n_kv_heads * model.d_head / layout.tp
    context = micro_batches * layers_here * 2 * ring(layout.cp, kv, 1)
    return {"parameters": psi, "gpus": layout.gpus, "tokens_per_step": layout.tokens_per_step,
            "memory": {"weights": weights, "training state": state, "activations, recomputed": recomputed,
                       "activations, stored": stored},
            "sent": {"data": data, "tensor": tensor, "pipeline": pipeline, "context": context}}


#: Llama 3 405B (Dubey et al. 2024, Table 3): 126 layers, width 16,384, SwiGLU feed-forward of
#: 53,248, 128 query heads and 8 key/value heads; its tokenizer's 128,256 tokens (the table
#: rounds to 128K); input and output matrices not tied.
LLAMA3_405B = ModelSizes(n_layers=126, d_model=16384, d_ff=53248, n_heads=128, n_kv_heads=8, vocab=128256)

#: The three layouts of Llama 3 405B's pre-training (Dubey et al. 2024, Table 4): GPUs, then
#: TP, CP, PP, DP, sequence length and batch size per DP rank; 16M tokens per batch each time.
LLAMA3_405B_LAYOUTS = {
    "8,192 GPUs, 8K context": Layout(tp=8, cp=1, pp=16, dp=64, seq_len=8192, batch_per_dp=32, shard="no-reshard"),
    "16,384 GPUs, 8K context": Layout(tp=8, cp=1, pp=16, dp=128, seq_len=8192, batch_per_dp=16, shard="no-reshard"),
    "16,384 GPUs, 128K context": Layout(tp=8, cp=16, pp=16, dp=8, seq_len=131072, batch_per_dp=16,
                                        shard="no-reshard"),
}


def draw_layouts(figsize=(10.0, 5.6)):
    """The four ways to split the work between two processes, as who holds what: a batch of
    sequences (rows) by positions (columns), and a weight matrix (two for tensor parallelism),
    each cell coloured by the process that holds it (blue: process 0, orange: process 1, grey:
    both hold a copy). Under each panel, what the processes send each other. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    blue, orange, grey = "#0072B2", "#E69F00", "#BBBBBB"
    split_rows = lambda i, j, n, m: blue if i < n // 2 else orange  # noqa: E731
    split_cols = lambda i, j, n, m: blue if j < m // 2 else orange  # noqa: E731
    both = lambda i, j, n, m: grey  # noqa: E731
    panels = [
        ("data parallel (DDP)", split_rows, [("weights", both)], "sends: gradients, one all-reduce per step"),
        ("tensor parallel (Megatron-LM)", both, [("$W_1$, $W^Q, W^K, W^V$", split_cols), ("$W_2$, $W^O$", split_rows)],
         "sends: outputs, one all-reduce per sub-layer"),
        ("sequence parallel (ring attention)", split_cols, [("weights", both)],
         "sends: key/value blocks around the ring"),
        ("sharded state (ZeRO, FSDP)", split_rows, [("weights, Adam state", split_rows)],
         "sends: weights gathered layer by layer,\ngradients reduce-scattered"),
    ]
    fig, axes = plt.subplots(2, 2, figsize=figsize)
    for ax, (title, batch_colour, weights, note) in zip(axes.flat, panels):
        _grid(ax, Rectangle, 0.0, 4, 8, batch_colour, "batch: sequences x positions")
        for k, (label, colour) in enumerate(weights):
            _grid(ax, Rectangle, 11.0 + 5.5 * k, 4, 4, colour, label)
        ax.set_title(title, fontsize=11)
        ax.text(10.25, -0.6, note, ha="center", va="top", fontsize=9)
        ax.set_xlim(-0.5, 21.0)
        ax.set_ylim(-2.6, 5.4)
        ax.set_aspect("equal")
        ax.axis("off")
    fig.legend(handles=[Patch(color=blue, label="held by process 0"), Patch(color=orange, label="held by process 1"),
                        Patch(color=grey, label="a copy on each process")],
               loc="lower center", ncol=3, frameon=False, fontsize=9.5)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def _grid(ax, rectangle, x0: float, rows: int, cols: int, colour, label: str) -> None:
    for i in range(rows):
        for j in range(cols):
            ax.add_patch(rectangle((x0 + j, rows - 1 - i), 1, 1, fc=colour(i, j, rows, cols), ec="white", lw=1.2))
    ax.text(x0 + cols / 2, rows + 0.25, label, ha="center", va="bottom", fontsize=9)


def draw_schedule(schedules: dict, figsize=(10.0, 3.4)):
    """Pipeline schedules as stage (rows) by time slot (columns): `schedules` maps a title to the
    rows of `parallel.simulate_schedule` ("F3", "B0" or None per slot). Forward passes are blue,
    backward passes orange and hatched (so that they differ without colour too), waiting slots
    white; each pass is one box, as many slots wide as it lasts, labelled with its micro-batch.
    One panel per schedule, one above the other, on the same time axis. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    if not isinstance(schedules, dict) or not schedules:
        raise ValueError("schedules must be a non-empty dict: title -> rows of simulate_schedule")
    blue, orange = "#0072B2", "#E69F00"
    width = max(len(row) for rows in schedules.values() for row in rows)
    fig, axes = plt.subplots(len(schedules), 1, figsize=figsize, squeeze=False)
    for ax, (title, rows) in zip(axes[:, 0], schedules.items()):
        for s, row in enumerate(rows):
            for t, slot, length in _runs(row):
                if slot is None:
                    for u in range(t, t + length):
                        ax.add_patch(Rectangle((u, s), 1, 1, fc="white", ec="#BBBBBB", lw=0.8))
                    continue
                forward = slot.startswith("F")
                ax.add_patch(Rectangle((t, s), length, 1, fc=blue if forward else orange, ec="white",
                                       lw=1.2, hatch=None if forward else "//"))
                ax.text(t + length / 2, s + 0.5, slot[1:], ha="center", va="center", fontsize=9,
                        color="white" if forward else "black")
        ax.set_xlim(0, width)
        ax.set_ylim(len(rows), 0)
        ax.set_yticks([s + 0.5 for s in range(len(rows))], [f"stage {s}" for s in range(len(rows))], fontsize=9)
        ax.set_xticks([])
        ax.set_title(title, fontsize=10, loc="left")
        for side in ("top", "right", "bottom", "left"):
            ax.spines[side].set_visible(False)
    axes[-1, 0].set_xlabel("time slot (one forward pass each) \u2192", fontsize=9)
    fig.legend(handles=[Patch(fc=blue, label="forward pass of micro-batch i"),
                        Patch(fc=orange, hatch="//", label="backward pass"),
                        Patch(fc="white", ec="#BBBBBB", label="waiting (the bubble)")],
               loc="lower center", ncol=3, frameon=False, fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def _runs(row):
    """(start, slot, length) for each run of equal consecutive slots of a schedule's row: a
    backward pass of two slots is one pass, drawn once."""
    runs = []
    for t, slot in enumerate(row):
        if runs and runs[-1][1] == slot and slot is not None:
            runs[-1][2] += 1
        else:
            runs.append([t, slot, 1])
    return [tuple(r) for r in runs]


def draw_state_bars(held: dict, dtype: str = "float64", figsize=(6.5, 3.6)):
    """Stacked bars of the training state each process holds: `held` maps a column label (e.g.
    "DDP\nprocess 0") to {part: bytes} for the parts parameters, gradients and optimizer, drawn
    in MiB (2^20 bytes) in three colour-blind-safe colours. Returns the figure."""
    import matplotlib.pyplot as plt

    parts = ("parameters", "gradients", "optimizer")
    if not isinstance(held, dict) or not held:
        raise ValueError("held must be a non-empty dict: column label -> {part: bytes}")
    for label, column in held.items():
        if set(column) != set(parts):
            raise ValueError(f"held[{label!r}] must give bytes for {parts}, got {sorted(column)}")
    fig, ax = plt.subplots(figsize=figsize)
    for x, column in enumerate(held.values()):
        bottom = 0.0
        for part, colour in zip(parts, ("#0072B2", "#E69F00", "#009E73")):
            mib = column[part] / 2**20
            ax.bar(x, mib, bottom=bottom, color=colour, label=part if x == 0 else None)
            bottom += mib
    ax.set_xticks(range(len(held)), list(held))
    ax.set(ylabel=f"MiB held ({dtype})", title="Training state per process, after one Adam step")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_loss_pair(curves: dict, title: str, figsize=(6.5, 3.6)):
    """Two or more training runs' losses against the step (1, 2, ...), the first solid, the
    next dashed, dotted, dash-dotted: `curves` maps a run's name to its losses, all of the same
    length. Returns the figure."""
    import matplotlib.pyplot as plt

    if not isinstance(curves, dict) or not 1 <= len(curves) <= 4:
        raise ValueError("curves must be a dict of one to four runs: name -> losses")
    lengths = {len(c) for c in curves.values()}
    if len(lengths) != 1:
        raise ValueError(f"every run needs the same number of steps, got {sorted(lengths)}")
    fig, ax = plt.subplots(figsize=figsize)
    for (name, losses), style in zip(curves.items(), ("-", "--", ":", "-.")):
        ax.plot(range(1, len(losses) + 1), list(losses), style, label=name)
    ax.set(xlabel="training step", ylabel="training loss (label-smoothed)", title=title)
    ax.legend()
    fig.tight_layout()
    return fig
