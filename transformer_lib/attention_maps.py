"""The attention maps of one model run, by kind: encoder self-attention, decoder self-attention
and cross-attention.

- :data:`MAP_KINDS`: each kind's label and which sequence gives its queries and its keys;
- :func:`attention_kind`: the kind of an attention module, from its name in the model (the
  one rule that `decoding.attention_of` and the attention explorer share);
- :func:`attention_by_kind`: the dict filled by `record_attention` grouped by kind;
- :func:`run_model`: run a model once and get its maps by kind, with padding dropped.

The explorer (`explorer.AttentionExplorer`) shows what these return; nothing here needs it.
"""
from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

from ._checks import check_tokens
from .attention import record_attention
from .runtime import eval_mode
from .special_tokens import PAD_ID

__all__ = ["MAP_KINDS", "attention_kind", "attention_by_kind", "run_model"]

#: The attention kinds, in the order the explorer lists them: label, and which sequence gives
#: the queries and which the keys ("src" = the encoder's input, "tgt" = the decoder's input).
#: "self" is for self-attention weights given by hand (one sequence, no model around them).
MAP_KINDS: dict[str, tuple[str, str, str]] = {
    "self": ("Self-attention", "src", "src"),
    "encoder": ("Encoder self-attention", "src", "src"),
    "decoder": ("Decoder self-attention", "tgt", "tgt"),
    "cross": ("Cross-attention", "tgt", "src"),
}


def attention_kind(name: str) -> str:
    """The kind of the attention module called `name` in its model: "encoder", "decoder" or "cross".

    The book's models name their modules as `model.Transformer` does: "encoder.layers.0.self_attn"
    (encoder self-attention), "decoder.layers.0.self_attn" (the decoder's causal self-attention)
    and "decoder.layers.0.cross_attn" (queries from the decoder, keys from the encoder); a
    `layers.Decoder` stack alone has "layers.0.self_attn" and "layers.0.cross_attn". A
    decoder-only model, `lm.CausalLM`, has "layers.0.self_attn": causal self-attention over the
    text so far, the decoder's kind. So: a module called `cross_attn` is "cross", one inside an
    `encoder` (and no `decoder`) is "encoder", and every other one is "decoder".
    """
    parts = name.split(".")
    if parts[-1] == "cross_attn":
        return "cross"
    if "encoder" in parts and "decoder" not in parts:
        return "encoder"
    return "decoder"


def attention_by_kind(weights: Mapping[str, torch.Tensor], index: int = 0) -> dict[str, list[torch.Tensor]]:
    """The dict filled by `record_attention(model)` -> {kind: [(n_heads, q_len, k_len)] per layer}
    for example `index` of the batch, kinds by :func:`attention_kind`, layers in module order."""
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights must be the dict filled by record_attention, got {type(weights).__name__}")
    if not weights:
        raise ValueError("weights is empty: run the model inside `with record_attention(model) as weights:`")
    attention: dict[str, list] = {}
    for name, w in weights.items():
        if not isinstance(w, torch.Tensor) or w.dim() != 4:
            shape = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
            raise ValueError(f"weights[{name!r}] must be a (batch, n_heads, q_len, k_len) tensor, got {shape}")
        _check_index(index, w.shape[0])
        attention.setdefault(attention_kind(name), []).append(w[index])
    return attention


def _check_index(index, batch: int) -> None:
    if isinstance(index, bool) or not isinstance(index, int) or not -batch <= index < batch:
        raise ValueError(f"index must pick an example of the batch of {batch}, got {index!r}")


def _check_ids(name: str, ids) -> torch.Tensor:
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, (batch, length) or (length,), got {type(ids).__name__}")
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length) or (length,), got {tuple(ids.shape)}")
    return ids


def run_model(model: nn.Module, src_ids, tgt_ids=None, src_tokens=None, tgt_tokens=None, *, index: int = 0,
              pad_id: int | None = None) -> tuple[dict[str, list[torch.Tensor]], list[str] | None, list[str] | None]:
    """Run `model` once, in eval mode without gradients, under `record_attention`:
    `model(src_ids, tgt_ids)`, or with `tgt_ids` None `model.encode(src_ids)` (or `model(src_ids)`
    for a decoder-only model, whose one sequence is then the decoder's input).

    Returns `(attention by kind, src_tokens, tgt_tokens)` for example `index`, the arguments of
    `build_state`. Padding (`pad_id`, by default <pad>: `special_tokens.PAD_ID`) is dropped when
    no tokens are given or when they are as many as the non-padding positions.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if pad_id is None:
        pad_id = PAD_ID
    src_ids = _check_ids("src_ids", src_ids)
    tgt_ids = None if tgt_ids is None else _check_ids("tgt_ids", tgt_ids)
    if tgt_ids is not None and tgt_ids.shape[0] != src_ids.shape[0]:
        raise ValueError(f"src_ids and tgt_ids must have the same batch size, got {src_ids.shape[0]} and {tgt_ids.shape[0]}")
    _check_index(index, src_ids.shape[0])
    with eval_mode(model), torch.no_grad(), record_attention(model) as recorded:
        if tgt_ids is not None:
            model(src_ids, tgt_ids)
        elif hasattr(model, "encode"):
            model.encode(src_ids)
        else:
            model(src_ids)
    if not recorded:
        raise ValueError(f"{type(model).__name__} recorded no attention weights: it has no MultiHeadAttention module")
    attention = attention_by_kind(recorded, index)

    one_sequence = tgt_ids is None
    ids = {"src": src_ids[index], "tgt": src_ids[index] if one_sequence else tgt_ids[index]}
    given = {"src": src_tokens, "tgt": src_tokens if one_sequence else tgt_tokens}
    names = {"src": "src_tokens", "tgt": "src_tokens" if one_sequence else "tgt_tokens"}
    used = {role for kind in attention for role in MAP_KINDS[kind][1:]}
    keep, tokens = {}, {"src": None, "tgt": None}
    for role in used:
        keep[role], tokens[role] = _tokens_for(names[role], ids[role], given[role], pad_id)
    for kind, layers in attention.items():
        _, q_role, k_role = MAP_KINDS[kind]
        attention[kind] = [a[:, keep[q_role]][:, :, keep[k_role]] for a in layers]
    return attention, tokens["src"], tokens["tgt"]


def _tokens_for(name: str, ids: torch.Tensor, tokens, pad_id):
    """Which positions to keep (a slice or a mask) and the tokens, checked against the ids (length,)."""
    tokens = check_tokens(name, tokens)
    n = ids.shape[0]
    real = None if pad_id is None else (ids != pad_id)
    n_real = n if real is None else int(real.sum())
    everything = slice(None)
    if tokens is None:
        if real is None or n_real == n:
            return everything, [str(int(i)) for i in ids]
        return real, [str(int(i)) for i in ids[real]]
    if len(tokens) == n:
        return everything, tokens
    if real is not None and len(tokens) == n_real:
        return real, tokens
    extra = "" if real is None or n_real == n else f" ({n_real} without padding)"
    ids_name = name.replace("tokens", "ids")
    raise ValueError(f"{name} has {len(tokens)} tokens but {ids_name} has {n} positions{extra}")
