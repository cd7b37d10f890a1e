"""interop.from_torch: one entry point, dispatching on the torch type; what it refuses to copy."""
import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib.interop import from_torch

D, H, FF = 16, 2, 32


@pytest.mark.parametrize("make,expected", [
    (lambda: nn.MultiheadAttention(D, H, batch_first=True), tl.MultiHeadAttention),
    (lambda: nn.TransformerEncoderLayer(D, H, FF, batch_first=True), tl.EncoderLayer),
    (lambda: nn.TransformerDecoderLayer(D, H, FF, batch_first=True), tl.DecoderLayer),
    (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, FF, batch_first=True), 2,
                                   enable_nested_tensor=False), tl.Encoder),
    (lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(D, H, FF, batch_first=True), 3), tl.Decoder),
    (lambda: nn.Transformer(D, H, 1, 2, FF, batch_first=True), tl.EncoderDecoder),
])
def test_dispatch_gives_our_class_with_every_parameter(make, expected):
    theirs = make()
    ours = tl.from_torch(theirs)
    assert type(ours) is expected
    assert tl.count_parameters(ours) == tl.count_parameters(theirs)
    # every parameter value is there: the sorted multisets of entries agree
    def flat(m):
        return torch.sort(torch.cat([p.detach().flatten() for p in m.parameters()])).values

    assert torch.equal(flat(ours), flat(theirs))


def test_the_teaching_classes_carry_no_interop():
    for cls in (tl.MultiHeadAttention, tl.EncoderLayer, tl.DecoderLayer, tl.Encoder, tl.Decoder, tl.EncoderDecoder):
        assert not hasattr(cls, "from_torch"), cls.__name__
    assert tl.from_torch is from_torch


def test_other_modules_get_a_type_error_naming_what_is_supported():
    with pytest.raises(TypeError, match=r"nn\.TransformerEncoderLayer.*got Linear"):
        from_torch(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="got EncoderLayer"):
        from_torch(tl.EncoderLayer(D, H, FF))


@pytest.mark.parametrize("make,match", [
    (lambda: nn.TransformerEncoderLayer(D, H, FF, activation="gelu", batch_first=True), "ReLU"),
    (lambda: nn.TransformerDecoderLayer(D, H, FF, activation=nn.GELU(), batch_first=True), "ReLU"),
    (lambda: nn.TransformerEncoderLayer(D, H, FF), "batch_first=True"),
    (lambda: nn.MultiheadAttention(D, H), "batch_first=True"),
    (lambda: nn.MultiheadAttention(D, H, kdim=8, vdim=8, batch_first=True), "kdim = vdim = embed_dim"),
    (lambda: nn.MultiheadAttention(D, H, add_bias_kv=True, batch_first=True), "add_bias_kv=False"),
])
def test_settings_the_library_lacks_are_refused(make, match):
    with pytest.raises(ValueError, match=match):
        from_torch(make())


def test_a_custom_stack_inside_nn_transformer_is_refused():
    theirs = nn.Transformer(D, H, 1, 1, FF, batch_first=True, custom_encoder=nn.Identity())
    with pytest.raises(TypeError, match="transformer.encoder"):
        from_torch(theirs)


@pytest.mark.parametrize("bias", [True, False])
def test_copy_keeps_dtype_norm_first_eps_dropout_and_bias(bias):
    theirs = nn.TransformerDecoderLayer(D, H, FF, dropout=0.25, batch_first=True, norm_first=True,
                                        layer_norm_eps=1e-3, bias=bias, dtype=torch.float64)
    ours = from_torch(theirs)
    assert all(p.dtype == torch.float64 for p in ours.parameters())
    assert ours.norm_first and all(n.norm_first and n.eps == 1e-3 for n in (ours.norm1, ours.norm2, ours.norm3))
    assert ours.self_attn.dropout.p == ours.norm1.dropout.p == ours.ff.dropout.p == 0.25
    biases = (ours.ff.w_1.bias, ours.norm1.bias, ours.cross_attn.w_o.bias)
    assert [b is not None for b in biases] == [bias] * 3
    x, memory = torch.randn(2, 5, D, dtype=torch.float64), torch.randn(2, 4, D, dtype=torch.float64)
    assert (ours.eval()(x, memory) - theirs.eval()(x, memory)).abs().max() < 1e-12


def test_copies_are_independent_of_the_original():
    theirs = nn.TransformerEncoderLayer(D, H, FF, batch_first=True)
    ours = from_torch(theirs)
    with torch.no_grad():
        theirs.linear1.weight.zero_()
        theirs.norm1.weight.zero_()
        theirs.self_attn.in_proj_weight.zero_()
    assert ours.ff.w_1.weight.abs().sum() > 0 and ours.norm1.weight.abs().sum() > 0
    assert ours.self_attn.w_q.weight.abs().sum() > 0


def test_interop_imports_the_teaching_modules_never_the_reverse():
    import ast
    import inspect

    for module in (tl.attention, tl.layers, tl.model, tl.masks, tl.residual, tl.efficient, tl.lm):
        tree = ast.parse(inspect.getsource(module))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        assert "interop" not in imported, f"{module.__name__} imports interop"
