"""Box-and-arrow diagrams: the map of the whole model and the pieces chapters draw with it.

`model_map(highlight=...)` draws the encoder-decoder of Vaswani et al. (2017, Figure 1) as
boxes, with the parts a chapter is about in colour and the rest in grey: the "you are here"
map at the top of chapters 3-10 and the full map on the book's first page. `box` and `arrow`
are the two primitives the chapters' own diagrams use.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from matplotlib.patches import FancyBboxPatch

#: Colours of the Okabe-Ito palette (colour-blind safe), one per kind of part.
COLOURS = {
    "io": "#DDDDDD",         # inputs and outputs
    "embedding": "#009E73",  # the shared embedding matrix and the output projection
    "position": "#CC79A7",   # positional encoding
    "attention": "#56B4E9",  # self-attention
    "masked": "#0072B2",     # masked self-attention
    "cross": "#D55E00",      # encoder-decoder attention
    "ffn": "#E69F00",        # position-wise feed-forward network
    "norm": "#F0E442",       # residual connection and layer normalisation
    "softmax": "#BBBBBB",
}
FADED = "#F2F2F2"

#: The parts of the model a map can highlight, and the chapter that builds each.
PARTS = {
    "embedding": "chapter 10", "position": "chapter 6", "attention": "chapters 3-5",
    "masked": "chapter 8", "cross": "chapter 9", "ffn": "chapter 7", "norm": "chapter 7",
    "encoder": "chapter 7", "decoder": "chapter 9", "output": "chapter 10",
}


def box(ax, x: float, y: float, text: str, colour: str, width: float = 2.4, height: float = 0.62,
        fontsize: float = 9.5, edge: str = "black", lw: float = 1.0, text_colour: str = "black"):
    """A rounded box of `width` x `height` centred on (x, y), with `text` in it (drawn above lines)."""
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height, boxstyle="round,pad=0.03",
                                fc=colour, ec=edge, lw=lw, zorder=3))
    if text:
        ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, color=text_colour, zorder=4)


def arrow(ax, points: Iterable[tuple[float, float]], colour: str = "black", lw: float = 1.3,
          alpha: float = 1.0, shrink: float = 0.0):
    """A poly-line through `points` (at least two (x, y) pairs) with an arrow head at the last one.
    `shrink` (points) leaves a gap at both ends of a two-point arrow, so that it stops at a box."""
    points = list(points)
    if len(points) < 2:
        raise ValueError(f"points must hold at least two (x, y) pairs, got {len(points)}")
    xs, ys = zip(*points)
    if len(points) > 2:
        ax.plot(xs[:-1], ys[:-1], color=colour, lw=lw, alpha=alpha, solid_capstyle="butt", zorder=2)
    ax.annotate("", xy=points[-1], xytext=points[-2], zorder=2,
                arrowprops=dict(arrowstyle="-|>", lw=lw, color=colour, alpha=alpha, shrinkA=shrink, shrinkB=shrink))


def draw_beam_tree(steps, ax=None, title: str | None = None, best: Sequence[str] | None = None):
    """Draw the hypotheses beam search kept at each step as a tree, with their log-probabilities.

    steps: one list per decoding step of `(tokens, log_prob, finished)`, the hypotheses kept
    after that step: `tokens` is the whole prefix as a sequence of token strings (without
    <bos>), `finished` True for a hypothesis that ended with <eos>. A node's parent is its
    prefix without the last token (the root is <bos>); x is the step, y is laid out so that
    branches do not cross. `best`, a token sequence, is drawn in a thick line. Returns the Axes.
    """
    import matplotlib.pyplot as plt

    nodes: dict[tuple, tuple[float, bool]] = {}
    for i, step in enumerate(steps):
        for tokens, log_prob, finished in step:
            tokens = tuple(tokens)
            if len(tokens) != i + 1:
                raise ValueError(f"steps[{i}] must hold prefixes of {i + 1} tokens, got {tokens!r}")
            nodes[tokens] = (float(log_prob), bool(finished))
    if not nodes:
        raise ValueError("steps must hold at least one hypothesis")
    for tokens in list(nodes):  # every ancestor of a kept hypothesis was kept at its own step
        for n in range(1, len(tokens)):
            if tokens[:n] not in nodes:
                raise ValueError(f"the prefix {tokens[:n]!r} of {tokens!r} is missing from steps[{n - 1}]")
    children: dict[tuple, list[tuple]] = {}
    for tokens in nodes:
        children.setdefault(tokens[:-1], []).append(tokens)
    y: dict[tuple, float] = {}

    def place(node, next_leaf):  # depth first: leaves one unit apart, a parent at its children's mean
        kids = sorted(children.get(node, []), key=lambda t: -nodes[t][0])
        if not kids:
            y[node] = next_leaf
            return next_leaf + 1
        for kid in kids:
            next_leaf = place(kid, next_leaf)
        y[node] = sum(y[k] for k in kids) / len(kids)
        return next_leaf

    n_leaves = place((), 0)
    if ax is None:  # about 0.6 inch a step, so that a dozen steps fit a page's column unshrunk
        _, ax = plt.subplots(figsize=(0.62 * len(steps) + 1.6, 0.45 * n_leaves + 1.3))
    best = tuple(best) if best is not None else None
    for tokens, (log_prob, finished) in nodes.items():
        parent = tokens[:-1]
        on_best = best is not None and best[: len(tokens)] == tokens
        ax.plot([len(parent), len(tokens)], [y[parent], y[tokens]], color="#0072B2" if on_best else "#999999",
                lw=2.4 if on_best else 0.9, zorder=0.5)  # under the boxes
        token = tokens[-1]  # the token in the box, the prefix's log-probability above it
        box(ax, len(tokens), y[tokens], token, COLOURS["cross"] if finished else "white", width=0.62, height=0.46,
            fontsize=11 if len(token) == 1 else 8, lw=1.6 if on_best else 0.8,
            text_colour="white" if finished else "black")
        ax.text(len(tokens), y[tokens] - 0.27, f"{log_prob:.2f}", ha="center", va="bottom", fontsize=8, color="#333333")
    box(ax, 0, y[()], "<bos>", COLOURS["io"], width=0.62, height=0.46, fontsize=8)
    ax.set_xlim(-0.5, len(steps) + 0.6)
    ax.set_ylim(n_leaves - 0.4, -0.6)
    ax.set_xticks(range(len(steps) + 1))
    ax.set_xlabel("decoding step (each box: the token written, above it the total log-probability of the prefix)")
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title)
    return ax


#: Every box of the map: (name, part it belongs to, label), bottom to top, per column.
_ENCODER = [("src", "io", "source tokens"), ("src-emb", "embedding", "embedding $\\times \\sqrt{d_{model}}$"),
            ("src-pos", "position", "+ positional encoding"), ("enc-attn", "attention", "self-attention"),
            ("enc-norm1", "norm", "add & norm"), ("enc-ffn", "ffn", "feed-forward"),
            ("enc-norm2", "norm", "add & norm")]
_DECODER = [("tgt", "io", "target, shifted right"), ("tgt-emb", "embedding", "embedding $\\times \\sqrt{d_{model}}$"),
            ("tgt-pos", "position", "+ positional encoding"), ("dec-attn", "masked", "masked self-attention"),
            ("dec-norm1", "norm", "add & norm"), ("dec-cross", "cross", "cross-attention"),
            ("dec-norm2", "norm", "add & norm"), ("dec-ffn", "ffn", "feed-forward"),
            ("dec-norm3", "norm", "add & norm"),
            ("linear", "embedding", "linear ($E^{\\top}$)"), ("softmax", "softmax", "softmax: P(next token)")]
_LAYER_BOXES = {"encoder": {"enc-attn", "enc-norm1", "enc-ffn", "enc-norm2"},
                "decoder": {"dec-attn", "dec-norm1", "dec-cross", "dec-norm2", "dec-ffn", "dec-norm3"},
                "output": {"linear", "softmax"}}


def _lit_boxes(names: set[str]) -> set[str]:
    """The boxes that a set of highlighted part names lights."""
    lit = {"src", "tgt"}
    for name in names:
        lit |= _LAYER_BOXES.get(name, set())
    for column in (_ENCODER, _DECODER):
        for key, part, _ in column:
            if part in names or (part in {"masked", "cross"} and "attention" in names):
                lit.add(key)
    return lit


def _column(ax, x, stages, lit, step):
    """Draw one column of boxes bottom to top, arrows between; return the y of the top box."""
    for i, (key, part, text) in enumerate(stages):
        on = key in lit
        box(ax, x, i * step, text, COLOURS[part] if on else FADED, width=2.5, height=0.56, fontsize=8.5,
            edge="black" if on else "#999999", lw=2.0 if on else 0.8,
            text_colour=("white" if part in {"masked", "cross"} else "black") if on else "#666666")
        if i:
            arrow(ax, [(x, (i - 1) * step + 0.28), (x, i * step - 0.28)], colour="#444444", lw=1.0)
    return (len(stages) - 1) * step


def model_map(highlight: Iterable[str] | str = (), ax=None, title: str | None = None):
    """Draw the whole encoder-decoder (Vaswani et al. 2017, Figure 1), the parts in `highlight` in colour.

    highlight: names from `PARTS` ("embedding", "position", "attention", "masked", "cross",
    "ffn", "norm", "encoder", "decoder", "output"), or "all". "encoder" and "decoder" light
    every box of that layer; "attention" lights every attention box (self, masked and cross).
    Returns the Axes.
    """
    names = {highlight} if isinstance(highlight, str) else set(highlight)
    if names == {"all"}:
        names = set(PARTS)
    unknown = names - set(PARTS)
    if unknown:
        raise ValueError(f"highlight must name parts from {sorted(PARTS)} or 'all', got {sorted(unknown)}")
    lit = _lit_boxes(names)
    if ax is None:
        import matplotlib.pyplot as plt  # on first use: `import transformer_lib` stays light

        _, ax = plt.subplots(figsize=(6.4, 7.0))
    step, x_enc, x_dec = 0.85, 0.0, 3.8
    top_enc = _column(ax, x_enc, _ENCODER, lit, step)
    top_dec = _column(ax, x_dec, _DECODER, lit, step)
    for x, lo, hi, label in [(x_enc, 3, 6, "encoder layer"), (x_dec, 3, 8, "decoder layer")]:
        ax.add_patch(FancyBboxPatch((x - 1.45, lo * step - 0.42), 2.9, (hi - lo) * step + 0.84,
                                    boxstyle="round,pad=0.02", fc="none", ec="#555555", lw=1.0, ls="--"))
        outside = -1.52 if x == x_enc else 1.52       # the label on the outer side of each column
        ax.text(x + outside, (lo + hi) / 2 * step, f"{label} $\\times$ N", rotation=90, va="center",
                ha="right" if x == x_enc else "left", fontsize=8.5)
    # The encoder's output (the memory) feeds the cross-attention of every decoder layer.
    memory = COLOURS["cross"] if "dec-cross" in lit else "#888888"
    y_cross, y_turn = 5 * step, top_enc + 0.7
    arrow(ax, [(x_enc, top_enc + 0.28), (x_enc, y_turn), (1.9, y_turn), (1.9, y_cross), (x_dec - 1.25, y_cross)],
          colour=memory, lw=1.2)
    ax.text(x_enc, y_turn + 0.2, "memory: keys and values", ha="center", fontsize=8, color=memory)
    ax.set_xlim(-1.9, 5.7)
    ax.set_ylim(-0.6, top_dec + 0.6)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def you_are_here(highlight: Iterable[str] | str, title: str = "you are here", figsize=(5.0, 5.4)):
    """A small `model_map` for the top of a chapter: the chapter's parts in colour. Returns the Figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    model_map(highlight, ax=ax, title=title)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------
# The recurrent encoder-decoder of Part I, with and without attention (moved from rnn.py)
# --------------------------------------------------------------------------------------
