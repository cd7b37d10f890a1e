"""Chapter 14's corpus: the book's own prose as plain text (scripts/make_corpus.py,
transformer_lib/corpora/book_prose.txt).

The whole shipped text is read and must be prose: no LaTeX (no `$`, no backslash), no holes
where maths was cut (",,"), no markup left over. The script itself is held to the same rule on
the chapters as they are now, so that regenerating the file keeps it clean, and its plain form
of inline maths is checked on examples and as a property of any mix of words and maths.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib import lm
from transformer_lib.vocab import Vocab

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "make_corpus.py"


def load_script():
    spec = importlib.util.spec_from_file_location("make_corpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_corpus = load_script()

LEFTOVERS = {
    "a dollar sign (LaTeX maths)": r"\$",
    "a backslash (a LaTeX command)": r"\\",
    "a hole where maths was cut (',,' or ', ,')": r",\s*,",
    "an empty bracket": r"\(\s*\)|\[\s*\]",
    "a code fence or bold mark": r"```|~~~|(?<![\w)])\*\*(?=\w)",  # not Python's d**0.25
    "a MyST role or directive": r"\{[a-z-]+\}`|^:[\w-]+:",
    "a placeholder of the script": "\x00",
    "an HTML tag or a link target": r"<(?!(?:pad|bos|eos|unk)>)/?[a-z]+(?:\s[^>]*)?>",  # not <eos>
}


def leftovers(text: str) -> dict[str, list[str]]:
    """For each kind of leftover markup, the (up to 3) lines of `text` that hold it."""
    found = {}
    for what, pattern in LEFTOVERS.items():
        lines = [ln for ln in text.splitlines() if re.search(pattern, ln, flags=re.M)]
        if lines:
            found[what] = [ln[:120] for ln in lines[:3]]
    return found


def test_corpus_is_package_data_with_its_licence():
    path = lm.CORPORA / "book_prose.txt"
    header = path.read_text(encoding="utf-8").split("\n", 1)[0]
    assert header.startswith("#") and "CC BY 4.0" in header and "creativecommons.org" in header
    assert "book/*.md" in header and "chapters 1-12" in header and "make_corpus.py" in header
    text = lm.load_corpus()
    assert len(text) > 100_000 and not text.startswith("#")
    assert "attention" in text
    assert len(Vocab.from_texts([text])) < 128
    with pytest.raises(ValueError, match="name"):
        lm.load_corpus("no_such_corpus")


def test_the_whole_corpus_reads_as_prose():
    text = lm.load_corpus()
    assert text.isascii()
    assert not leftovers(text), leftovers(text)
    paragraphs = text.splitlines()
    assert all(len(p) >= make_corpus.MIN_PARAGRAPH for p in paragraphs)
    assert all(p == p.strip() and "  " not in p for p in paragraphs)
    # inline maths is spelled out, not cut: the names the chapters use are there
    for plain in ("d_model", "sqrt(d_k)", "Q K^T"):
        assert plain in text, plain


def test_the_script_keeps_the_chapters_as_they_are_now_clean():
    """Regenerating the corpus from today's chapters gives prose too (the committed file may
    be older than the chapters; the lead regenerates it when their prose is final)."""
    built = make_corpus.build()
    header, body = built.split("\n", 1)
    assert header == make_corpus.HEADER
    assert body.isascii() and len(body) > 100_000
    assert not leftovers(body), leftovers(body)


@pytest.mark.parametrize("tex, plain", [
    (r"d_\text{model} \times d_k", "d_model x d_k"),
    (r"\operatorname{softmax}(Q K^\top / \sqrt{d_k})\, V", "softmax(Q K^T / sqrt(d_k)) V"),
    (r"1/\sqrt{d_\text{model} \cdot \text{warmup\_steps}}", "1/sqrt(d_model * warmup_steps)"),
    (r"y = (y_1, \dots, y_n, \langle\text{eos}\rangle)", "y = (y_1, ..., y_n, <eos>)"),
    (r"X \in \mathbb{R}^{T \times d_\text{model}}", "X in R^(T x d_model)"),
    (r"PE_{(pos,2i+1)} = \cos(pos\,\omega_i)", "PE_(pos,2i+1) = cos(pos omega_i)"),
    (r"1{,}000 \times d_\text{model}", "1,000 x d_model"),
    (r"\frac{1}{2}", "(1)/(2)"),
    (r"\hat m_t", "m_hat_t"),
    (r"\lceil T/2 \rceil", "ceil(T/2)"),
    (r"\ln 10 \approx 2.30", "ln 10 ~ 2.30"),
])
def test_inline_maths_in_plain_characters(tex, plain):
    assert make_corpus.plain_maths(tex) == plain


def test_maths_without_a_plain_form_drops_its_sentence():
    assert make_corpus.plain_maths(r"\mathfrak{g} + \unknowncommand") is None
    paragraphs = make_corpus.strip_markdown(
        "The first sentence keeps $d_\\text{model}$ as plain text. The second uses "
        "$\\unknowncommand{x}$, $y$, and goes. The third sentence stays.")
    assert paragraphs == ["The first sentence keeps d_model as plain text. The third sentence stays."]


WORDS = st.sampled_from(["the", "attention", "model", "reads", "every", "position", "of", "and"])
TEX = st.lists(st.sampled_from([
    "d_k", r"d_\text{model}", r"\sqrt{d_k}", r"\times", r"\top", "^", "_", "{", "}", "(", ")", "x, y",
    r"\alpha", r"\cdot", r"\dots", r"\unknown", r"\,", "x", "2", r"\frac{a}{b}", r"\text{eos}", " "]),
    min_size=1, max_size=8).map("".join)
SENTENCE = st.lists(st.one_of(WORDS, TEX.map(lambda t: f"${t}$")), min_size=3, max_size=14).map(
    lambda parts: " ".join(parts).capitalize() + ".")


@settings(max_examples=60, deadline=None)
@given(st.lists(SENTENCE, min_size=1, max_size=5), st.sampled_from([" ", ", ", ": "]))
def test_any_mix_of_prose_and_inline_maths_comes_out_clean(sentences, glue):
    """Whatever inline maths a paragraph holds, balanced or not, known or not, the output has
    no dollar sign, no backslash and no hole."""
    paragraphs = make_corpus.strip_markdown(glue.join(sentences) + "\n\nAnother paragraph, long enough to be kept.")
    out = "\n".join(paragraphs)
    assert not leftovers(out), (sentences, out)
    assert paragraphs[-1] == "Another paragraph, long enough to be kept."
