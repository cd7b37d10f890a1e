"""The picture of chapter 17: who holds what under each kind of parallelism (what each sends is
computed by `transformer_lib.parallel.communication_per_step`)."""
from __future__ import annotations

__all__ = ["draw_layouts"]


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
        ("sharded state (ZeRO, FSDP)", split_rows, [("weights + Adam state", split_rows)],
         "sends: weights gathered layer by layer,\ngradients reduce-scattered"),
    ]
    fig, axes = plt.subplots(2, 2, figsize=figsize)
    for ax, (title, batch_colour, weights, note) in zip(axes.flat, panels):
        _grid(ax, Rectangle, 0.0, 4, 8, batch_colour, "batch: sequences x positions")
        for k, (label, colour) in enumerate(weights):
            _grid(ax, Rectangle, 10.0 + 5.5 * k, 4, 4, colour, label)
        ax.set_title(title, fontsize=11)
        ax.text(9.75, -0.6, note, ha="center", va="top", fontsize=9)
        ax.set_xlim(-0.5, 20.0)
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
