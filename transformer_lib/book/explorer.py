"""The attention explorer: attention maps to explore, in a notebook and on the book's website.

`AttentionExplorer` is a Jupyter widget (built on anywidget) that shows the attention weights
of one model run. The reader picks the attention kind (encoder self-attention, decoder
self-attention, cross-attention), the layer, and one head or the mean of all heads, and sees

- a heat map, query tokens down the side and key tokens along the top (viridis, with a legend);
- lines from each query token to the key tokens it attends to, as thick and opaque as the weight;
- the weights as numbers for the row under the pointer or the keyboard focus;
- a small-multiples grid of every layer and head: clicking one opens it;
- a text description of the map (the strongest keys of each query) for screen readers.

Everything is drawn by the widget's own JavaScript (`static/explorer.js`) from the data in the
widget's state, so the explorer keeps working without a kernel: on the static website (from the
widget state saved in the notebook) and in a notebook opened without running it. With a kernel,
`on_text` adds a text box that runs the model on the reader's own input.

Two ways in:

>>> explorer = AttentionExplorer.from_model(model, src_ids, tgt_ids, src_tokens, tgt_tokens)
>>> explorer = AttentionExplorer({"encoder": [w0, w1]}, tokens=["the", "cat", "sat"])

where each per-layer `w` is (n_heads, q_len, k_len) (or (q_len, k_len) for a single head).

To keep notebooks small the state (built by `explorer_state.build_state`) holds the weights
rounded to `decimals` (3) places, each matrix row as one string of numbers (".25 .5 0 1";
`explorer.matrix(kind, layer, head)` reads one back), and at most `max_tokens` (40) query and
key positions, `max_layers` (6) layers and `max_heads` (8) heads per kind; anything beyond is
left out and the widget says so. The mean of the heads is always the mean of all of them. The weights of a run of 20 tokens with 2 layers of 4 heads of
each of the three kinds take about 55 kB of notebook; every explorer also carries its own
JavaScript and CSS (about 25 kB), which is what lets it work without installing anything.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import anywidget
import torch
import traitlets
from torch import nn

from ..attention_maps import attention_by_kind, run_model
from .explorer_state import MAX_HEADS, MAX_LAYERS, MAX_TOKENS, build_state, check_selection, state_matrix

__all__ = ["AttentionExplorer"]

_STATIC = Path(__file__).resolve().parent / "static"


def _compact(source: str, comment: str) -> str:
    """Front-end source without indentation, blank lines and whole-line comments: each explorer
    stores it in its state, so this is what every notebook that shows one carries."""
    out, in_block = [], False
    for line in source.splitlines():
        line = line.strip()
        if comment == "/*" and (in_block or line.startswith("/*")):
            in_block = "*/" not in line
            continue
        if line and not (comment == "//" and line.startswith("//")):
            out.append(line)
    return "\n".join(out) + "\n"


class AttentionExplorer(anywidget.AnyWidget):
    """An interactive view of attention weights, live in a notebook and on the static website.

    Args:
        attention: the weights, as a dict {kind: weights} with kinds "encoder", "decoder",
            "cross" (and "self" for a lone self-attention). Each kind's weights are a list with
            one tensor per layer, (n_heads, q_len, k_len) or (q_len, k_len), or one tensor
            (n_layers, n_heads, q_len, k_len). One tensor instead of a dict means {"self": it}.
            Weights must lie in [0, 1]: pick one example of a batch first.
        src_tokens: the tokens of the encoder's input: queries and keys of "encoder"
            self-attention, keys of "cross"-attention.
        tgt_tokens: the tokens of the decoder's input: queries and keys of "decoder"
            self-attention, queries of "cross"-attention.
        tokens: one sequence for both (self-attention only); positions are numbered when no
            tokens are given.
        title: a heading shown above the explorer.
        decimals, max_tokens, max_layers, max_heads: what the widget state keeps (see the
            module's docstring): weights rounded to `decimals`, at most `max_tokens` positions
            per axis, `max_layers` layers and `max_heads` heads per kind.
        kind, layer, head: what to show first (layer and head count from 0; head -1 is the
            mean of the heads, the default). They follow the reader's choices.

    Raises ValueError or TypeError naming the argument when shapes and tokens disagree.
    """

    _esm = _compact((_STATIC / "explorer.js").read_text(encoding="utf-8"), "//")
    _css = _compact((_STATIC / "explorer.css").read_text(encoding="utf-8"), "/*")

    data = traitlets.Dict().tag(sync=True)
    kind = traitlets.Unicode("").tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Int(-1).tag(sync=True)
    #: Whether a text box may be offered (set by `on_text`); it appears only with a live kernel.
    text_input = traitlets.Bool(False).tag(sync=True)
    text_placeholder = traitlets.Unicode("").tag(sync=True)

    def __init__(self, attention, src_tokens: Sequence[str] | None = None, tgt_tokens: Sequence[str] | None = None,
                 tokens: Sequence[str] | None = None, *, title: str = "", decimals: int = 3,
                 max_tokens: int = MAX_TOKENS, max_layers: int = MAX_LAYERS, max_heads: int = MAX_HEADS,
                 kind: str | None = None, layer: int = 0, head: int = -1, **kwargs):
        data = build_state(attention, src_tokens, tgt_tokens, tokens, title=title, decimals=decimals,
                           max_tokens=max_tokens, max_layers=max_layers, max_heads=max_heads)
        self._options = dict(title=title, decimals=decimals, max_tokens=max_tokens, max_layers=max_layers,
                             max_heads=max_heads)
        kind, layer, head = check_selection(data, kind, layer, head)
        super().__init__(data=data, kind=kind, layer=layer, head=head, **kwargs)
        self._text_fn: Callable[[str], Any] | None = None
        self.on_msg(self._on_custom_msg)

    # -- building from a model ---------------------------------------------------------------

    @classmethod
    def from_recorded(cls, weights: Mapping[str, torch.Tensor], src_tokens=None, tgt_tokens=None, tokens=None, *,
                      index: int = 0, **options) -> "AttentionExplorer":
        """An explorer from the dict filled by `record_attention(model)`, for example `index` of the batch.

        Module names decide the kind (`attention_maps.attention_kind`: `...cross_attn` is
        cross-attention, a module inside an `encoder` encoder self-attention, any other one
        decoder self-attention). Layers keep the order of the modules in the model.
        """
        return cls(attention_by_kind(weights, index), src_tokens, tgt_tokens, tokens, **options)

    @classmethod
    def from_model(cls, model: nn.Module, src_ids, tgt_ids=None, src_tokens=None, tgt_tokens=None, *,
                   index: int = 0, pad_id: int | None = None,
                   encode_fn: Callable[[str], Any] | None = None, text_placeholder: str = "",
                   **options) -> "AttentionExplorer":
        """Run `model` once on a batch and explore its attention: one call, one explorer.

        `model(src_ids, tgt_ids)` runs in eval mode without gradients (just `model.encode(src_ids)`,
        or `model(src_ids)` for a model without `encode`, when `tgt_ids` is None), with
        `record_attention` collecting every attention module's weights. `index` picks the
        example of the batch; ids may also be one example, (length,).

        Padding (`pad_id`, by default <pad>, `special_tokens.PAD_ID`) is left out
        when no tokens are given or when the tokens are as many as the non-padding positions.

        With `encode_fn`, live in a notebook, the explorer offers a text box: `encode_fn(text)`
        returns `(src_ids, tgt_ids, src_tokens, tgt_tokens)` (or a dict with those keys) for the
        reader's text, and the explorer shows the model's attention on it, titled "Your input: ...".
        """
        explorer = cls(*run_model(model, src_ids, tgt_ids, src_tokens, tgt_tokens, index=index, pad_id=pad_id), **options)
        if encode_fn is not None:
            if not callable(encode_fn):
                raise TypeError(f"encode_fn must be callable, got {type(encode_fn).__name__}")

            def run(text: str) -> None:
                batch = encode_fn(text)
                if isinstance(batch, Mapping):
                    batch = tuple(batch.get(k) for k in ("src_ids", "tgt_ids", "src_tokens", "tgt_tokens"))
                if not isinstance(batch, tuple) or len(batch) != 4:
                    raise TypeError("encode_fn must return (src_ids, tgt_ids, src_tokens, tgt_tokens)")
                explorer.set_from_model(model, *batch, pad_id=pad_id, title=f"Your input: {text!r}")

            explorer.on_text(run, placeholder=text_placeholder)
        return explorer

    # -- new data, and live use ------------------------------------------------------------

    def set_attention(self, attention, src_tokens=None, tgt_tokens=None, tokens=None, *,
                      title: str | None = None) -> None:
        """Show other weights (same arguments as the constructor; its other options are kept,
        and the title too unless a new one is given). The kind, layer and head on show stay
        where they exist in the new data. Every view of the explorer updates: e.g. after each
        epoch of training, or on the reader's own text."""
        options = self._options if title is None else {**self._options, "title": title}
        self._show(build_state(attention, src_tokens, tgt_tokens, tokens, **options))
        self._options = options

    def _show(self, data: dict) -> None:
        kinds = {k["id"]: k for k in data["kinds"]}
        kind = self.kind if self.kind in kinds else data["kinds"][0]["id"]
        k = kinds[kind]
        _, layer, head = check_selection(data, kind, min(self.layer, k["n_layers"] - 1),
                                               min(self.head, k["n_heads"] - 1))
        with self.hold_sync():
            self.data, self.kind, self.layer, self.head = data, kind, layer, head

    def set_from_model(self, model: nn.Module, src_ids, tgt_ids=None, src_tokens=None, tgt_tokens=None, *,
                       index: int = 0, pad_id: int | None = None, title: str | None = None) -> None:
        """Run `model` on a new batch and show its attention here (as `from_model` does)."""
        attention, src_tokens, tgt_tokens = run_model(model, src_ids, tgt_ids, src_tokens, tgt_tokens, index=index,
                                                      pad_id=pad_id)
        self.set_attention(attention, src_tokens, tgt_tokens, title=title)

    def on_text(self, fn: Callable[[str], Any], placeholder: str = "") -> None:
        """Offer a text box, live with a kernel: `fn(text)` is called with the reader's text and
        either updates the explorer itself (e.g. `explorer.set_from_model(...)`) or returns a new
        `AttentionExplorer`, whose data this one then shows (the new one is never displayed and
        opens no channel to the front end). An error raised by `fn` is shown in the widget.
        Without a kernel (on the static website) there is no text box."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self._text_fn = fn
        self.text_placeholder = placeholder or "Type your own input and press Enter"
        self.text_input = True

    def open(self) -> None:
        # Explorers made inside a text callback only carry data to the one on show: no comm.
        if not _Detached.active:
            super().open()

    def _on_custom_msg(self, _widget, content, _buffers) -> None:
        if not isinstance(content, dict) or self._text_fn is None:
            return
        if content.get("type") == "hello":
            self.send({"type": "live"})
        elif content.get("type") == "text":
            try:
                with _detached():
                    result = self._text_fn(str(content.get("text", "")))
                if isinstance(result, AttentionExplorer) and result is not self:
                    self._show(result.data)
            except Exception as err:  # shown to the reader in the widget, not as a traceback
                self.send({"type": "error", "message": f"{type(err).__name__}: {err}"})
            else:
                self.send({"type": "done"})

    def matrix(self, kind: str | None = None, layer: int | None = None, head: int | None = None) -> list[list[float]]:
        """The weights the explorer stores (rounded) for one map, rows = queries: by default the
        one on show. head -1 is the mean of the heads."""
        kind = self.kind if kind is None else kind
        layer = self.layer if layer is None else layer
        head = self.head if head is None else head
        return state_matrix(self.data, kind, layer, head)

    # -- text ------------------------------------------------------------------------------

    def summary(self) -> str:
        """One line per kind: layers, heads and tokens (also the text shown without JavaScript)."""
        parts = []
        for k in self.data.get("kinds", []):
            heads = f"{k['total_heads']} head" + ("s" if k["total_heads"] != 1 else "")
            layers = f"{k['n_layers']} layer" + ("s" if k["n_layers"] != 1 else "")
            parts.append(f"{k['label'].lower()}, {layers} x {heads}, {len(k['queries'])} queries x {len(k['keys'])} keys")
        return "AttentionExplorer: " + "; ".join(parts)

    def __repr__(self) -> str:
        return self.summary()


class _Detached:
    active = 0


@contextlib.contextmanager
def _detached():
    """AttentionExplorers created in this block open no comm (they are never displayed)."""
    _Detached.active += 1
    try:
        yield
    finally:
        _Detached.active -= 1
