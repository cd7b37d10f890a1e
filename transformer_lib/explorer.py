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

To keep notebooks small the state holds the weights rounded to `decimals` (3) places, each
matrix row as one string of numbers (".25 .5 0 1"; `explorer.matrix(kind, layer, head)` reads
one back), and at most `max_tokens` (40) query and key positions, `max_layers` (6) layers and
`max_heads` (8) heads per kind; anything beyond is left out and the widget says so. The mean of the heads is
always the mean of all of them. The weights of a run of 20 tokens with 2 layers of 4 heads of
each of the three kinds take about 55 kB of notebook; every explorer also carries its own
JavaScript and CSS (about 25 kB), which is what lets it work without installing anything.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import anywidget
import numpy as np
import torch
import traitlets
from torch import nn

from ._checks import check_positive_int
from .attention import record_attention

__all__ = ["AttentionExplorer", "KINDS", "MAX_TOKENS", "MAX_LAYERS", "MAX_HEADS"]

_STATIC = Path(__file__).resolve().parent / "static"

#: The attention kinds, in the order the explorer lists them: label, and which sequence gives
#: the queries and which the keys ("src" = the encoder's input, "tgt" = the decoder's input).
KINDS: dict[str, tuple[str, str, str]] = {
    "self": ("Self-attention", "src", "src"),
    "encoder": ("Encoder self-attention", "src", "src"),
    "decoder": ("Decoder self-attention", "tgt", "tgt"),
    "cross": ("Cross-attention", "tgt", "src"),
}

#: Default caps on what the widget state holds (each can be raised per explorer).
MAX_TOKENS = 40  # query positions and key positions
MAX_LAYERS = 6  # layers per kind
MAX_HEADS = 8  # heads per layer (the mean is over all heads)

_ROLE_NAMES = {"src": "src_tokens", "tgt": "tgt_tokens"}
_ROLE_WORDS = {"src": "source", "tgt": "target"}


