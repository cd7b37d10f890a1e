"""Chapter 7's exercises: the pre-norm encoder layer, and layer normalisation over several axes.

Each check runs the reader's function on inputs it makes itself and returns a one-line verdict
when the answer is right; otherwise it raises an AssertionError that says what is wrong. The
reference solutions are here too (`pre_norm_forward`, `layer_norm`), so that the chapter can
show what a right answer prints and the tests can hold the checks to them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import transformer_lib as tl

__all__ = ["check_pre_norm", "check_layer_norm", "pre_norm_forward", "layer_norm"]


# --------------------------------------------------------------------------------------------
# Exercise 1: the pre-norm layer
# --------------------------------------------------------------------------------------------

def pre_norm_forward(layer, x, mask=None):
    """The reference solution: x + SelfAttention(LayerNorm(x)), then x + FFN(LayerNorm(x))."""
    h = layer.norm1(x)
    x = x + layer.self_attn(h, h, h, mask)
    return x + layer.ff(layer.norm2(x))


def _pre_norm_layers(seed: int = 5):
    """A pre-norm `tl.EncoderLayer` with non-trivial gains and biases, and a post-norm one with
    the same weights (the layer the reader's function receives: its modules are the same)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # the reader's random state is left as it was
        torch.manual_seed(seed)
        pre = tl.EncoderLayer(32, 4, 64, dropout=0.0, norm_first=True).eval()
        post = tl.EncoderLayer(32, 4, 64, dropout=0.0, norm_first=False).eval()
    with torch.no_grad():
        for norm in (pre.norm1, pre.norm2):
            norm.weight.copy_(torch.rand(32, generator=gen) + 0.5)
            norm.bias.copy_(torch.randn(32, generator=gen) * 0.1)
    post.load_state_dict(pre.state_dict())
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    mask = tl.padding_mask(ids, pad_id=0)  # (B, 1, 1, T): the second sentence is padded
    x = torch.randn(2, 5, 32, generator=gen)
    return pre, post, x, mask


def _close(a, b, atol=1e-5) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=atol)


def check_pre_norm(fn) -> str:
    """Check `fn(layer, x, mask)` against `tl.EncoderLayer(..., norm_first=True)` with the same
    weights; name the usual slips (post-norm, no mask, the branch added to the normalised input,
    one norm for both branches, a norm after the last sum)."""
    pre, post, x, mask = _pre_norm_layers()
    with torch.no_grad():
        got = fn(post, x, mask)
        assert isinstance(got, torch.Tensor), (
            f"Not yet: return the layer's output as a tensor, got {type(got).__name__}")
        assert got.shape == x.shape, (
            f"Not yet: expected the input's shape {tuple(x.shape)}, got {tuple(got.shape)}")
        got = got.float()
        if _close(got, pre(x, mask)):
            return "Correct: your pre-norm layer matches tl.EncoderLayer(norm_first=True)."
        # The slips, each computed from the same modules.
        assert not _close(got, post(x, mask)), (
            "Not yet: that is the post-norm layer, LayerNorm(x + Sublayer(x)); normalise at "
            "the start of each branch instead: x + Sublayer(LayerNorm(x))")
        assert not _close(got, pre(x, None)), (
            "Not yet: the mask is not used; pass it to self-attention so that no query "
            "attends to padding")
        h = post.norm1(x)
        h = h + post.self_attn(h, h, h, mask)
        h2 = post.norm2(h)
        assert not _close(got, h2 + post.ff(h2)), (
            "Not yet: the branch is added to LayerNorm(x); add it to x itself, so that the "
            "residual path from input to output goes through no norm")
        h = post.norm1(x)
        one = x + post.self_attn(h, h, h, mask)
        assert not _close(got, one + post.ff(post.norm1(one))), (
            "Not yet: both branches use norm1; the feed-forward branch has its own norm, norm2")
        out = pre(x, mask)
        assert not _close(got, post.norm2(out)) and not _close(got, F.layer_norm(out, (32,))), (
            "Not yet: a pre-norm layer ends with the residual sum; there is no norm after it "
            "(the stack adds one final LayerNorm after its last layer)")
    raise AssertionError("Not yet: the output differs from tl.EncoderLayer(norm_first=True): "
                         "x = x + self_attn(norm1(x)), then x + ff(norm2(x))")


