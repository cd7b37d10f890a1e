"""PyTorch's own Transformer modules copied into this library's classes: `from_torch(module)`.

The teaching classes compute the same functions as `torch.nn`'s, with the paper's names:

    torch.nn.MultiheadAttention      -> attention.MultiHeadAttention
    torch.nn.TransformerEncoderLayer -> layers.EncoderLayer
    torch.nn.TransformerDecoderLayer -> layers.DecoderLayer
    torch.nn.TransformerEncoder      -> layers.Encoder
    torch.nn.TransformerDecoder      -> layers.Decoder
    torch.nn.Transformer             -> model.EncoderDecoder (the two stacks, final norms included)

Only the storage differs. `nn.MultiheadAttention` stacks W^Q, W^K, W^V in one `in_proj_weight`
(3 d_model, d_model) and keeps W^O in `out_proj`; the layers call the FFN `linear1`, `linear2`
and the cross-attention `multihead_attn`. Each copy is made by renaming PyTorch's parameters to
ours and loading them with `load_state_dict(strict=True)`, so a parameter left over or missing
is an error. The copy has its own tensors, on the original's device and in its dtype.

PyTorch's boolean masks are True where attention is *blocked*; ours are True where it is allowed
(`masks.to_torch_mask` converts). This module imports the teaching modules, never the reverse.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention
from .layers import Decoder, DecoderLayer, Encoder, EncoderLayer
from .model import EncoderDecoder

__all__ = ["from_torch"]


def from_torch(module: nn.Module) -> nn.Module:
    """A copy of a `torch.nn` Transformer module as this library's class, with the same weights
    and outputs (see the module docstring for the correspondence). Raises TypeError for any other
    module, and ValueError for settings the library does not have (an activation other than
    ReLU, batch_first=False, different key/value widths, biases on keys and values)."""
    for torch_type, convert in _CONVERTERS:
        if isinstance(module, torch_type):
            return convert(module)
    names = ", ".join(f"nn.{t.__name__}" for t, _ in _CONVERTERS)
    raise TypeError(f"from_torch copies one of {names}; got {type(module).__name__}")


# --- one converter per torch type ---------------------------------------------------------

def _attention(mha: nn.MultiheadAttention) -> MultiHeadAttention:
    _check_attention(mha)
    ours = MultiHeadAttention(mha.embed_dim, mha.num_heads, dropout=mha.dropout, bias=mha.in_proj_bias is not None)
    return _load(ours, _attention_params(mha), like=mha.in_proj_weight)


def _encoder_layer(layer: nn.TransformerEncoderLayer) -> EncoderLayer:
    _check_layer(layer, n_norms=2)
    ours = EncoderLayer(*_sizes(layer), **_settings(layer))
    params = _prefixed("self_attn", _attention_params(layer.self_attn)) | _ff_and_norms(layer, n_norms=2)
    return _load(ours, params, like=layer.linear1.weight)


def _decoder_layer(layer: nn.TransformerDecoderLayer) -> DecoderLayer:
    _check_layer(layer, n_norms=3)
    _check_attention(layer.multihead_attn)
    ours = DecoderLayer(*_sizes(layer), **_settings(layer))
    params = (_prefixed("self_attn", _attention_params(layer.self_attn))
              | _prefixed("cross_attn", _attention_params(layer.multihead_attn))
              | _ff_and_norms(layer, n_norms=3))
    return _load(ours, params, like=layer.linear1.weight)


def _encoder(encoder: nn.TransformerEncoder) -> Encoder:
    return _stack(Encoder, [_encoder_layer(layer) for layer in encoder.layers], encoder.norm)


def _decoder(decoder: nn.TransformerDecoder) -> Decoder:
    return _stack(Decoder, [_decoder_layer(layer) for layer in decoder.layers], decoder.norm)


def _transformer(transformer: nn.Transformer) -> EncoderDecoder:
    for name in ("encoder", "decoder"):
        if not isinstance(getattr(transformer, name), (nn.TransformerEncoder, nn.TransformerDecoder)):
            raise TypeError(f"transformer.{name} must be PyTorch's own stack, "
                            f"got {type(getattr(transformer, name)).__name__}")
    return EncoderDecoder(_encoder(transformer.encoder), _decoder(transformer.decoder))


# Most specific first (none of these subclasses another today, but keep the order safe).
_CONVERTERS = (
    (nn.MultiheadAttention, _attention),
    (nn.TransformerEncoderLayer, _encoder_layer),
    (nn.TransformerDecoderLayer, _decoder_layer),
    (nn.TransformerEncoder, _encoder),
    (nn.TransformerDecoder, _decoder),
    (nn.Transformer, _transformer),
)


# --- parameter renaming -------------------------------------------------------------------

def _attention_params(mha: nn.MultiheadAttention) -> dict[str, torch.Tensor]:
    """Our MultiHeadAttention's parameters from PyTorch's: in_proj_weight (3 d_model, d_model)
    is W^Q, W^K, W^V one above the other, each applied as x @ W.T + b like `nn.Linear`."""
    params = {f"{name}.weight": w for name, w in zip(("w_q", "w_k", "w_v"), mha.in_proj_weight.chunk(3))}
    params["w_o.weight"] = mha.out_proj.weight
    if mha.in_proj_bias is not None:
        params |= {f"{name}.bias": b for name, b in zip(("w_q", "w_k", "w_v"), mha.in_proj_bias.chunk(3))}
        params["w_o.bias"] = mha.out_proj.bias
    return params


def _ff_and_norms(layer: nn.Module, n_norms: int) -> dict[str, torch.Tensor]:
    """linear1, linear2 -> ff.w_1, ff.w_2; norm1..normN keep their names."""
    params = _prefixed("ff.w_1", layer.linear1.state_dict()) | _prefixed("ff.w_2", layer.linear2.state_dict())
    for i in range(1, n_norms + 1):
        params |= _prefixed(f"norm{i}", getattr(layer, f"norm{i}").state_dict())
    return params


def _prefixed(prefix: str, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {f"{prefix}.{name}": value for name, value in params.items()}


def _load(ours: nn.Module, params: dict[str, torch.Tensor], like: torch.Tensor) -> nn.Module:
    """Move `ours` to the device and dtype of `like` and copy `params` in (every key, no other)."""
    ours.to(device=like.device, dtype=like.dtype)
    with torch.no_grad():
        ours.load_state_dict({name: p.detach() for name, p in params.items()}, strict=True)
    return ours


def _stack(cls, layers: list[nn.Module], norm: nn.Module | None) -> nn.Module:
    """An Encoder/Decoder holding the converted `layers` and a copy of the final `norm`."""
    first = layers[0]
    with torch.device("meta"):  # a shell: its layers and final norm are replaced just below
        ours = cls(first.d_model, first.self_attn.n_heads, first.ff.w_1.out_features, len(layers), final_norm=False)
    ours.layers = nn.ModuleList(layers)
    if norm is not None and not (isinstance(norm, nn.LayerNorm) and norm.elementwise_affine):
        raise ValueError(f"the stack's final norm must be an nn.LayerNorm with a gain and bias, got {norm!r}")
    ours.norm = copy.deepcopy(norm)
    return ours


# --- what the library cannot copy ---------------------------------------------------------

def _sizes(layer: nn.Module) -> tuple[int, int, int]:
    return layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features


def _settings(layer: nn.Module) -> dict:
    return dict(dropout=layer.dropout.p, norm_first=layer.norm_first, eps=layer.norm1.eps,
                bias=layer.linear1.bias is not None)


def _check_attention(mha: nn.MultiheadAttention) -> None:
    if not mha.batch_first:
        raise ValueError("the MultiheadAttention must have batch_first=True: the library's modules take "
                         "(batch, length, d_model)")
    if mha.in_proj_weight is None or mha.bias_k is not None:
        raise ValueError("the MultiheadAttention must use kdim = vdim = embed_dim and add_bias_kv=False")


def _check_layer(layer: nn.Module, n_norms: int) -> None:
    act = layer.activation
    if not (act is F.relu or isinstance(act, nn.ReLU)):
        raise ValueError(f"only the paper's ReLU activation is supported, got activation={act!r}")
    _check_attention(layer.self_attn)
    norms = [getattr(layer, f"norm{i}") for i in range(1, n_norms + 1)]
    if not all(isinstance(n, nn.LayerNorm) and n.elementwise_affine and n.eps == norms[0].eps for n in norms):
        raise ValueError("the layer's norms must be nn.LayerNorms with a gain and bias and one eps")