def _as_array(value, name: str) -> np.ndarray:
    """A tensor or array as a float64 NumPy array; anything else is a TypeError."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", torch.float64).numpy()
    if isinstance(value, np.ndarray):
        if not (np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer)):
            raise TypeError(f"{name} must hold numbers, got an array of dtype {value.dtype}")
        return value.astype(np.float64)
    raise TypeError(
        f"{name} must be a torch.Tensor or numpy array of shape (n_heads, q_len, k_len) or (q_len, k_len), "
        f"got {type(value).__name__}"
    )


def _layers_of(value, name: str) -> list[np.ndarray]:
    """One kind's weights -> a list of (n_heads, q_len, k_len) arrays, one per layer.

    Accepts a sequence of per-layer tensors, each (n_heads, q, k) or (q, k), or one tensor of
    shape (n_layers, n_heads, q, k), (n_heads, q, k) (one layer) or (q, k) (one layer, one head).
    """
    if isinstance(value, (torch.Tensor, np.ndarray)):
        a = _as_array(value, name)
        shapes = {2: lambda a: [a[None]], 3: lambda a: [a], 4: lambda a: list(a)}
        if a.ndim not in shapes:
            raise ValueError(
                f"{name} must have shape (n_layers, n_heads, q_len, k_len), (n_heads, q_len, k_len) or "
                f"(q_len, k_len), got {tuple(a.shape)}"
            )
        layers = shapes[a.ndim](a)
    elif isinstance(value, (list, tuple)):
        layers = []
        for i, item in enumerate(value):
            a = _as_array(item, f"{name}[{i}]")
            if a.ndim == 4:
                raise ValueError(
                    f"{name}[{i}] has shape {tuple(a.shape)}: each layer must be (n_heads, q_len, k_len); "
                    f"for a batch, pick one example, e.g. weights[0]"
                )
            if a.ndim not in (2, 3):
                raise ValueError(f"{name}[{i}] must have shape (n_heads, q_len, k_len) or (q_len, k_len), got {tuple(a.shape)}")
            layers.append(a[None] if a.ndim == 2 else a)
    else:
        raise TypeError(
            f"{name} must be a list of per-layer tensors (n_heads, q_len, k_len) or one tensor, got {type(value).__name__}"
        )
    if not layers:
        raise ValueError(f"{name} holds no layers: expected at least one (n_heads, q_len, k_len) tensor")
    first = layers[0].shape
    for i, a in enumerate(layers):
        if 0 in a.shape:
            raise ValueError(f"{name}[{i}] is empty (shape {tuple(a.shape)})")
        if a.shape != first:
            raise ValueError(
                f"{name}: every layer must have the same shape (n_heads, q_len, k_len); layer 0 is {tuple(first)}, "
                f"layer {i} is {tuple(a.shape)}"
            )
        if not np.isfinite(a).all():
            raise ValueError(f"{name}[{i}] holds NaN or infinite values")
        if a.min() < -1e-6 or a.max() > 1 + 1e-6:
            raise ValueError(
                f"{name}[{i}] holds values in [{a.min():.3g}, {a.max():.3g}]; attention weights lie in [0, 1] "
                f"(pass the softmax of the scores, not the scores)"
            )
    return [np.clip(a, 0.0, 1.0) for a in layers]


def _check_tokens(tokens, name: str) -> list[str] | None:
    if tokens is None:
        return None
    if isinstance(tokens, str) or not isinstance(tokens, (list, tuple)):
        raise TypeError(f"{name} must be a list of strings, one per position, got {type(tokens).__name__}")
    for i, t in enumerate(tokens):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] must be a string, got {type(t).__name__} (use [str(t) for t in ...])")
    return list(tokens)


def _rows(matrix: np.ndarray, decimals: int) -> list[str]:
    """A (q_len, k_len) matrix as one string per row of numbers rounded to `decimals` places,
    separated by spaces (".25 .5 0 1"): compact in the notebook's JSON, where a list of numbers
    would take a line per number."""
    return [" ".join(_number(v) for v in row) for row in np.round(matrix, decimals).tolist()]


def _number(v: float) -> str:
    """0.25 -> ".25", 0.0 -> "0", 1.0 -> "1": the shortest text that reads back as the number."""
    text = repr(float(v))
    if text.endswith(".0"):
        return text[:-2]
    return text[1:] if text.startswith("0.") else text


def parse_rows(rows: Sequence[str]) -> list[list[float]]:
    """The inverse of how the state stores a matrix: row strings (".25 .5 0 1") -> lists of floats."""
    return [[float(x) for x in row.split()] for row in rows]


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


def _check_cap(name: str, value) -> int:
    check_positive_int(name, value)
    return value


def build_state(attention, src_tokens=None, tgt_tokens=None, tokens=None, *, title: str = "",
                decimals: int = 3, max_tokens: int = MAX_TOKENS, max_layers: int = MAX_LAYERS,
                max_heads: int = MAX_HEADS) -> dict[str, Any]:
    """The explorer's `data` (a JSON-able dict) for some attention weights; see `AttentionExplorer`."""
    if isinstance(attention, (torch.Tensor, np.ndarray, list, tuple)):
        attention = {"self": attention}
    if not isinstance(attention, Mapping):
        raise TypeError(
            f"attention must be a dict {{kind: weights}} with kinds from {list(KINDS)}, or one tensor, "
            f"got {type(attention).__name__}"
        )
    if not attention:
        raise ValueError(f"attention is empty: give the weights of at least one kind of {list(KINDS)}")
    unknown = [k for k in attention if k not in KINDS]
    if unknown:
        raise ValueError(f"attention has unknown kinds {unknown}; the kinds are {list(KINDS)}")
    if not isinstance(decimals, int) or isinstance(decimals, bool) or not 0 <= decimals <= 6:
        raise ValueError(f"decimals must be an integer from 0 to 6, got {decimals!r}")
    max_tokens = _check_cap("max_tokens", max_tokens)
    max_layers = _check_cap("max_layers", max_layers)
    max_heads = _check_cap("max_heads", max_heads)
    if not isinstance(title, str):
        raise TypeError(f"title must be a string, got {type(title).__name__}")

    tokens = _check_tokens(tokens, "tokens")
    src_tokens = _check_tokens(src_tokens, "src_tokens")
    tgt_tokens = _check_tokens(tgt_tokens, "tgt_tokens")
    if tokens is not None:
        if src_tokens is not None or tgt_tokens is not None:
            raise ValueError("give either tokens (one sequence) or src_tokens/tgt_tokens, not both")
        src_tokens = tgt_tokens = tokens
    given = {"src": src_tokens, "tgt": tgt_tokens}
    arg_of = {"src": "tokens" if tokens is not None else "src_tokens",
              "tgt": "tokens" if tokens is not None else "tgt_tokens"}

    layers_by_kind = {kind: _layers_of(attention[kind], f"attention[{kind!r}]") for kind in KINDS if kind in attention}

    # Sequence lengths: from the tokens where given, else from the first kind that uses the sequence.
    lengths: dict[str, tuple[int, str]] = {}
    for role in ("src", "tgt"):
        if given[role] is not None:
            lengths[role] = (len(given[role]), f"{arg_of[role]} has {len(given[role])} tokens")
    for kind, layers in layers_by_kind.items():
        _, q_role, k_role = KINDS[kind]
        _, q_len, k_len = layers[0].shape
        for role, n, axis in ((q_role, q_len, "query rows"), (k_role, k_len, "key columns")):
            if role not in lengths:
                lengths[role] = (n, f"attention[{kind!r}] has {n} {axis}")
            elif lengths[role][0] != n:
                raise ValueError(
                    f"attention[{kind!r}] has {n} {axis} but {lengths[role][1]}: {KINDS[kind][0].lower()} "
                    f"weights must have shape (n_heads, len({arg_of[q_role]}), len({arg_of[k_role]}))"
                )

    notes = []
    seqs: dict[str, list[str]] = {}
    for role, (n, _) in lengths.items():
        toks = given[role] if given[role] is not None else [str(i) for i in range(n)]
        if n > max_tokens:
            notes.append(f"Only the first {max_tokens} of {n} {_ROLE_WORDS[role]} tokens are shown.")
        seqs[role] = toks[:max_tokens]
    if tokens is not None and "src" in seqs and "tgt" in seqs and len(notes) == 2:
        notes = notes[:1]

    kinds = []
    for kind, layers in layers_by_kind.items():
        label, q_role, k_role = KINDS[kind]
        n_layers, (n_heads, _, _) = len(layers), layers[0].shape
        nq, nk = len(seqs[q_role]), len(seqs[k_role])
        shown = layers[:max_layers]
        if n_layers > max_layers:
            notes.append(f"{label}: only the first {max_layers} of {n_layers} layers are shown.")
        if n_heads > max_heads:
            notes.append(f"{label}: only the first {max_heads} of {n_heads} heads are shown one by one "
                         f"(the mean is over all {n_heads}).")
        kinds.append({
            "id": kind,
            "label": label,
            "queries": seqs[q_role],
            "keys": seqs[k_role],
            "n_layers": len(shown),
            "n_heads": min(n_heads, max_heads),
            "total_heads": n_heads,
            "weights": [[_rows(w[:nq, :nk], decimals) for w in a[:max_heads]] for a in shown],
            "mean": [_rows(a.mean(axis=0)[:nq, :nk], decimals) for a in shown],
        })
    return {"version": 1, "title": title, "decimals": decimals, "kinds": kinds, "notes": notes}


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
        kind, layer, head = self._check_selection(data, kind, layer, head)
        super().__init__(data=data, kind=kind, layer=layer, head=head, **kwargs)
        self._text_fn: Callable[[str], Any] | None = None
        self.on_msg(self._on_custom_msg)

    @staticmethod
    def _check_selection(data, kind, layer, head):
        ids = [k["id"] for k in data["kinds"]]
        if kind is None:
            kind = ids[0]
        if kind not in ids:
            raise ValueError(f"kind must be one of {ids}, got {kind!r}")
        k = data["kinds"][ids.index(kind)]
        if not isinstance(layer, int) or not 0 <= layer < k["n_layers"]:
            raise ValueError(f"layer must be an integer from 0 to {k['n_layers'] - 1} for {kind}, got {layer!r}")
        if not isinstance(head, int) or not -1 <= head < k["n_heads"]:
            raise ValueError(f"head must be -1 (mean of heads) or an integer from 0 to {k['n_heads'] - 1}, got {head!r}")
        if k["total_heads"] == 1:
            head = 0  # the mean of one head is that head
        return kind, layer, head

    # -- building from a model ---------------------------------------------------------------

    @classmethod
    def from_recorded(cls, weights: Mapping[str, torch.Tensor], src_tokens=None, tgt_tokens=None, tokens=None, *,
                      index: int = 0, **options) -> "AttentionExplorer":
        """An explorer from the dict filled by `record_attention(model)`, for example `index` of the batch.

        Module names decide the kind: `...cross_attn` is cross-attention, a `self_attn` inside
        a `decoder` is decoder self-attention, one inside an `encoder` is encoder
        self-attention, any other attention module is plain self-attention. Layers keep the
        order of the modules in the model.
        """
        return cls(_attention_from_recorded(weights, index), src_tokens, tgt_tokens, tokens, **options)

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

        Padding (`pad_id`, by default `model.config.pad_id` where the model has one) is left out
        when no tokens are given or when the tokens are as many as the non-padding positions.

        With `encode_fn`, live in a notebook, the explorer offers a text box: `encode_fn(text)`
        returns `(src_ids, tgt_ids, src_tokens, tgt_tokens)` (or a dict with those keys) for the
        reader's text, and the explorer shows the model's attention on it, titled "Your input: ...".
        """
        pad_id = _pad_id(model, pad_id)
        explorer = cls(*_run_model(model, src_ids, tgt_ids, src_tokens, tgt_tokens, index, pad_id), **options)
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
        _, layer, head = self._check_selection(data, kind, min(self.layer, k["n_layers"] - 1),
                                               min(self.head, k["n_heads"] - 1))
        with self.hold_sync():
            self.data, self.kind, self.layer, self.head = data, kind, layer, head

    def set_from_model(self, model: nn.Module, src_ids, tgt_ids=None, src_tokens=None, tgt_tokens=None, *,
                       index: int = 0, pad_id: int | None = None, title: str | None = None) -> None:
        """Run `model` on a new batch and show its attention here (as `from_model` does)."""
        attention, src_tokens, tgt_tokens = _run_model(model, src_ids, tgt_ids, src_tokens, tgt_tokens, index,
                                                       _pad_id(model, pad_id))
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
        kind, layer, head = self._check_selection(self.data, kind, layer, head)
        k = next(k for k in self.data["kinds"] if k["id"] == kind)
        return parse_rows(k["mean"][layer] if head == -1 else k["weights"][layer][head])

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


def _pad_id(model, pad_id):
    if pad_id is None:
        pad_id = getattr(getattr(model, "config", None), "pad_id", None)
    return pad_id


def _run_model(model, src_ids, tgt_ids, src_tokens, tgt_tokens, index, pad_id):
    """Run the model with record_attention: (attention by kind, src_tokens, tgt_tokens), padding dropped."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    src_ids = _check_ids("src_ids", src_ids)
    tgt_ids = None if tgt_ids is None else _check_ids("tgt_ids", tgt_ids)
    if tgt_ids is not None and tgt_ids.shape[0] != src_ids.shape[0]:
        raise ValueError(f"src_ids and tgt_ids must have the same batch size, got {src_ids.shape[0]} and {tgt_ids.shape[0]}")
    if not isinstance(index, int) or not -src_ids.shape[0] <= index < src_ids.shape[0]:
        raise ValueError(f"index must pick an example of the batch of {src_ids.shape[0]}, got {index!r}")

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), record_attention(model) as recorded:
            if tgt_ids is not None:
                model(src_ids, tgt_ids)
            elif hasattr(model, "encode"):
                model.encode(src_ids)
            else:
                model(src_ids)
    finally:
        model.train(was_training)
    if not recorded:
        raise ValueError(f"{type(model).__name__} recorded no attention weights: it has no MultiHeadAttention module")
    attention = _attention_from_recorded(recorded, index)

    keep_src, src_tokens = _tokens_for("src", src_ids[index], src_tokens, pad_id)
    keep_tgt, tgt_tokens = (None, None) if tgt_ids is None else _tokens_for("tgt", tgt_ids[index], tgt_tokens, pad_id)
    keep = {"src": keep_src, "tgt": keep_tgt}
    for kind, layers in attention.items():
        _, q_role, k_role = KINDS[kind]
        if keep[q_role] is not None:
            layers = [a[:, keep[q_role]] for a in layers]
        if keep[k_role] is not None:
            layers = [a[:, :, keep[k_role]] for a in layers]
        attention[kind] = layers
    return attention, src_tokens, tgt_tokens


