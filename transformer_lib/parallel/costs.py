"""What each kind of parallelism sends per training step, computed from the model's sizes, and the
picture of the layouts.
"""
from __future__ import annotations

import torch

from ..model import Transformer, TransformerConfig


def communication_per_step(config: TransformerConfig, batch: int, src_len: int, tgt_len: int,
                           world_size: int = 2) -> dict[str, dict]:
    """Numbers each process sends per training step (forward and backward) with each kind of
    parallelism, for the encoder-decoder `config` on batches of `batch` pairs of `src_len` source
    and `tgt_len` decoder tokens, over `world_size` processes P. Ring algorithms: an
    all-reduce of n numbers sends 2 (P - 1) / P n of them per process, an all-gather or a
    reduce-scatter (P - 1) / P n (Li et al. 2020; Rajbhandari et al. 2020, section 7).

    - data parallel: the gradients, all-reduced: 2 (P-1)/P Psi for Psi parameters.
    - sharded (ZeRO-3 / FSDP): parameters all-gathered in the forward pass and again in the
      backward pass, gradients reduce-scattered: 3 (P-1)/P Psi.
    - tensor parallel (this module's layers): one all-reduce of a (batch, length, d_model)
      activation per sub-layer going forward (g) and one per distinct input going back (f):
      2 + 2 per encoder layer, 3 + 4 per decoder layer (cross-attention's f acts on the query
      and on the memory); the embeddings and output layer stay whole.
    - ring attention (sequence parallel, source and target both cut into P blocks): the key
      and value blocks, (P-1) times per attention layer going forward (cross-attention's are
      the source's), about twice that going back (the blocks travel again with their
      gradients), plus the gradient all-reduce of data parallelism, since every process holds
      every weight.

    Returns {kind: {"numbers": count, "what": description}}.
    """
    P, d = world_size, config.d_model
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        psi = sum(p.numel() for p in Transformer(config).parameters())
    ring = 2 * (P - 1) / P
    enc, dec = batch * src_len * d, batch * tgt_len * d  # one activation of each stack
    n_enc = n_dec = config.n_layers
    tp_all_reduces = n_enc * (2 + 2) * enc + n_dec * (3 * dec + 3 * dec + enc)
    kv_blocks = (P - 1) / P * 2 * (n_enc * enc + n_dec * (dec + enc))  # forward: K and V of every attention layer
    return {
        "data parallel": {"numbers": ring * psi, "what": "gradients, all-reduced once per step"},
        "sharded (FSDP)": {"numbers": 3 * (P - 1) / P * psi,
                           "what": "parameters all-gathered twice, gradients reduce-scattered"},
        "tensor parallel": {"numbers": ring * tp_all_reduces,
                            "what": "activations, all-reduced twice per sub-layer"},
        "ring attention": {"numbers": 3 * kv_blocks + ring * psi,
                           "what": "key/value blocks around the ring, plus the gradients"},
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
