"""Chapter 8's exercise checks: the reference solutions pass, the usual slips fail with a message
that says what is wrong, and other right answers pass."""
import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib.book.exercises import ch08


# ---- exercise 1: local_causal_mask -----------------------------------------------------------

def offsets(length):
    position = torch.arange(length)
    return position[:, None] - position[None, :]


def one_too_wide(length, window):
    d = offsets(length)
    return (d >= 0) & (d <= window)


def transposed(length, window):
    return ch08.local_causal_mask(length, window).T


def both_directions(length, window):
    return offsets(length).abs() < window


def no_window(length, window):
    return offsets(length) >= 0


def as_integers(length, window):
    return ch08.local_causal_mask(length, window).int()


def from_triangles(length, window):
    """A right answer: the lower triangle less everything window or more below the diagonal."""
    ones = torch.ones(length, length, dtype=torch.bool)
    return ones.tril() & ~ones.tril(-window)


def as_nested_list(length, window):
    """A right answer as a list of lists of booleans."""
    return [[0 <= i - j < window for j in range(length)] for i in range(length)]


@pytest.mark.parametrize("answer", [ch08.local_causal_mask, from_triangles, as_nested_list])
def test_local_mask_right_answers_pass(answer):
    assert ch08.check_local_causal_mask(answer).startswith("Correct")


@pytest.mark.parametrize("answer, message", [
    (one_too_wide, "one too wide"),
    (transposed, "transposed"),
    (both_directions, "see the keys after them"),
    (no_window, "window is not applied"),
    (as_integers, "return booleans"),
])
def test_local_mask_slips_fail_with_their_message(answer, message):
    with pytest.raises(AssertionError, match=message):
        ch08.check_local_causal_mask(answer)


# ---- exercise 2: the masks of nn.TransformerDecoderLayer ---------------------------------------

def forgot_the_not(src_ids, tgt_ids, pad_id):
    return (tl.causal_mask(tgt_ids.shape[1]), tgt_ids != pad_id, src_ids != pad_id)


def padding_swapped(src_ids, tgt_ids, pad_id):
    causal, tgt_pad, mem_pad = ch08.torch_decoder_masks(src_ids, tgt_ids, pad_id)
    return causal, mem_pad, tgt_pad


def float_zero_one(src_ids, tgt_ids, pad_id):
    causal, tgt_pad, mem_pad = ch08.torch_decoder_masks(src_ids, tgt_ids, pad_id)
    return causal.float(), tgt_pad, mem_pad


def book_target_mask(src_ids, tgt_ids, pad_id):
    _, tgt_pad, mem_pad = ch08.torch_decoder_masks(src_ids, tgt_ids, pad_id)
    return ~tl.target_mask(tgt_ids, pad_id), tgt_pad, mem_pad


def causal_only_forgot_the_not(src_ids, tgt_ids, pad_id):
    _, tgt_pad, mem_pad = ch08.torch_decoder_masks(src_ids, tgt_ids, pad_id)
    return tl.causal_mask(tgt_ids.shape[1]), tgt_pad, mem_pad


def diagonal_blocked(src_ids, tgt_ids, pad_id):
    _, tgt_pad, mem_pad = ch08.torch_decoder_masks(src_ids, tgt_ids, pad_id)
    T = tgt_ids.shape[1]
    return torch.ones(T, T, dtype=torch.bool).triu(), tgt_pad, mem_pad


def float_minus_inf(src_ids, tgt_ids, pad_id):
    """A right answer: PyTorch's own float causal mask (0 allowed, -inf blocked)."""
    _, tgt_pad, mem_pad = ch08.torch_decoder_masks(src_ids, tgt_ids, pad_id)
    return nn.Transformer.generate_square_subsequent_mask(tgt_ids.shape[1]), tgt_pad, mem_pad


def float_finite_fill(src_ids, tgt_ids, pad_id):
    """A right answer: a float causal mask filled with a large finite negative number (-1e9),
    as the library fills its own scores; PyTorch's layer gives the same output."""
    _, tgt_pad, mem_pad = ch08.torch_decoder_masks(src_ids, tgt_ids, pad_id)
    T = tgt_ids.shape[1]
    return torch.zeros(T, T).masked_fill(~tl.causal_mask(T), -1e9), tgt_pad, mem_pad


def float_dtype_minimum(src_ids, tgt_ids, pad_id):
    """A right answer: the float32 minimum as the blocking value."""
    _, tgt_pad, mem_pad = ch08.torch_decoder_masks(src_ids, tgt_ids, pad_id)
    T = tgt_ids.shape[1]
    blocked = torch.finfo(torch.float32).min
    return torch.zeros(T, T).masked_fill(~tl.causal_mask(T), blocked), tgt_pad, mem_pad


def float_minus_one(src_ids, tgt_ids, pad_id):
    """A wrong answer: -1 added to a score lowers it a little and blocks nothing."""
    _, tgt_pad, mem_pad = ch08.torch_decoder_masks(src_ids, tgt_ids, pad_id)
    T = tgt_ids.shape[1]
    return torch.zeros(T, T).masked_fill(~tl.causal_mask(T), -1.0), tgt_pad, mem_pad


def through_the_library(src_ids, tgt_ids, pad_id):
    """A right answer built from the book's masks and tl.masks.to_torch_mask (a list)."""
    return [tl.masks.to_torch_mask(tl.causal_mask(tgt_ids.shape[1])),
            tl.masks.to_torch_mask(tl.padding_mask(tgt_ids, pad_id))[:, 0, 0],
            tl.masks.to_torch_mask(tl.padding_mask(src_ids, pad_id))[:, 0, 0]]


@pytest.mark.parametrize("answer", [ch08.torch_decoder_masks, float_minus_inf,
                                    float_finite_fill, float_dtype_minimum, through_the_library])
def test_decoder_masks_right_answers_pass(answer):
    assert ch08.check_torch_decoder_masks(answer).startswith("Correct")


@pytest.mark.parametrize("answer, message", [
    (forgot_the_not, "tgt_mask, tgt_key_padding_mask, memory_key_padding_mask are the book's"),
    (causal_only_forgot_the_not, "tgt_mask is the book's convention"),
    (padding_swapped, "the two padding masks are swapped"),
    (float_zero_one, "a 1 .or a small negative number. does not block anything"),
    (float_minus_one, "a small negative number"),
    (book_target_mask, r"\(B, 1, T, T\) target mask"),
    (diagonal_blocked, "tgt_mask blocks the wrong cells"),
])
def test_decoder_masks_slips_fail_with_their_message(answer, message):
    with pytest.raises(AssertionError, match=message):
        ch08.check_torch_decoder_masks(answer)