def _check_ids(name: str, ids) -> torch.Tensor:
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, (batch, length) or (length,), got {type(ids).__name__}")
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length) or (length,), got {tuple(ids.shape)}")
    return ids


def _tokens_for(role: str, ids: torch.Tensor, tokens, pad_id):
    """Which positions to keep (None = all) and the tokens, checked against the ids."""
    name = _ROLE_NAMES[role]
    tokens = _check_tokens(tokens, name)
    n = ids.shape[0]
    real = None if pad_id is None else (ids != pad_id)
    n_real = n if real is None else int(real.sum())
    if tokens is None:
        if real is None or n_real == n:
            return None, [str(int(i)) for i in ids]
        return real, [str(int(i)) for i in ids[real]]
    if len(tokens) == n:
        return None, tokens
    if real is not None and len(tokens) == n_real:
        return real, tokens
    extra = "" if real is None or n_real == n else f" ({n_real} without padding)"
    raise ValueError(f"{name} has {len(tokens)} tokens but {role}_ids has {n} positions{extra}")


def _kind_of(name: str) -> str:
    parts = name.split(".")
    if parts[-1] == "cross_attn":
        return "cross"
    if "decoder" in parts:
        return "decoder"
    if "encoder" in parts:
        return "encoder"
    return "self"


def _attention_from_recorded(weights, index: int) -> dict[str, list[torch.Tensor]]:
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights must be the dict filled by record_attention, got {type(weights).__name__}")
    if not weights:
        raise ValueError("weights is empty: run the model inside `with record_attention(model) as weights:`")
    attention: dict[str, list] = {}
    for name, w in weights.items():
        if not isinstance(w, torch.Tensor) or w.dim() != 4:
            shape = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
            raise ValueError(f"weights[{name!r}] must be a (batch, n_heads, q_len, k_len) tensor, got {shape}")
        if not isinstance(index, int) or not -w.shape[0] <= index < w.shape[0]:
            raise ValueError(f"index must pick an example of the batch of {w.shape[0]}, got {index!r}")
        attention.setdefault(_kind_of(name), []).append(w[index])
    return attention
