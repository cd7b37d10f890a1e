"""Chapter 8's exercises: a local causal mask, and the three masks of PyTorch's decoder layer.

Each check returns a one-line verdict when the answer is right and raises an AssertionError
saying what is wrong otherwise. The reference solutions are `local_causal_mask` and
`torch_decoder_masks`.
"""
from __future__ import annotations

import torch
from torch import nn

import transformer_lib as tl

__all__ = ["check_local_causal_mask", "check_torch_decoder_masks", "local_causal_mask",
           "torch_decoder_masks"]


# --------------------------------------------------------------------------------------------
# Exercise 1: a local causal mask
# --------------------------------------------------------------------------------------------

def local_causal_mask(length, window):
    """The reference solution: (length, length) bool, True where i - window < j <= i."""
    position = torch.arange(length)
    offset = position[:, None] - position[None, :]  # [i, j] = i - j
    return (offset >= 0) & (offset < window)


def _by_cell(length, window, rule):
    return torch.tensor([[rule(i - j, window) for j in range(length)] for i in range(length)],
                        dtype=torch.bool)


def _grid(mask) -> str:
    return "\n".join("  " + " ".join("1" if v else "." for v in row) for row in mask.tolist())


def check_local_causal_mask(fn) -> str:
    """Check `fn(length, window)` against a mask built cell by cell, for several sizes."""
    slips = [
        (lambda d, w: 0 <= d <= w, "the window is one too wide: with window = w a query sees "
                                   "itself and the w - 1 keys before it, i - j < w"),
        (lambda d, w: -w < d <= 0, "the mask is transposed: rows are queries i, columns keys "
                                   "j, and a query may see keys j <= i"),
        (lambda d, w: abs(d) < w, "the mask lets queries see the keys after them too; a "
                                  "causal mask needs j <= i"),
        (lambda d, w: 0 <= d, "the window is not applied: keys more than window - 1 "
                              "positions back must be blocked"),
    ]
    for length, window in [(1, 1), (6, 1), (6, 3), (7, 10)]:
        got = fn(length, window)
        if not isinstance(got, torch.Tensor):
            got = torch.as_tensor(got)  # a nested list of booleans is a right answer too
        assert got.dtype == torch.bool, (
            f"Not yet: return booleans (True = may attend), got dtype {got.dtype}")
        assert got.shape == (length, length), (
            f"Not yet: expected shape ({length}, {length}), got {tuple(got.shape)}")
        expected = _by_cell(length, window, lambda d, w: 0 <= d < w)
        if torch.equal(got, expected):
            continue
        for rule, message in slips:
            assert not torch.equal(got, _by_cell(length, window, rule)), f"Not yet: {message}"
        raise AssertionError(f"Not yet: length={length}, window={window} gives\n{_grid(got)}\n"
                             f"expected (1 = may attend)\n{_grid(expected)}")
    return "Correct: your local causal mask allows exactly the last `window` positions."


# --------------------------------------------------------------------------------------------
# Exercise 2: the masks of nn.TransformerDecoderLayer
# --------------------------------------------------------------------------------------------

def torch_decoder_masks(src_ids, tgt_ids, pad_id):
    """The reference solution: (tgt_mask, tgt_key_padding_mask, memory_key_padding_mask) for
    `nn.TransformerDecoderLayer`, whose masks say True where attention is *blocked*."""
    tgt_mask = ~tl.causal_mask(tgt_ids.shape[1])  # (T, T): True = a later key, blocked
    tgt_key_padding_mask = tgt_ids == pad_id  # (B, T): True = padding
    memory_key_padding_mask = src_ids == pad_id  # (B, S)
    return tgt_mask, tgt_key_padding_mask, memory_key_padding_mask


#: A float mask entry at or below minus this blocks (exp(-1e4) underflows to 0 in float32).
BLOCKING_FLOAT = 1e4


def _blocked(name, mask, shape):
    """A mask as PyTorch's modules read it, as booleans True = blocked; refuse what they would
    read differently from what the reader meant."""
    assert isinstance(mask, torch.Tensor), (
        f"Not yet: {name} should be a tensor, got {type(mask).__name__}")
    assert tuple(mask.shape) == shape, (
        f"Not yet: {name} should have shape {shape}, got {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    assert mask.is_floating_point(), (
        f"Not yet: {name} has dtype {mask.dtype}; PyTorch's modules take booleans "
        "(True = blocked) or floats added to the scores")
    allowed = mask == 0
    # -inf blocks exactly; a large finite negative number (-1e9, the dtype's minimum: the
    # library's own fill) blocks too, since exp(score - 1e4) is 0 in float32 for any score
    # the softmax meets in practice.
    blocked = mask <= -BLOCKING_FLOAT
    assert (allowed | blocked).all(), (
        f"Not yet: {name} is a float mask with values other than 0 and a large negative "
        "number; a float mask is added to the scores, so a 1 (or a small negative number) "
        "does not block anything: use 0 (allowed) and -inf (blocked), or booleans")
    return blocked


