"""Chapter 6's exercise checks: the reference answers pass, other right answers pass (float32
angles among them), and the plausible wrong answers (those the reviews name among them) fail
with a message that says what is wrong."""
from __future__ import annotations

import re

import pytest
import torch

import transformer_lib as tl
from transformer_lib.book.exercises import ch06


# --- exercise 1: rotary embeddings ----------------------------------------------------------

def rotate(x, dtype=None, mistake=None):
    T, d = x.shape
    dtype = dtype or x.dtype
    exponent = torch.arange(0, d, 2, dtype=dtype) / d
    if mistake == "no factor 2":
        exponent = torch.arange(d // 2, dtype=dtype) / d
    omega = 10000 ** (-exponent)
    angle = torch.arange(T, dtype=dtype)[:, None] * omega
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    if mistake == "clockwise":
        sin = -sin
    even, odd = x[:, 0::2], x[:, 1::2]
    if mistake == "in place":
        x[:, 0::2] = even * cos - odd * sin
        x[:, 1::2] = x[:, 0::2] * sin + odd * cos
        return x
    if mistake == "half pairs":
        a, b = x[:, : d // 2], x[:, d // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    out = torch.empty_like(x)
    out[:, 0::2] = even * cos - odd * sin
    out[:, 1::2] = even * sin + odd * cos
    return out


def test_the_reference_rotation_passes():
    assert ch06.check_rotate(rotate).startswith("Correct")


def test_float32_angles_pass():  # the review's high finding: rejected with atol 1e-9 before
    def natural(x):
        omega = 10000 ** (-torch.arange(0, x.shape[1], 2) / x.shape[1])  # float32, as LLaMA does
        return rotate(x, dtype=omega.dtype)
    assert ch06.check_rotate(natural).startswith("Correct")


def test_complex_numbers_and_float32_output_pass():
    def as_complex(x):
        T, d = x.shape
        omega = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        turn = torch.polar(torch.ones(T, d // 2, dtype=torch.float64),
                           torch.arange(T, dtype=torch.float64)[:, None] * omega)
        z = torch.view_as_complex(x.reshape(T, d // 2, 2).contiguous()) * turn
        return torch.view_as_real(z).flatten(-2).float()
    assert ch06.check_rotate(as_complex).startswith("Correct")


@pytest.mark.parametrize("mistake, message", [
    ("clockwise", "turns every pair clockwise"),
    ("no factor 2", "the exponent has the factor 2"),
    ("half pairs", "paired channel i with channel i + d/2"),
    ("in place", "already rotated even channels"),
])
def test_wrong_rotations_fail_and_say_why(mistake, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        ch06.check_rotate(lambda x: rotate(x, mistake=mistake))


def test_an_unrotated_input_and_a_wrong_shape_fail():
    with pytest.raises(AssertionError, match="come back unchanged"):
        ch06.check_rotate(lambda x: x)
    with pytest.raises(AssertionError, match="same shape"):
        ch06.check_rotate(lambda x: x[:, :2])


# --- exercise 2: concatenated to interleaved ------------------------------------------------

def to_interleaved(table):
    sines, cosines = table.chunk(2, dim=-1)
    return torch.stack([sines, cosines], dim=-1).flatten(-2)


def test_the_reference_reordering_passes():
    assert ch06.check_to_interleaved(to_interleaved).startswith("Correct")


@pytest.mark.parametrize("other", [
    lambda t: t.view(t.shape[0], 2, -1).transpose(1, 2).reshape(t.shape),
    lambda t: t[:, torch.arange(t.shape[1]).view(2, -1).T.flatten()],
    lambda t: t.float()[:, ch06.interleaving_permutation(t.shape[1])],
])
def test_other_right_reorderings_pass(other):
    assert ch06.check_to_interleaved(other).startswith("Correct")


PERM_64 = ch06.interleaving_permutation(64)


@pytest.mark.parametrize("wrong, message", [
    (lambda t: tl.sinusoidal_encoding(*t.shape, dtype=torch.float64), "rather than recomputing"),
    (lambda t: t[:, PERM_64], "IndexError"),  # the old solution's tip, right only for d = 64
    (lambda t: t.view(t.shape[0], -1, 2).transpose(1, 2).reshape(t.shape), "inverse re-ordering"),
    (lambda t: torch.stack(t.chunk(2, dim=-1)[::-1], dim=-1).flatten(-2), "the sine goes to the even"),
    (lambda t: t, "not the paper's interleaved layout"),
])
def test_wrong_reorderings_fail_and_say_why(wrong, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        ch06.check_to_interleaved(wrong)


def test_the_helpers_agree_with_the_library():
    for d in (8, 64):
        perm = ch06.interleaving_permutation(d)
        torch.testing.assert_close(ch06.concatenated_encoding(20, d)[:, perm],
                                   tl.sinusoidal_encoding(20, d, dtype=torch.float64))
    with pytest.raises(ValueError, match="d_model"):
        ch06.concatenated_encoding(5, 7)
