"""transformer_lib: the tested building blocks of the Transformer tutorial book.

One module per concept, in the paper's order:

- `attention`: scaled dot-product attention (equation 1) and multi-head attention
- `positional`: sinusoidal and learned positional encodings (section 3.5)
- `masks`: padding and causal masks (True = may attend)
- `layers`: feed-forward network, encoder and decoder layers and stacks (section 3.1)
- `model`: the full encoder-decoder with embeddings and output layer
- `viz`: plotting defaults and attention heat maps
"""
from .attention import MultiHeadAttention, fused_attention, record_attention, scaled_dot_product_attention
from .layers import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward
from .masks import causal_mask, padding_mask, target_mask
from .model import EncoderDecoder, Transformer, TransformerConfig, count_parameters
from .positional import LearnedPositionalEncoding, PositionalEncoding, sinusoidal_encoding
from .utils import setup
from .viz import plot_attention

__version__ = "0.1.0"

__all__ = [
    "MultiHeadAttention", "scaled_dot_product_attention", "fused_attention", "record_attention",
    "FeedForward", "EncoderLayer", "DecoderLayer", "Encoder", "Decoder",
    "causal_mask", "padding_mask", "target_mask",
    "Transformer", "TransformerConfig", "EncoderDecoder", "count_parameters",
    "sinusoidal_encoding", "PositionalEncoding", "LearnedPositionalEncoding",
    "setup", "plot_attention",
]