# --------------------------------------------------------------------------------------------
# Exercise 2: layer normalisation over the last n axes
# --------------------------------------------------------------------------------------------

def layer_norm(x, n_axes, weight, bias, eps=1e-5):
    """The reference solution: normalise over the last n_axes axes, then gain and bias."""
    dims = tuple(range(-n_axes, 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    return weight * (x - mean) / torch.sqrt(var + eps) + bias


def _layer_norm_slips(x, n_axes, weight, bias, eps):
    """What the usual slips compute, with the message for each."""
    dims = tuple(range(-n_axes, 0))
    centred = x - x.mean(dims, keepdim=True)
    var = x.var(dims, unbiased=False, keepdim=True)
    last = x - x.mean(-1, keepdim=True)
    return [
        (weight * centred / torch.sqrt(x.var(dims, keepdim=True) + eps) + bias,
         "use the biased variance (divide by the number of entries, not one less)"),
        (weight * centred / (torch.sqrt(var) + eps) + bias,
         "eps goes inside the square root: sqrt(var + eps), not sqrt(var) + eps"),
        (weight * last / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps) + bias,
         f"with n_axes={n_axes} the statistics are taken over the last {n_axes} axes together, "
         "not over the last axis alone"),
        (centred / torch.sqrt(var + eps),
         "the gain (weight) and bias are missing"),
        (weight * (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) + bias,
         "the statistics are taken over the whole tensor; take them over the last n_axes "
         "axes of each slice"),
    ]


def check_layer_norm(fn) -> str:
    """Check `fn(x, n_axes, weight, bias, eps)` against `F.layer_norm` for one and two axes, on a
    token so small that eps matters, and against the library's own LayerNorm."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(3, 5, 16, generator=gen) * 4 + 2
    x[0, 0] *= 1e-3  # a tiny token: eps is not negligible next to its variance
    for n_axes in (1, 2):
        shape = x.shape[-n_axes:]
        weight = torch.rand(shape, generator=gen) + 0.5
        bias = torch.randn(shape, generator=gen)
        got = fn(x, n_axes, weight, bias, 1e-5)
        assert isinstance(got, torch.Tensor), (
            f"Not yet: return a tensor, got {type(got).__name__}")
        assert got.shape == x.shape, (
            f"Not yet: expected the input's shape {tuple(x.shape)}, got {tuple(got.shape)}")
        expected = F.layer_norm(x, tuple(shape), weight, bias, 1e-5)
        if _close(got.float(), expected, atol=1e-4):
            continue
        for slip, message in _layer_norm_slips(x, n_axes, weight, bias, 1e-5):
            assert not _close(got.float(), slip, atol=1e-4), f"Not yet: {message}"
        raise AssertionError(f"Not yet: with n_axes={n_axes} the result differs from "
                             "F.layer_norm")
    with torch.random.fork_rng(devices=[]):
        norm = tl.EncoderLayer(16, 4, 32).norm1  # the library's LayerNorm ...
    with torch.no_grad():  # ... with a random gain and bias
        norm.weight.copy_(torch.rand(16, generator=gen) + 0.5)
        norm.bias.copy_(torch.randn(16, generator=gen))
        ours = fn(x, 1, norm.weight, norm.bias, norm.eps)
        assert _close(ours.float(), norm(x), atol=1e-4), (
            "Not yet: the result differs from the library's LayerNorm with the same gain, "
            "bias and eps")
    return "Correct: your layer_norm matches F.layer_norm and the library's LayerNorm."