def _example():
    src_ids = torch.tensor([[4, 5, 6, 7, 8, 9], [4, 5, 6, 0, 0, 0], [7, 8, 9, 4, 5, 0]])
    tgt_ids = torch.tensor([[1, 5, 6, 7, 2], [1, 5, 2, 0, 0], [1, 9, 9, 9, 2]])
    return src_ids, tgt_ids


def check_torch_decoder_masks(fn) -> str:
    """Check `fn(src_ids, tgt_ids, pad_id)`: the three masks, then an `nn.TransformerDecoderLayer`
    run with them against `tl.DecoderLayer` (its copy) with the book's masks."""
    src_ids, tgt_ids = _example()
    (B, S), T = src_ids.shape, tgt_ids.shape[1]
    got = fn(src_ids, tgt_ids, 0)
    assert isinstance(got, (tuple, list)) and len(got) == 3, (
        "Not yet: return three masks, (tgt_mask, tgt_key_padding_mask, memory_key_padding_mask)")
    tgt_mask, tgt_pad, mem_pad = got
    assert not (torch.is_tensor(mem_pad) and tuple(mem_pad.shape) == (B, T)
                and torch.is_tensor(tgt_pad) and tuple(tgt_pad.shape) == (B, S)), (
        "Not yet: the two padding masks are swapped: tgt_key_padding_mask is about the target "
        "ids (B, T), memory_key_padding_mask about the source ids (B, S)")
    assert not (torch.is_tensor(tgt_mask) and tgt_mask.dim() == 4), (
        "Not yet: tgt_mask is the book's (B, 1, T, T) target mask; PyTorch wants the causal "
        "part alone as (T, T), and the padding separately in tgt_key_padding_mask")
    blocked = {"tgt_mask": _blocked("tgt_mask", tgt_mask, (T, T)),
               "tgt_key_padding_mask": _blocked("tgt_key_padding_mask", tgt_pad, (B, T)),
               "memory_key_padding_mask": _blocked("memory_key_padding_mask", mem_pad, (B, S))}
    want = {"tgt_mask": ~tl.causal_mask(T), "tgt_key_padding_mask": tgt_ids == 0,
            "memory_key_padding_mask": src_ids == 0}
    inverted = [name for name in want if torch.equal(blocked[name], ~want[name])]
    assert not inverted, (
        f"Not yet: {', '.join(inverted)} {'is' if len(inverted) == 1 else 'are'} the book's "
        "convention (True = may attend); PyTorch's modules read True as blocked: invert with ~")
    for name in want:
        assert torch.equal(blocked[name], want[name]), (
            f"Not yet: {name} blocks the wrong cells: True (or -inf) should mark "
            + {"tgt_mask": "the keys after each query, j > i",
               "tgt_key_padding_mask": "the padding positions of the target ids",
               "memory_key_padding_mask": "the padding positions of the source ids"}[name])
    # The masks work in the module: PyTorch's layer with them == the book's layer with its own.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        layer = nn.TransformerDecoderLayer(16, 2, dim_feedforward=32, dropout=0.0,
                                           batch_first=True).eval()
        y, memory = torch.randn(B, T, 16), torch.randn(B, S, 16)
    ours = tl.from_torch(layer).eval()
    with torch.no_grad():
        theirs = layer(y, memory, tgt_mask=blocked["tgt_mask"],
                       tgt_key_padding_mask=blocked["tgt_key_padding_mask"],
                       memory_key_padding_mask=blocked["memory_key_padding_mask"])
        book = ours(y, memory, tl.target_mask(tgt_ids, 0), tl.padding_mask(src_ids, 0))
    real = tgt_ids != 0
    assert torch.allclose(theirs[real], book[real], atol=1e-5), (
        "Not yet: nn.TransformerDecoderLayer with these masks differs from tl.DecoderLayer "
        "with the book's masks")
    return "Correct: PyTorch's decoder layer with your masks equals tl.DecoderLayer."
