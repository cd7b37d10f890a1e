"""The attention explorer's second way to compute: trained models that run in the reader's browser.

`scripts/export_onnx.py` exports two of the book's trained models to ONNX, a file format that
stores a model as a graph of standard operations (MatMul, Softmax, LayerNormalization, ...) with
its weights. The book's website runs those files with onnxruntime-web, so that a reader can type
into the attention explorer of the static page, with no kernel, and see the model's answer and
every attention map. This module says where the files are and what they hold, and runs them
with onnxruntime (Python) the way the explorer's JavaScript (`static/explorer.js`) runs them in
the browser: the export script checks each export with it, and the tests compare it with PyTorch.

The models (names are the stems of the files in :data:`MODELS_DIR`):

- ``transformer_dates``: the date Transformer of chapters 11 and 12
  (`checkpoints/transformer_dates.pt`), as two graphs. ``.encoder.onnx``: source ids (B, S) ->
  memory (B, S, d_model) and each encoder layer's self-attention weights (B, h, S, S).
  ``.decoder_step.onnx``: the output so far (B, T) (``<bos>`` first), the memory and the source
  ids -> the logits of the next token (B, V) and each decoder layer's self-attention (B, h, T, T)
  and cross-attention (B, h, T, S) weights. Greedy decoding calls the encoder once and the
  decoder step once per output character.
- ``char_lm``: the character language model of chapter 14's recipe
  (`checkpoints/char_lm.pt`), one graph: ids (B, T) -> logits (B, T, V) and each layer's causal
  self-attention weights (B, h, T, T).

Each model has a manifest, ``<name>.json``: the vocabulary, the special ids, the length limits,
the graphs' input and output names, the SHA-256 of the checkpoint it was exported from and of
each file (:func:`stale` compares them), and the export's own check against PyTorch.

onnxruntime is a test requirement of the book, not a dependency of the package: it is imported
only when a session is opened.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..special_tokens import BOS_ID, EOS_ID, PAD_ID

__all__ = ["MODELS_DIR", "MODELS", "PAD_ID", "BOS_ID", "EOS_ID", "sha256", "manifest", "stale", "sessions",
           "check_text", "greedy_dates", "greedy_lm"]

#: Where the exported files live: package data, next to the explorer that uses them, so that the
#: site, the tests and an installed package find one copy (the site's build copies it).
MODELS_DIR = Path(__file__).resolve().parent / "browser_models"
#: The exported models, by name.
MODELS = ("transformer_dates", "char_lm")


def sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _check_name(name: str) -> None:
    if name not in MODELS:
        raise ValueError(f"name must be one of the exported models {list(MODELS)}, got {name!r}")


def manifest(name: str) -> dict[str, Any]:
    """The manifest of an exported model (``<name>.json``), as a dict."""
    _check_name(name)
    path = MODELS_DIR / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `python scripts/export_onnx.py`")
    return json.loads(path.read_text(encoding="utf-8"))


def stale(name: str, root: Path | None = None) -> list[str]:
    """Why the exported files of `name` no longer match what they were made from: one line per
    problem (an empty list when they are up to date). `root` is the repository (the checkpoint's
    path in the manifest is relative to it; default: the package's parent folder)."""
    root = Path(__file__).resolve().parents[2] if root is None else Path(root)
    try:
        m = manifest(name)
    except FileNotFoundError as err:
        return [str(err)]
    problems = []
    checkpoint = root / m["checkpoint"]["path"]
    if not checkpoint.is_file():
        problems.append(f"{m['checkpoint']['path']} is missing")
    elif sha256(checkpoint) != m["checkpoint"]["sha256"]:
        problems.append(f"{m['checkpoint']['path']} changed since {name} was exported")
    for part, f in m["files"].items():
        path = MODELS_DIR / f["path"]
        if not path.is_file():
            problems.append(f"{f['path']} ({part}) is missing")
        elif sha256(path) != f["sha256"] or path.stat().st_size != f["bytes"]:
            problems.append(f"{f['path']} ({part}) is not the file the manifest describes")
    return problems


def sessions(name: str, directory: Path | None = None) -> dict[str, Any]:
    """An onnxruntime `InferenceSession` for each graph of `name` (by part: "encoder" and
    "decoder_step", or "lm"), on the CPU, one thread."""
    import onnxruntime as ort

    m = manifest(name)
    directory = MODELS_DIR if directory is None else Path(directory)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return {part: ort.InferenceSession(str(directory / f["path"]), options, providers=["CPUExecutionProvider"])
            for part, f in m["files"].items()}


def check_text(text: str, tokens: list[str], max_chars: int) -> list[int]:
    """The ids of `text` in a model's vocabulary `tokens`, refusing what the explorer's
    JavaScript refuses: no text, more than `max_chars` characters, characters the vocabulary
    lacks (the model would read them as <unk>). ValueError says which."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text is empty")
    if len(text) > max_chars:
        raise ValueError(f"text has {len(text)} characters; the model accepts at most {max_chars}")
    index = {t: i for i, t in enumerate(tokens) if i > 3}  # the four specials are not characters
    unknown = sorted({c for c in text if c not in index})
    if unknown:
        raise ValueError(f"text holds characters outside the model's vocabulary: {unknown}")
    return [index[c] for c in text]


def greedy_dates(parts: dict[str, Any], src: np.ndarray, max_len: int = 12) -> np.ndarray:
    """Greedy decoding with the exported date Transformer, as `decoding.greedy_decode` does it:
    src (B, S) int64 ids (padded with 0) -> output ids (B, <= max_len), no <bos>, <pad> after
    each row's <eos>; <bos> and <pad> are never chosen. `parts` from `sessions("transformer_dates")`."""
    src = np.asarray(src, dtype=np.int64)
    memory = parts["encoder"].run(["memory"], {"src": src})[0]
    ys = np.full((src.shape[0], 1), BOS_ID, dtype=np.int64)
    done = np.zeros(src.shape[0], dtype=bool)
    for _ in range(max_len):
        logits = parts["decoder_step"].run(["logits"], {"tgt": ys, "memory": memory, "src": src})[0]
        logits[:, [BOS_ID, PAD_ID]] = -np.inf
        nxt = np.where(done, PAD_ID, logits.argmax(-1))
        ys = np.concatenate([ys, nxt[:, None]], axis=1)
        done |= nxt == EOS_ID
        if done.all():
            break
    return ys[:, 1:]


def greedy_lm(parts: dict[str, Any], prompt: np.ndarray, n: int) -> np.ndarray:
    """`lm.generate(model, prompt, n)` (greedy) with the exported character model: prompt
    (B, T) int64 ids -> (B, T + n), each new token the argmax of the logits at the last position."""
    ids = np.asarray(prompt, dtype=np.int64)
    for _ in range(n):
        logits = parts["lm"].run(["logits"], {"ids": ids})[0][:, -1]
        ids = np.concatenate([ids, logits.argmax(-1)[:, None].astype(np.int64)], axis=1)
    return ids
