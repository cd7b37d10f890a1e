"""The checkpoint format: one for every model of the book, the recurrent `rnn.Seq2Seq` of Part I,
the `Transformer` and the decoder-only `lm.CausalLM` alike.

A file holds the model's kind (its class name), its config, its weights, both vocabularies and
a record of how it was made (numbers, strings, lists and dicts). A language model reads and
writes one vocabulary: pass it as both. Every model is built the same way, `cls(config)`:

    save(path, model, src_vocab, tgt_vocab, record)
    model, src_vocab, tgt_vocab, record = load(path)

`load` reads with `torch.load(..., weights_only=True)` (tensors and plain values only, never
code) and returns the model in eval mode. Pass the vocabularies you mean to use to `load` and
it checks them against the stored ones: token ids that do not line up are a ValueError, not a
model that quietly reads the wrong characters.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from ..lm import CausalLM, CausalLMConfig
from ..model import Transformer, TransformerConfig
from ..rnn import Seq2Seq, Seq2SeqConfig
from ..runtime import book_device
from ..special_tokens import PAD_ID
from ..vocab import Vocab

__all__ = ["CHECKPOINTS", "FORMAT", "MODELS", "save", "load"]

#: Where the book's small trained models live: this package's folder, inside the library, so
#: that a notebook finds them wherever transformer_lib is installed (a clone, pip from git on
#: Colab, Binder).
CHECKPOINTS = Path(__file__).resolve().parent

#: Written into every file; `load` refuses files without it (such as the old formats).
FORMAT = "transformer_lib checkpoint v1"
#: The models a checkpoint can hold: kind (the class's name) -> (model class, config class).
MODELS = {"Transformer": (Transformer, TransformerConfig), "Seq2Seq": (Seq2Seq, Seq2SeqConfig),
          "CausalLM": (CausalLM, CausalLMConfig)}
#: Config fields that older files hold and the library no longer has, with the only value it
#: can load them with: the ids of the special tokens live in `special_tokens`, not in a config.
_RETIRED = {"pad_id": PAD_ID}


def _plain(value, where: str):
    """`value` as plain Python types (what `weights_only=True` loading accepts)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return str(value)  # also turns str subclasses such as torch.__version__ into str
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, where) for k, v in value.items()}
    raise TypeError(f"{where}: expected numbers, strings, lists and dicts, got {type(value).__name__}")


def _kind(model: nn.Module) -> str:
    for kind, (cls, _) in MODELS.items():
        if type(model) is cls:
            return kind
    raise TypeError(f"model: expected one of {sorted(MODELS)}, got {type(model).__name__}")


def save(path: str | Path, model: nn.Module, src_vocab: Vocab, tgt_vocab: Vocab, record: dict | None = None) -> None:
    """Write `model` (weights, config, kind), both vocabularies and `record` to `path`.

    The vocabularies must have the sizes the model was built for (a `CausalLM`'s two are one)."""
    kind = _kind(model)
    for name, vocab, size in zip(("src_vocab", "tgt_vocab"), (src_vocab, tgt_vocab), _vocab_sizes(model.config)):
        if not isinstance(vocab, Vocab):
            raise TypeError(f"{name}: expected a Vocab, got {type(vocab).__name__}")
        if len(vocab) != size:
            raise ValueError(f"{name}: the model was built for {size} tokens, the vocabulary has {len(vocab)}")
    if kind == "CausalLM" and src_vocab.tokens != tgt_vocab.tokens:
        raise ValueError("tgt_vocab: a language model reads and writes one vocabulary; pass it as both")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, "kind": kind, "config": _plain(asdict(model.config), "config"),
                "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "src_tokens": list(src_vocab.tokens), "tgt_tokens": list(tgt_vocab.tokens),
                "record": _plain(dict(record or {}), "record")}, path)


def _vocab_sizes(config) -> tuple[int, int]:
    """(source, target) vocabulary sizes of a model's config; a language model has one."""
    if isinstance(config, CausalLMConfig):
        return config.vocab_size, config.vocab_size
    return config.src_vocab, config.tgt_vocab


def _check_same(name: str, given: Vocab, stored: list[str], path) -> None:
    """Raise ValueError, saying where they differ, unless `given` has exactly the `stored` tokens."""
    if not isinstance(given, Vocab):
        raise TypeError(f"{name}: expected a Vocab, got {type(given).__name__}")
    if given.tokens == stored:
        return
    for i, (a, b) in enumerate(zip(stored, given.tokens)):
        if a != b:
            raise ValueError(f"{name} differs from the one stored in {path}: token id {i} is {b!r} in the "
                             f"given vocabulary but {a!r} in the checkpoint ({len(given)} and {len(stored)} tokens)")
    longer, extra = ("given", given.tokens[len(stored):]) if len(given) > len(stored) else ("stored", stored[len(given):])
    raise ValueError(f"{name} differs from the one stored in {path}: it has {len(given)} tokens, the checkpoint "
                     f"{len(stored)}; the {longer} one adds {''.join(extra)!r}")


def _current(config: dict, path) -> dict:
    """A stored config without the fields the library has retired (`_RETIRED`), each checked
    against the one value the library can load it with."""
    config = dict(config)
    for name, value in _RETIRED.items():
        stored = config.pop(name, value)
        if stored != value:
            raise ValueError(f"{path}: the model was made with {name}={stored!r}; this library's models use "
                             f"{value!r} (transformer_lib.special_tokens)")
    return config


def load(path: str | Path, src_vocab: Vocab | None = None, tgt_vocab: Vocab | None = None,
         map_location: str | torch.device | None = None):
    """Read a `save`d file -> (model in eval mode, src_vocab, tgt_vocab, record).

    The model is built and loaded on `map_location` (default: the book's device, see
    `runtime.book_device`). If `src_vocab` or `tgt_vocab` is given, it must equal the stored
    one (ValueError otherwise)."""
    map_location = book_device() if map_location is None else torch.device(map_location)
    blob = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT!r} file (re-save it with transformer_lib.checkpoints.save)")
    if blob["kind"] not in MODELS:
        raise ValueError(f"{path}: unknown model kind {blob['kind']!r}, expected one of {sorted(MODELS)}")
    for name, given in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab)):
        if given is not None:
            _check_same(name, given, blob[name.replace("vocab", "tokens")], path)
    cls, config_cls = MODELS[blob["kind"]]
    config = config_cls(**_current(blob["config"], path))
    with torch.device(map_location):
        model = cls(config)
    model.load_state_dict(blob["state_dict"])
    return (model.eval(), Vocab.from_tokens(blob["src_tokens"]), Vocab.from_tokens(blob["tgt_tokens"]),
            blob["record"])
