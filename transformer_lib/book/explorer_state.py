"""The attention explorer's state: checked attention weights as compact JSON, and back.

:func:`build_state` checks weights and tokens and writes the `data` that
`explorer.AttentionExplorer` syncs to its front end (`static/explorer.js`) and that a notebook
saves: weights rounded to `decimals` places, each matrix row as one string of numbers
(".25 .5 0 1"; :func:`parse_rows` reads them back), at most `max_tokens` query and key
positions, `max_layers` layers and `max_heads` heads per kind (the notes say what is left
out). The mean of the heads is always over all of them. Nothing here needs anywidget.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from .._checks import as_numpy, check_positive_int, check_tokens
from ..attention_maps import MAP_KINDS as KINDS

__all__ = ["MAX_TOKENS", "MAX_LAYERS", "MAX_HEADS", "build_state", "parse_rows", "check_selection", "state_matrix"]

#: Default caps on what the widget state holds (each can be raised per explorer).
MAX_TOKENS = 40  # query positions and key positions
MAX_LAYERS = 6  # layers per kind
MAX_HEADS = 8  # heads per layer (the mean is over all heads)

_ROLE_WORDS = {"src": "source", "tgt": "target"}
_WEIGHTS = "a torch.Tensor or numpy array of shape (n_heads, q_len, k_len) or (q_len, k_len)"


def _layers_of(value, name: str) -> list[np.ndarray]:
    """One kind's weights -> a list of (n_heads, q_len, k_len) arrays, one per layer.

    Accepts a sequence of per-layer tensors, each (n_heads, q, k) or (q, k), or one tensor of
    shape (n_layers, n_heads, q, k), (n_heads, q, k) (one layer) or (q, k) (one layer, one head).
    """
    if isinstance(value, (torch.Tensor, np.ndarray)):
        a = as_numpy(name, value, _WEIGHTS)
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
            a = as_numpy(f"{name}[{i}]", item, _WEIGHTS)
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
    for name, cap in (("max_tokens", max_tokens), ("max_layers", max_layers), ("max_heads", max_heads)):
        check_positive_int(name, cap)
    if not isinstance(title, str):
        raise TypeError(f"title must be a string, got {type(title).__name__}")

    tokens = check_tokens("tokens", tokens)
    src_tokens = check_tokens("src_tokens", src_tokens)
    tgt_tokens = check_tokens("tgt_tokens", tgt_tokens)
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


def check_selection(data: dict, kind: str | None, layer: int, head: int) -> tuple[str, int, int]:
    """The map to show, checked against an explorer state `data`: (kind, layer, head), kind None
    meaning the first; head -1 is the mean of the heads (0 where there is one head)."""
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


def state_matrix(data: dict, kind: str | None, layer: int, head: int) -> list[list[float]]:
    """One map of an explorer state `data` as rows of floats (rows = queries); head -1 is the mean."""
    kind, layer, head = check_selection(data, kind, layer, head)
    k = next(k for k in data["kinds"] if k["id"] == kind)
    return parse_rows(k["mean"][layer] if head == -1 else k["weights"][layer][head])
