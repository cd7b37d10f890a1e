"""Character vocabularies and padded batches: the plumbing every task of the book shares.

:class:`Vocab` maps characters to ids after the four special tokens of
:mod:`transformer_lib.special_tokens` (``<pad>=0, <bos>=1, <eos>=2, <unk>=3``, re-exported
here); :func:`collate` turns ``(source, target)`` string pairs into right-padded ``LongTensor``
batches; :func:`make_loader` is the one way the book batches a training set.
Batches are made on the CPU, whatever the book's device: the training loop and the decoders
move them to the model's device.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np
import torch

from ._checks import check_non_negative_int, check_positive_int
from .special_tokens import BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID, SPECIALS, UNK, UNK_ID

__all__ = [
    "PAD", "BOS", "EOS", "UNK", "SPECIALS", "PAD_ID", "BOS_ID", "EOS_ID", "UNK_ID",
    "Vocab", "collate", "PairLoader", "make_loader",
]



class Vocab:
    """A character-level vocabulary with the special tokens ``<pad>=0, <bos>=1, <eos>=2, <unk>=3``.

    >>> v = Vocab("abc")
    >>> v.encode("cab", bos=True, eos=True)
    [1, 6, 4, 5, 2]
    >>> v.decode([1, 6, 4, 5, 2, 0, 0])
    'cab'
    """

    def __init__(self, chars: Iterable[str]):
        if not hasattr(chars, "__iter__"):
            raise TypeError(f"chars: expected an iterable of single characters, got {type(chars).__name__}")
        chars = list(chars)
        for c in chars:
            if not isinstance(c, str) or len(c) != 1:
                raise ValueError(f"chars: expected single characters, got {c!r}")
        if len(set(chars)) != len(chars):
            dupes = sorted({c for c in chars if chars.count(c) > 1})
            raise ValueError(f"chars: duplicated characters {dupes!r}")
        self.tokens: list[str] = list(SPECIALS) + chars
        self.index: dict[str, int] = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> "Vocab":
        """The vocabulary of every character in ``texts``, sorted (so it does not depend on order)."""
        chars: set[str] = set()
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"texts: expected strings, got {type(t).__name__}")
            chars.update(t)
        return cls(sorted(chars))

    @classmethod
    def from_tokens(cls, tokens: Sequence[str]) -> "Vocab":
        """Rebuild a vocabulary from its ``tokens`` list (as stored in a checkpoint)."""
        tokens = list(tokens)
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"tokens: must start with the special tokens {SPECIALS!r}")
        return cls(tokens[len(SPECIALS):])

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, char: str) -> bool:
        return char in self.index and char not in SPECIALS

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.tokens == other.tokens

    def __repr__(self) -> str:
        chars = "".join(self.tokens[len(SPECIALS):])
        return f"Vocab({len(self)} tokens: 4 specials + {chars!r})"

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def encode(self, text: str, bos: bool = False, eos: bool = False, strict: bool = False) -> list[int]:
        """Character ids of ``text``; unknown characters become ``<unk>`` unless ``strict``."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a string, got {type(text).__name__}")
        ids = []
        for c in text:
            i = self.index.get(c)
            if i is None or c in SPECIALS:
                if strict:
                    raise ValueError(f"text: character {c!r} is not in the vocabulary (in {text!r})")
                i = UNK_ID
            ids.append(i)
        return ([BOS_ID] if bos else []) + ids + ([EOS_ID] if eos else [])

    def decode(self, ids: Iterable[int] | torch.Tensor, stop_at_eos: bool = True) -> str:
        """The string of ``ids``: skips ``<pad>`` and ``<bos>``, stops at the first ``<eos>``
        (unless ``stop_at_eos=False``), and writes ``<unk>`` as the character "?"."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"ids: expected a 1-d sequence, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.tokens):
                raise ValueError(f"ids: {i} is outside the vocabulary (size {len(self)})")
            if i == EOS_ID and stop_at_eos:
                break
            if i in (PAD_ID, BOS_ID, EOS_ID):
                continue
            out.append("?" if i == UNK_ID else self.tokens[i])
        return "".join(out)


def collate(pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab,
            strict: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn ``(source, target)`` pairs into two padded ``LongTensor`` batches.

    Returns ``src_ids`` of shape (batch, T_x) and ``tgt_ids`` of shape (batch, T_y + 2): the
    targets are wrapped in ``<bos>`` ... ``<eos>``; both are right-padded with ``<pad>`` = 0.
    For teacher forcing, feed ``tgt_ids[:, :-1]`` and predict ``tgt_ids[:, 1:]``.
    """
    if len(pairs) == 0:
        raise ValueError("pairs: expected at least one (source, target) pair")
    for p in pairs:
        if not (isinstance(p, (tuple, list)) and len(p) == 2):
            raise ValueError(f"pairs: expected (source, target) pairs, got {p!r}")
    src = [src_vocab.encode(s, strict=strict) for s, _ in pairs]
    tgt = [tgt_vocab.encode(t, bos=True, eos=True, strict=strict) for _, t in pairs]
    if any(len(s) == 0 for s in src):
        raise ValueError("pairs: a source string is empty")
    return _pad(src), _pad(tgt)


