"""transformer_lib: the tested building blocks of the Transformer tutorial book.

One module per concept, in the paper's order:

- `attention`: scaled dot-product attention (equation 1) and multi-head attention
- `positional`: sinusoidal and learned positional encodings (section 3.5)
- `masks`: padding and causal masks (True = may attend)
- `residual`: the residual sub-layer, the paper's "Add & Norm" (`AddNorm`)
- `layers`: feed-forward network, encoder and decoder layers and stacks (section 3.1)
- `model`: the full encoder-decoder with embeddings and output layer
- `interop`: `from_torch`, PyTorch's `nn.Transformer*` modules copied into the classes above
- `training`: teacher-forced batches, label smoothing, the warm-up schedule, the one training
  loop (Transformer and RNN alike)
- `decoding`: greedy and beam search on ids, `translate` on strings, for every model
- `metrics`: exact match (overall and by input length), character error rate, BLEU
- `recipes`: the settings the book trains its date Transformer and its RNNs with
- `checkpoints`: the one checkpoint format (weights, config, vocabularies, record)
- `vocab`: character vocabularies and padded batches
- `dates`: dates written as people write them (CLDR patterns via Babel)
- `data`: the date-normalisation task split by calendar date, and small synthetic tasks
- `rnn`: the recurrent encoder-decoders of Part I (models only)
- `viz`: plotting defaults and attention heat maps
- `diagrams`: the model map ("you are here") and box-and-arrow figures
- `asides`: helpers that keep long chapters focused (a convex hull, chapter 7's training
  experiment, drawings of rotations and masks)
- `efficient`: exact attention without the T x T matrix (blockwise, online softmax) and sparse
  attention masks (chapter 13)
- `lm`: a decoder-only language model, its key/value cache and sampling (chapter 14)
- `bughunt`: planted bugs and the checks that catch them (chapter 15)
- `attention_maps`: a model run's attention weights by kind (encoder, decoder, cross), the one
  rule that names a module's kind
- `explorer`: `AttentionExplorer`, an interactive attention-map widget (imported on first use);
  `explorer_state` writes and reads its saved state
"""
from .attention import MultiHeadAttention, fused_attention, record_attention, scaled_dot_product_attention
from .residual import AddNorm
from .layers import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward
from .masks import causal_mask, padding_mask, target_mask
from .model import EncoderDecoder, Transformer, TransformerConfig, count_parameters
from .interop import from_torch
from .positional import LearnedPositionalEncoding, PositionalEncoding, sinusoidal_encoding
from .utils import CHECKPOINTS, setup
from .viz import plot_attention
from .decoding import beam_search, greedy_decode
from .training import LabelSmoothingLoss, TrainConfig, noam_lr, train
from . import (asides, attention_maps, bughunt, checkpoints, data, dates, decoding, diagrams,  # noqa: E402
               efficient, interop, lm, masks, metrics, recipes, residual, rnn, training, vocab)  # modules, for tl.metrics.bleu etc.

__version__ = "0.1.0"

__all__ = [
    "MultiHeadAttention", "scaled_dot_product_attention", "fused_attention", "record_attention",
    "AddNorm", "FeedForward", "EncoderLayer", "DecoderLayer", "Encoder", "Decoder",
    "causal_mask", "padding_mask", "target_mask",
    "Transformer", "TransformerConfig", "EncoderDecoder", "count_parameters", "from_torch",
    "sinusoidal_encoding", "PositionalEncoding", "LearnedPositionalEncoding",
    "setup", "CHECKPOINTS", "plot_attention", "AttentionExplorer",
    "data", "dates", "vocab", "attention_maps", "masks", "checkpoints", "decoding", "metrics", "rnn", "training", "recipes",
    "efficient", "interop", "residual", "lm", "bughunt", "asides", "diagrams", "viz",
    "greedy_decode", "beam_search", "LabelSmoothingLoss", "TrainConfig", "noam_lr", "train",
]


def __getattr__(name: str):
    # The explorer needs anywidget and ipywidgets: import them only when it is first used.
    if name == "AttentionExplorer":
        from .explorer import AttentionExplorer

        return AttentionExplorer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
