"""The models the attention explorer runs in the reader's browser (issue 32): the ONNX files
that scripts/export_onnx.py made from the shipped checkpoints, run here by onnxruntime, against
PyTorch running the checkpoints themselves.

- the files are those the manifests describe, made from today's checkpoints (a re-made
  checkpoint without a new export fails here: run `python scripts/export_onnx.py`);
- the date Transformer: on all 3,652 test dates, the decoder step's logits equal PyTorch's
  within 1e-4 (float32) at every prefix of the targets, every attention weight too, and greedy
  decoding (explorer_browser.greedy_dates, the loop of the explorer's JavaScript) gives exactly
  `decoding.greedy_decode`'s answers; one date alone, batch 1 as in the browser, too;
- the character model: logits and attention weights within 1e-4 on windows of the corpus, and
  greedy continuations exactly `lm.generate`'s;
- the manifests hold what the explorer's JavaScript reads, and explorer_browser.check_text
  refuses what it refuses.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import transformer_lib as tl
from transformer_lib import lm
from transformer_lib.attention import record_attention
from transformer_lib.book import explorer_browser as eb
from transformer_lib.data import make_date_splits
from transformer_lib.vocab import collate

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-4
EXPLORER_JS = ROOT / "transformer_lib" / "book" / "static" / "explorer.js"

# onnxruntime is a pinned test requirement (requirements.txt): missing, this file fails to import.
import onnxruntime  # noqa: E402,F401


def close(name, ours, theirs, tol=TOLERANCE):
    diff = float(np.abs(np.asarray(ours, dtype=np.float64) - np.asarray(theirs, dtype=np.float64)).max())
    assert diff <= tol, f"{name}: onnxruntime and PyTorch differ by {diff:.2g} (more than {tol})"


@pytest.mark.parametrize("name", eb.MODELS)
def test_exports_are_up_to_date(name):
    problems = eb.stale(name, ROOT)
    assert not problems, f"{name}: " + "; ".join(problems) + " (run `python scripts/export_onnx.py`)"


@pytest.mark.parametrize("name", eb.MODELS)
def test_manifest_holds_what_the_explorer_reads(name):
    m = eb.manifest(name)
    js = EXPLORER_JS.read_text(encoding="utf-8")
    read = set(re.findall(r"\bm\.([a-z_]+)", js)) | set(re.findall(r"\bbrowser\.([a-z_]+)", js))
    for key in sorted(read & {"bos_id", "pad_id", "eos_id", "max_out", "n_layers", "tokens", "tgt_tokens", "continue"}):
        if key in ("tokens", "continue") and m["kind"] != "causal-lm":
            continue
        if key in ("tgt_tokens", "max_out") and m["kind"] != "encoder-decoder":
            continue
        assert key in m, f"{name}.json has no {key!r}, which explorer.js reads"
    # the graphs' input and output names are those explorer.js and explorer_browser pass
    parts = eb.sessions(name)
    for part, session in parts.items():
        assert [i.name for i in session.get_inputs()] == m["inputs"][part]
        assert [o.name for o in session.get_outputs()] == m["outputs"][part]
    assert m["check"]["max_logit_difference"] <= TOLERANCE
    for f in m["files"].values():
        assert f["bytes"] < 2_000_000, f"{f['path']} is {f['bytes']:,} bytes: too heavy for a page's live run"


@pytest.fixture(scope="module")
def dates():
    model, src_vocab, tgt_vocab, _ = tl.checkpoints.load(tl.CHECKPOINTS / "transformer_dates.pt")
    test = make_date_splits(seed=0).test
    src, tgt = collate(test, src_vocab, tgt_vocab)
    return model, src_vocab, tgt_vocab, src, tgt, eb.sessions("transformer_dates")


def test_date_logits_and_attention_match_pytorch(dates):
    model, _, _, src, tgt, parts = dates
    tgt_in = tgt[:, :-1]  # <bos> and the ten characters of every ISO date
    with torch.no_grad(), record_attention(model) as weights:
        logits = model(src, tgt_in)
    encoded = parts["encoder"].run(None, {"src": src.numpy()})
    with torch.no_grad():
        close("memory", encoded[0], model.encode(src))
    n = model.config.n_layers
    for i in range(n):
        close(f"encoder layer {i} attention", encoded[1 + i], weights[f"encoder.layers.{i}.self_attn"])
    for t in range(1, tgt_in.shape[1] + 1):
        step = parts["decoder_step"].run(None, {"tgt": tgt_in[:, :t].numpy(), "memory": encoded[0],
                                                "src": src.numpy()})
        close(f"logits after {t} target tokens", step[0], logits[:, t - 1])
    for i in range(n):
        close(f"decoder layer {i} self-attention", step[1 + i], weights[f"decoder.layers.{i}.self_attn"])
        close(f"decoder layer {i} cross-attention", step[1 + n + i], weights[f"decoder.layers.{i}.cross_attn"])


def test_date_greedy_answers_equal_pytorch(dates):
    model, _, tgt_vocab, src, _, parts = dates
    ours = eb.greedy_dates(parts, src.numpy(), max_len=12)
    theirs = tl.decoding.greedy_decode(model, src, max_len=12).tokens.numpy()
    answers = [tgt_vocab.decode(row.tolist()) for row in ours]
    expected = [tgt_vocab.decode(row.tolist()) for row in theirs]
    wrong = [(i, a, b) for i, (a, b) in enumerate(zip(answers, expected)) if a != b]
    assert not wrong, f"{len(wrong)} of {len(expected)} answers differ, e.g. {wrong[:3]}"
    assert len(answers) == 3652


@pytest.mark.parametrize("text", ["14 juillet 1989", "3/4/98", "domingo, 12 de septiembre de 2032", "1"])
def test_one_date_alone_as_in_the_browser(dates, text):
    model, src_vocab, tgt_vocab, *_, parts = dates
    src = torch.tensor([eb.check_text(text, src_vocab.tokens, 40)])
    ours = tgt_vocab.decode(eb.greedy_dates(parts, src.numpy())[0].tolist())
    assert ours == tl.decoding.translate(model, [text], src_vocab, tgt_vocab, max_len=12)[0]


@pytest.fixture(scope="module")
def char_lm():
    model, vocab, _, record = tl.checkpoints.load(tl.CHECKPOINTS / "char_lm.pt")
    return model, vocab, eb.sessions("char_lm")


def test_char_lm_logits_and_attention_match_pytorch(char_lm):
    model, vocab, parts = char_lm
    text = lm.load_corpus()
    starts = range(1000, 200_000, 6_000)
    x = torch.tensor([vocab.encode(text[s:s + 64]) for s in starts])  # (34, 64)
    with torch.no_grad(), record_attention(model) as weights:
        logits = model(x)
    out = parts["lm"].run(None, {"ids": x.numpy()})
    close("logits", out[0], logits)
    for i in range(model.config.n_layers):
        close(f"layer {i} attention", out[1 + i], weights[f"layers.{i}.self_attn"])


@pytest.mark.parametrize("prompt", ["The attention ", "A", "Queries, keys and values ", "In 2017, "])
def test_char_lm_greedy_continuations_equal_pytorch(char_lm, prompt):
    model, vocab, parts = char_lm
    m = eb.manifest("char_lm")
    ids = torch.tensor([eb.check_text(prompt, vocab.tokens, m["max_chars"])])
    expected = lm.generate(model, ids, m["continue"])
    assert eb.greedy_lm(parts, ids.numpy(), m["continue"]).tolist() == expected.tolist()


def test_check_text_refuses_what_the_explorer_refuses():
    tokens = eb.manifest("transformer_dates")["src_tokens"]
    assert eb.check_text("3 mars 1998", tokens, 40) == [tokens.index(c) for c in "3 mars 1998"]
    with pytest.raises(ValueError, match="empty"):
        eb.check_text("   ", tokens, 40)
    with pytest.raises(ValueError, match="at most 40"):
        eb.check_text("1" * 41, tokens, 40)
    with pytest.raises(ValueError, match=r"outside the model's vocabulary: \['-', 'ç'\]"):
        eb.check_text("3 março 1998-", tokens, 40)
    with pytest.raises(ValueError, match="outside"):
        eb.check_text("<unk>", tokens, 40)  # a special token's name is not a character
    with pytest.raises(TypeError, match="string"):
        eb.check_text(None, tokens, 40)


def test_unknown_model_is_named():
    with pytest.raises(ValueError, match="transformer_dates"):
        eb.manifest("gpt")


def test_stale_reports_a_changed_checkpoint(tmp_path):
    """A checkpoint re-made after the export makes the export stale (what the first test relies on)."""
    m = eb.manifest("transformer_dates")
    fake_root = tmp_path
    checkpoint = fake_root / m["checkpoint"]["path"]
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes((ROOT / m["checkpoint"]["path"]).read_bytes() + b"\0")
    assert any("changed" in line for line in eb.stale("transformer_dates", fake_root))
    checkpoint.write_bytes((ROOT / m["checkpoint"]["path"]).read_bytes())
    assert eb.stale("transformer_dates", fake_root) == []
    checkpoint.unlink()
    assert any("missing" in line for line in eb.stale("transformer_dates", fake_root))


def test_manifests_are_json_with_sizes():
    for name in eb.MODELS:
        m = json.loads((eb.MODELS_DIR / f"{name}.json").read_text(encoding="utf-8"))
        assert m["format"] == 1 and m["name"] == name
        for f in m["files"].values():
            assert (eb.MODELS_DIR / f["path"]).stat().st_size == f["bytes"]
