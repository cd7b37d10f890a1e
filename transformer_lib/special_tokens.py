"""The special tokens and their ids: the one place every part of the library reads them from.

Every vocabulary of the book (`vocab.Vocab`) starts with these four tokens in this order, so
their ids are the same in every vocabulary and no model, loss or loop carries a copy:

- `<pad>` (PAD_ID = 0) fills a batch's shorter rows (`vocab.collate`); the padding masks
  (`masks.padding_mask`), the models, the loss and the exact-match count leave it out;
- `<bos>` (BOS_ID = 1) starts every target, and decoding starts from it;
- `<eos>` (EOS_ID = 2) ends every target, and decoding stops at it;
- `<unk>` (UNK_ID = 3) stands for a character the vocabulary does not have.

Decoding never produces `<pad>` or `<bos>` (`NEVER_GENERATED`). `tests/test_special_tokens.py`
checks that the vocabularies, the data, the models, the training loop, decoding and the
checkpoints all agree with this module.
"""
from __future__ import annotations

__all__ = ["PAD", "BOS", "EOS", "UNK", "SPECIALS", "PAD_ID", "BOS_ID", "EOS_ID", "UNK_ID", "NEVER_GENERATED"]

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
#: The special tokens, in the order of their ids: a vocabulary's first four tokens.
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = (SPECIALS.index(token) for token in SPECIALS)
#: The ids a decoder is never allowed to output.
NEVER_GENERATED = (BOS_ID, PAD_ID)
