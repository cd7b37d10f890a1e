"""Chapter 15's exercises: two tests the reader writes, each judged on correct and faulty code.

- `check_mask_test(test)`: `test(attention_fn) -> bool` should tell whether an attention rule
  keeps blocked keys out of the output even when every allowed score is very negative. It must
  pass the library's attention and the plain reference, and fail the -1e4 fill (bug 8) and the
  -1e-9 fill (bug 2). Every query of the reader's test keeps at least one allowed key: on a
  row with none the plain reference (a fill of the dtype's minimum) spreads the weight over
  the blocked keys, where the library gives zeros.
- `check_cache_test(test)`: `test(model) -> bool` should tell whether a `lm.CausalLM`'s cached
  steps (fewer queries than keys) give the logits of a full forward pass. It must pass the
  library's model and fail the same model with `is_causal=True` swapped into its attention.

Each returns a one-line verdict when the reader's test judges every case right and raises
AssertionError saying which case it misjudged, and what that means, otherwise.
"""
from __future__ import annotations

import copy
from typing import Callable

import torch

from ...attention import scaled_dot_product_attention, use_attention
from ..bughunt import (attention_causal_flag, attention_fill_1e4, attention_fill_tiny,
                       plain_attention, small_lm)

__all__ = ["check_mask_test", "check_cache_test"]


def _verdict(test: Callable, subject, name: str):
    """The reader's verdict on `subject` as a bool (a Python bool or a one-element boolean
    tensor); anything else is an AssertionError naming what came back."""
    got = test(subject)
    if isinstance(got, torch.Tensor) and got.numel() == 1 and got.dtype == torch.bool:
        got = bool(got)
    if not isinstance(got, bool):
        raise AssertionError(f"your test should return True or False; on {name} it returned "
                             f"{got!r}")
    return got


def check_mask_test(test: Callable) -> str:
    """Chapter 15, exercise 1: `test(attention_fn) -> bool`, where `attention_fn(query, key,
    value, mask)` returns (output, weights) as `scaled_dot_product_attention` does. Returns
    "Correct: ..." or raises AssertionError naming the attention rule it misjudged."""
    if not callable(test):
        raise TypeError(f"test must be a function of an attention rule, got {test!r}")
    right = {"the library's attention": scaled_dot_product_attention,
             "the plain reference (a fill of the dtype's minimum)": plain_attention}
    wrong = {"bug 8 (a fill of -1e4)": (attention_fill_1e4,
                                        "your test passes a fill of -1e4: make every allowed "
                                        "score of a row far below -1e4 (around -3e4), so that "
                                        "the blocked keys win the softmax, and compare outputs "
                                        "that may not see the keys you change"),
             "bug 2 (a fill of -1e-9)": (attention_fill_tiny,
                                         "your test passes a fill of -1e-9, which lets blocked "
                                         "keys in at every scale: change the values of the "
                                         "blocked (future) keys and compare the outputs of the "
                                         "queries that may not see them")}
    for name, fn in right.items():
        if not _verdict(test, fn, name):
            empty_row = ("; if a query of your test has no allowed key at all, the plain "
                         "reference spreads its weight over the blocked keys (the library "
                         "gives it zeros): keep at least one allowed key for every query, as "
                         "a causal mask does"
                         if fn is plain_attention else "")
            raise AssertionError(
                f"your test fails {name}, which is correct: compare only queries whose allowed "
                "keys you left unchanged (the first position, under a causal mask), with a "
                "tolerance (torch.allclose), and change only the values of keys they may not "
                f"see{empty_row}")
    for name, (fn, hint) in wrong.items():
        if _verdict(test, fn, name):
            raise AssertionError(f"{hint} ({name})")
    return "Correct: your test passes the correct rules and catches the -1e4 and -1e-9 fills."


def check_cache_test(test: Callable) -> str:
    """Chapter 15, exercise 2: `test(model) -> bool` should say whether a `lm.CausalLM` fed a
    sequence in pieces through its cache (`model.new_cache(batch)`, `model(ids, cache=cache)`)
    gives the logits of one full forward pass. It must return True for `bughunt.small_lm()`
    and False for the same model with `attention_causal_flag` swapped in, which agrees with it
    on every full (square) forward pass. Returns "Correct: ..." or raises AssertionError."""
    if not callable(test):
        raise TypeError(f"test must be a function of a model, got {test!r}")
    clean = small_lm()
    flagged = use_attention(copy.deepcopy(clean), attention_causal_flag)
    if not _verdict(test, clean, "the library's model"):
        raise AssertionError(
            "your test fails the library's model, whose cache is right: compare the cached "
            "logits with the full pass's with a tolerance (torch.allclose, atol=1e-5), not "
            "exactly, and start from a fresh model.new_cache(batch) for the pieces")
    if _verdict(test, flagged, "is_causal=True in the cached step"):
        raise AssertionError(
            "your test passes the top-left causal mask (is_causal=True), which is wrong "
            "whenever fewer queries than keys attend: after a first piece, feed the rest of "
            "the sequence through the same cache (in pieces, e.g. 5 tokens, then 3, then 1) "
            "and compare every piece's logits with the full pass's")
    return "Correct: your test passes the library's cache and catches the top-left mask."
