"""Chapter 7's exercise checks: the reference solutions pass, the usual slips fail with a message
that says what is wrong, and other right answers pass."""
import pytest
import torch
import torch.nn.functional as F

from transformer_lib.book.exercises import ch07


# ---- exercise 1: pre_norm_forward ------------------------------------------------------------

def post_norm(layer, x, mask=None):
    x = layer.norm1(x + layer.self_attn(x, x, x, mask))
    return layer.norm2(x + layer.ff(x))


def no_mask(layer, x, mask=None):
    return ch07.pre_norm_forward(layer, x, None)


def branch_on_normed_input(layer, x, mask=None):
    h = layer.norm1(x)
    h = h + layer.self_attn(h, h, h, mask)
    h2 = layer.norm2(h)
    return h2 + layer.ff(h2)


def norm1_twice(layer, x, mask=None):
    h = layer.norm1(x)
    x = x + layer.self_attn(h, h, h, mask)
    return x + layer.ff(layer.norm1(x))


def extra_final_norm(layer, x, mask=None):
    return layer.norm2(ch07.pre_norm_forward(layer, x, mask))


def wrong_shape(layer, x, mask=None):
    return ch07.pre_norm_forward(layer, x, mask)[:, :1]


def functional_norms(layer, x, mask=None):
    """A right answer that calls F.layer_norm with the modules' parameters."""
    d = x.shape[-1]
    h = F.layer_norm(x, (d,), layer.norm1.weight, layer.norm1.bias, layer.norm1.eps)
    x = x + layer.self_attn(h, h, h, mask)
    h = F.layer_norm(x, (d,), layer.norm2.weight, layer.norm2.bias, layer.norm2.eps)
    return x + layer.ff(h)


def test_pre_norm_reference_and_another_right_answer_pass():
    assert ch07.check_pre_norm(ch07.pre_norm_forward).startswith("Correct")
    assert ch07.check_pre_norm(functional_norms).startswith("Correct")


@pytest.mark.parametrize("answer, message", [
    (post_norm, "that is the post-norm layer"),
    (no_mask, "the mask is not used"),
    (branch_on_normed_input, "the branch is added to LayerNorm"),
    (norm1_twice, "both branches use norm1"),
    (extra_final_norm, "there is no norm after it"),
    (wrong_shape, "expected the input's shape"),
])
def test_pre_norm_slips_fail_with_their_message(answer, message):
    with pytest.raises(AssertionError, match=message):
        ch07.check_pre_norm(answer)


def test_pre_norm_check_leaves_the_callers_random_state_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    ch07.check_pre_norm(ch07.pre_norm_forward)
    assert torch.equal(torch.get_rng_state(), before)


# ---- exercise 2: layer_norm ------------------------------------------------------------------

def unbiased(x, n_axes, weight, bias, eps=1e-5):
    dims = tuple(range(-n_axes, 0))
    return weight * (x - x.mean(dims, keepdim=True)) / torch.sqrt(x.var(dims, keepdim=True) + eps) + bias


def eps_outside(x, n_axes, weight, bias, eps=1e-5):
    dims = tuple(range(-n_axes, 0))
    var = x.var(dims, unbiased=False, keepdim=True)
    return weight * (x - x.mean(dims, keepdim=True)) / (torch.sqrt(var) + eps) + bias


def last_axis_only(x, n_axes, weight, bias, eps=1e-5):
    var = x.var(-1, unbiased=False, keepdim=True)
    return weight * (x - x.mean(-1, keepdim=True)) / torch.sqrt(var + eps) + bias


def no_gain_or_bias(x, n_axes, weight, bias, eps=1e-5):
    dims = tuple(range(-n_axes, 0))
    var = x.var(dims, unbiased=False, keepdim=True)
    return (x - x.mean(dims, keepdim=True)) / torch.sqrt(var + eps)


def whole_tensor(x, n_axes, weight, bias, eps=1e-5):
    return weight * (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) + bias


def in_float64(x, n_axes, weight, bias, eps=1e-5):
    """A right answer computed in float64 with torch.var_mean and rsqrt."""
    dims = tuple(range(-n_axes, 0))
    x = x.double()
    var, mean = torch.var_mean(x, dim=dims, unbiased=False, keepdim=True)
    return weight.double() * (x - mean) * torch.rsqrt(var + eps) + bias.double()


def test_layer_norm_reference_and_another_right_answer_pass():
    assert ch07.check_layer_norm(ch07.layer_norm).startswith("Correct")
    assert ch07.check_layer_norm(in_float64).startswith("Correct")


@pytest.mark.parametrize("answer, message", [
    (unbiased, "use the biased variance"),
    (eps_outside, "eps goes inside the square root"),
    (last_axis_only, "not over the last axis alone"),
    (no_gain_or_bias, "the gain .* and bias are missing"),
    (whole_tensor, "over the whole tensor"),
])
def test_layer_norm_slips_fail_with_their_message(answer, message):
    with pytest.raises(AssertionError, match=message):
        ch07.check_layer_norm(answer)
