"""transformer_lib: the tested building blocks of the Transformer tutorial book.

One module per concept, in the paper's order (CONTRIBUTING.md, "Layout", draws their floors):

- `special_tokens`: <pad>, <bos>, <eos>, <unk> and their ids, the one place everything reads them

- `attention`: scaled dot-product attention (equation 1) and multi-head attention, which reads
  and extends a key/value cache (`kv_cache`: `KVCache`, and `DecoderCache` for the
  encoder-decoder)
- `positional`: sinusoidal and learned positional encodings (section 3.5), rotary embeddings
- `masks`: padding and causal masks (True = may attend)
- `residual`: the residual sub-layer, the paper's "Add & Norm" (`AddNorm`, or `AddRMSNorm`)
- `layers`: feed-forward networks (the paper's and SwiGLU), encoder and decoder layers and
  stacks (section 3.1)
- `model`: the embeddings (`Embeddings`) and the full encoder-decoder with its output layer
- `interop`: `from_torch`, PyTorch's `nn.Transformer*` modules copied into the classes above
- `losses`: label-smoothed cross-entropy (section 5.4)
- `schedules`: learning-rate schedules, the paper's warm-up (equation 3) among them
- `training`: teacher-forced batches and the one training loop (every model of the book)
- `decoding`: greedy and beam search on ids (through the cache where the model has one),
  `translate` on strings, for every model
- `metrics`: exact match (overall and by input length), character error rate, BLEU
- `recipes`: the settings the book trains its date Transformer and its RNNs with
- `checkpoints`: the one checkpoint format (weights, config, vocabularies, record), and the
  book's trained checkpoints in the same folder (`CHECKPOINTS`)
- `vocab`: character vocabularies and padded batches
- `dates`: dates written as people write them (CLDR patterns via Babel)
- `data`: the date-normalisation task split by calendar date, and small synthetic tasks
- `rnn`: the recurrent encoder-decoders of Part I (models only)
- `runtime`: where tensors live and the mode a model runs in (`device_of`, `eval_mode`, the
  book's device, `setup` for seeds, threads and device), and the torch-version test
- `efficient`: the online-softmax fold, exact attention without the T x T matrix (blockwise)
  and sparse attention masks (chapter 13); its `peak_tensor_memory` (module `memory`, which
  needs a private PyTorch module) is imported on first use
- `flash`: FlashAttention for training, a tiled forward pass and a recomputing backward pass
  (chapter 13)
- `lm`: decoder-only language models (`CausalLMConfig`, `CausalLM`), cached generation and
  sampling, next-token training (chapters 14 and 16)
- `attention_maps`: a model run's attention weights by kind (encoder, decoder, cross), the one
  rule that names a module's kind
- `parallel`: data, tensor, sequence and sharded parallelism over processes (chapter 17;
  imported on its own, `from transformer_lib import parallel`, and only on torch >= 2.10)

Inputs are checked where a call enters the library, once per call (`_checks.entry_point`).

The book's teaching aids (figures, diagrams, the attention explorer, chapter helpers, the bug
hunt, the notebooks' setup) live apart, in `transformer_lib.book`, which imports this package and is
never imported by it.
"""
from .attention import KVCache, MultiHeadAttention, fused_attention, record_attention, scaled_dot_product_attention
from .residual import AddNorm, AddRMSNorm
from .layers import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward, SwiGLU
from .masks import causal_mask, padding_mask, target_mask
from .model import Embeddings, EncoderDecoder, Transformer, TransformerConfig, count_parameters
from .interop import from_torch
from .positional import LearnedPositionalEncoding, PositionalEncoding, RotaryEmbedding, sinusoidal_encoding
from .checkpoints import CHECKPOINTS
from .decoding import beam_search, greedy_decode
from .losses import LabelSmoothingLoss
from .schedules import noam_lr
from .training import TrainConfig, train
from . import (attention_maps, checkpoints, data, dates, decoding, efficient, flash,  # noqa: E402
               interop, kv_cache, lm, losses, masks, metrics, recipes, residual, rnn, runtime,
               schedules, special_tokens, training, vocab)  # modules, for tl.metrics.bleu etc.

__version__ = "0.1.0"

__all__ = [
    "MultiHeadAttention", "KVCache", "scaled_dot_product_attention", "fused_attention", "record_attention",
    "AddNorm", "AddRMSNorm", "FeedForward", "SwiGLU", "EncoderLayer", "DecoderLayer", "Encoder", "Decoder",
    "causal_mask", "padding_mask", "target_mask",
    "Embeddings", "Transformer", "TransformerConfig", "EncoderDecoder", "count_parameters", "from_torch",
    "sinusoidal_encoding", "PositionalEncoding", "LearnedPositionalEncoding", "RotaryEmbedding",
    "CHECKPOINTS",
    "data", "dates", "vocab", "attention_maps", "masks", "checkpoints", "decoding", "metrics", "rnn", "training",
    "recipes",
    "efficient", "flash", "interop", "residual", "lm", "runtime",
    "kv_cache", "losses", "schedules", "special_tokens",
    "greedy_decode", "beam_search", "LabelSmoothingLoss", "TrainConfig", "noam_lr", "train",
]