def _pad(seqs: list[list[int]]) -> torch.Tensor:
    width = max(len(s) for s in seqs)  # one tensor from padded lists: one call, not one per row
    return torch.tensor([s + [PAD_ID] * (width - len(s)) for s in seqs], dtype=torch.long, device="cpu")


class PairLoader:
    """Batches of :func:`collate`d ``(src_ids, tgt_ids)`` over ``pairs``; re-iterable, so
    ``training.train`` can read it pass (epoch) after pass. ``len(loader)`` is the number of
    batches in a pass.

    With ``shuffle``, pass k (counting from 0) reads the pairs in the order :meth:`order` gives,
    a permutation that depends on ``(seed, k)`` alone. Nothing is drawn until a pass's first
    batch is asked for: ``iter(loader)`` alone does not move the loader on, so ``tl.train`` and a
    plain ``for`` loop over a fresh loader read the same batches in the same order. Every
    tensor is made on the CPU explicitly, whatever the book's device (the training loop moves
    batches to the model).
    """

    def __init__(self, pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab,
                 batch_size: int = 64, shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        check_positive_int("batch_size", batch_size)
        check_non_negative_int("seed", seed)
        self.pairs, self.src_vocab, self.tgt_vocab = list(pairs), src_vocab, tgt_vocab
        self.batch_size, self.shuffle, self.seed, self.drop_last = batch_size, shuffle, seed, drop_last
        self.passes = 0  # passes begun so far: the next pass is pass `passes`

    def __len__(self) -> int:
        n, b = len(self.pairs), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        k, self.passes = self.passes, self.passes + 1  # runs at the first batch, not at iter()
        order = self.order(k)
        for start in range(0, len(order), self.batch_size):
            index = order[start : start + self.batch_size]
            if self.drop_last and len(index) < self.batch_size:
                return
            yield collate([self.pairs[i] for i in index], self.src_vocab, self.tgt_vocab)

    def order(self, k: int) -> list[int]:
        """The pairs' indices in pass ``k``: ``0 .. n-1`` without ``shuffle``, else a random
        permutation drawn from a generator seeded by ``(seed, k)`` (NumPy's ``SeedSequence``
        mixes the two numbers into one seed)."""
        check_non_negative_int("k", k)
        if not self.shuffle:
            return list(range(len(self.pairs)))
        mixed = int(np.random.SeedSequence((self.seed, k)).generate_state(1)[0])
        generator = torch.Generator(device="cpu").manual_seed(mixed)
        return torch.randperm(len(self.pairs), generator=generator, device="cpu").tolist()


def make_loader(pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab,
                batch_size: int = 64, shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> PairLoader:
    """The book's training loader over ``pairs``: a :class:`PairLoader` that yields
    ``(src_ids, tgt_ids)`` batches; pass k's order depends only on ``(seed, k)``."""
    return PairLoader(pairs, src_vocab, tgt_vocab, batch_size, shuffle, seed, drop_last)
