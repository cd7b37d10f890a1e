"""Bad input gets a clear error that names the argument and what was expected."""
import pytest
import torch

import transformer_lib as tl
from transformer_lib import book


def test_d_model_must_divide_by_heads():
    with pytest.raises(ValueError, match=r"d_model=10 must be divisible by n_heads=4"):
        tl.MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match=r"d_model=10 must be divisible by n_heads=4"):
        tl.TransformerConfig(5, 5, d_model=10, n_heads=4)


@pytest.mark.parametrize("kwargs,match", [
    (dict(n_heads=0), "n_heads must be a positive integer"),
    (dict(d_ff=-1), "d_ff must be a positive integer"),
    (dict(dropout=1.5), r"dropout must be a probability"),
    (dict(n_layers=2.0), "n_layers must be a positive integer"),
    (dict(share_embeddings=True, tgt_vocab=7), "share_embeddings needs one vocabulary"),
])
def test_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tl.TransformerConfig(**(dict(src_vocab=5, tgt_vocab=5, d_model=8, n_heads=2) | kwargs))


def test_attention_input_shapes():
    mha = tl.MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"query must have shape \(batch, length, d_model=8\)"):
        mha(torch.randn(2, 3, 6), x, x)
    with pytest.raises(ValueError, match="query must have 3 dimensions"):
        mha(torch.randn(3, 8), x, x)
    with pytest.raises(ValueError, match="same batch size"):
        mha(x, torch.randn(1, 3, 8), torch.randn(1, 3, 8))
    with pytest.raises(ValueError, match="key and value must have the same length"):
        mha(x, torch.randn(2, 4, 8), torch.randn(2, 5, 8))
    with pytest.raises(TypeError, match="query must be a floating-point tensor"):
        mha(torch.ones(2, 3, 8, dtype=torch.long), x, x)
    with pytest.raises(TypeError, match="key must be a torch.Tensor"):
        mha(x, [[1.0]], x)


def test_mask_dtype_and_shape():
    mha = tl.MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        mha(x, x, x, torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\) does not broadcast .* \(2, 2, 3, 3\)"):
        mha(x, x, x, torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask of shape"):
        tl.scaled_dot_product_attention(x, x, x, torch.ones(2, 1, 3, 3, 3, dtype=torch.bool))


def test_sdpa_shape_errors():
    with pytest.raises(ValueError, match="query and key must share their last dimension d_k"):
        tl.scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 5))
    with pytest.raises(ValueError, match="key and value must have the same length k_len"):
        tl.scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 4), torch.randn(2, 4))


def test_token_ids_out_of_vocabulary():
    model = tl.Transformer(tl.TransformerConfig(10, 12, d_model=8, n_heads=2, d_ff=16, n_layers=1))
    ok_src, ok_tgt = torch.randint(0, 10, (2, 4)), torch.randint(0, 12, (2, 3))
    with pytest.raises(ValueError, match=r"src holds token ids in \[\d+, 10\], but the vocabulary has ids 0..9"):
        model(torch.tensor([[1, 10]]), ok_tgt[:1])
    with pytest.raises(ValueError, match=r"tgt holds token ids in \[-1, \d+\]"):
        model(ok_src, torch.tensor([[-1, 2, 3], [1, 2, 3]]))
    with pytest.raises(TypeError, match="src must hold integer token ids"):
        model(torch.rand(2, 4), ok_tgt)
    with pytest.raises(ValueError, match="src must have 2 dimensions"):
        model(torch.tensor([1, 2]), ok_tgt)


def test_stack_input_checks():
    enc = tl.Encoder(8, 2, 16, 1)
    with pytest.raises(ValueError, match=r"x must have last dimension d_model=8"):
        enc(torch.randn(1, 3, 4))
    dec = tl.Decoder(8, 2, 16, 1)
    with pytest.raises(ValueError, match="memory must have the batch size of x"):
        dec(torch.randn(2, 3, 8), torch.randn(3, 3, 8))


def test_positional_errors():
    with pytest.raises(ValueError, match="d_model must be even"):
        tl.sinusoidal_encoding(4, 7)
    with pytest.raises(ValueError, match="n_positions must be a positive integer"):
        tl.sinusoidal_encoding(0, 8)


def test_mask_helpers_errors():
    with pytest.raises(ValueError, match="length must be a positive integer"):
        tl.causal_mask(0)
    with pytest.raises(TypeError, match="ids must hold integer token ids"):
        tl.padding_mask(torch.rand(2, 3), 0)


def test_setup_threads():
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        book.setup(threads=0)


def test_plot_attention_checks_tokens():
    with pytest.raises(ValueError, match="query_tokens has 2 tokens but weights has 3 rows"):
        book.plot_attention(torch.rand(3, 3), ["a", "b"], ["a", "b", "c"])
