"""Build the character-level corpus of chapter 14 from the book's own prose.

The corpus is the markdown prose of `book/*.md` (all but the reference list) and of the
markdown cells of chapters 1-12, with code, display maths and markup taken out and inline
maths spelled out in plain characters, so that a small language model learns English
sentences about Transformers rather than LaTeX or Python. The text is the book's own and is
licensed CC BY 4.0 (LICENSE-TEXT.md); the first line of the output file says so. The file is
package data (transformer_lib/corpora/), so that the chapter finds it wherever
transformer_lib is installed, Colab included. Nothing is downloaded.

Run from the repository root whenever the chapters' prose changes, and commit the result:

    python scripts/make_corpus.py            # writes transformer_lib/corpora/book_prose.txt
    python scripts/make_corpus.py --check    # exits 1 if the committed file differs

Steps, per markdown text: drop fenced blocks (code, and MyST directives such as dropdowns,
whose prose is kept), display maths, HTML tags, images and tables; keep the text of links and
of inline code; write inline maths in plain characters (`$d_\\text{model}$` -> d_model,
`$\\sqrt{d_k}$` -> sqrt(d_k), `$QK^\\top$` -> QK^T, `$\\alpha$` -> alpha; see `plain_maths`),
and drop the sentence around any inline maths it cannot write so; drop heading marks, list
bullets and emphasis; join the lines of a paragraph; map typographic characters to plain
ASCII; keep paragraphs of at least 40 characters (headings and fragments are shorter), one
per line.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "transformer_lib" / "corpora" / "book_prose.txt"
HEADER = ("# Prose of 'The Transformer, step by step' (book/*.md except references.md, and the markdown "
          "cells of chapters 1-12), by The Transformer Tutorial authors, licensed CC BY 4.0 "
          "(https://creativecommons.org/licenses/by/4.0/); code, display maths and markup removed and "
          "inline maths written in plain characters by scripts/make_corpus.py.")
ASCII = {"\u2014": " - ", "\u2013": "-", "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
         "\u2026": "...", "\u00d7": "x", "\u2192": "->", "\u2212": "-", "\u00a0": " ", "\u2248": "~",
         "\u2264": "<=", "\u2265": ">=", "\u00b7": "."}
MIN_PARAGRAPH = 40

# Inline maths in plain characters: each LaTeX command the book's prose uses, as it is read.
WORDS = {name: name for name in (
    "alpha", "beta", "gamma", "delta", "epsilon", "theta", "lambda", "mu", "pi", "sigma", "tau", "omega",
    "ln", "log", "exp", "sin", "cos", "tanh", "max", "min", "arg", "sum", "prod")}
SYMBOLS = {"cdot": " * ", "times": " x ", "top": "T", "to": "->", "leftarrow": "<-", "rightarrow": "->",
           "in": "in", "le": "<=", "leq": "<=", "ge": ">=", "geq": ">=", "ne": "!=", "neq": "!=",
           "approx": "~", "pm": "+/-", "infty": "infinity", "dots": "...", "ldots": "...",
           "cdots": "...", "mid": "|", "partial": "d", "nabla": "grad", "odot": " * ", "lVert": "||",
           "rVert": "||", "lceil": "ceil(", "rceil": ")", "lfloor": "floor(", "rfloor": ")",
           "langle": "<", "rangle": ">", "quad": " ", "qquad": " "}
NAMES = ("text", "mathrm", "operatorname", "mathbb", "mathcal", "mathbf", "mathit")  # \text{x} -> x
MARKS = {"overrightarrow": "{}_fwd", "overleftarrow": "{}_bwd", "hat": "{}_hat", "bar": "{}_bar",
         "tilde": "{}_tilde"}
SPACES = {",": " ", ";": " ", ":": " ", "!": "", " ": " ", "_": "_", "%": "%", "{": "(", "}": ")"}
ARG = r"\{((?:[^{}]|\{[^{}]*\})*)\}"  # one {argument}, braces nested one deep


def plain_maths(tex: str) -> str | None:
    """Inline LaTeX as plain characters, or None if it uses a command not listed above.

    `d_\\text{model} \\times d_k` -> "d_model x d_k", `\\sqrt{d_k}` -> "sqrt(d_k)",
    `\\frac{a}{b}` -> "(a)/(b)", `x_{t+1}` -> "x_(t+1)", `1{,}000` -> "1,000".
    """
    s = " ".join(tex.split())
    s = re.sub(r"\{,\}", ",", s)  # 1{,}000
    for _ in range(4):  # innermost first: arguments hold at most this deep a nesting
        s = re.sub(r"\\(?:" + "|".join(NAMES) + r")\s*" + ARG, r"{\1}", s)  # braces go at the end
        s = re.sub(r"\\(" + "|".join(MARKS) + r")\s*(?:" + ARG + r"|(\w))",
                   lambda m: MARKS[m.group(1)].format(m.group(2) or m.group(3)), s)  # \hat{y}, \hat y
        s = re.sub(r"\\sqrt\s*" + ARG, r"sqrt(\1)", s)
        s = re.sub(r"\\frac\s*" + ARG + r"\s*" + ARG, r"(\1)/(\2)", s)
    s = re.sub(r"\\([,;:! _%{}])", lambda m: SPACES[m.group(1)], s)

    def command(m: re.Match) -> str:
        name = m.group(1)
        if name in WORDS:
            return WORDS[name]
        if name in SYMBOLS:
            return f" {SYMBOLS[name]} " if name == "in" else SYMBOLS[name]
        raise KeyError(name)

    try:
        s = re.sub(r"\\([A-Za-z]+)", command, s)
    except KeyError:
        return None
    s = re.sub(r"([_^])\{(\w+)\}", r"\1\2", s)  # x_{ij} -> x_ij
    s = re.sub(r"([_^])\{\(([^{}]*)\)\}", r"\1(\2)", s)  # PE_{(pos,2i)} -> PE_(pos,2i)
    s = re.sub(r"([_^])\{([^{}]*)\}", r"\1(\2)", s)  # x_{t+1} -> x_(t+1)
    s = s.replace("{", "").replace("}", "")
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r"([(\[])\s+|\s+(?=[)\]])", r"\1", s)  # ceil( T/2 ) -> ceil(T/2)
    return None if "\\" in s or "$" in s else s


def _drop_fences(text: str) -> str:
    """Drop fenced code blocks and the fence lines of MyST directives (keeping a directive's
    body), reading line by line so that a directive's closing fence is never taken for the
    opening of a code block."""
    out, open_fences, code = [], [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(`{3,}|~{3,}|:{3,})(.*)$", line)
        if code is not None:  # inside a code block: skip up to its own closing fence
            if m and m.group(1) == code and not m.group(2).strip():
                code = None
            continue
        if not m:
            out.append(line)
        elif m.group(2).strip().startswith("{"):  # a directive opens: keep its body
            open_fences.append(m.group(1))
        elif not m.group(2).strip() and open_fences and open_fences[-1] == m.group(1):
            open_fences.pop()  # a directive closes
        elif m.group(1)[0] != ":":
            code = m.group(1)  # a code block opens
    return "\n".join(out)


def strip_markdown(text: str) -> list[str]:
    """The paragraphs of plain prose in one markdown text."""
    text = _drop_fences(text)
    text = re.sub(r"^:[\w-]+:.*$", "", text, flags=re.M)  # directive options such as :class:
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)  # display maths
    text = re.sub(r"\\begin\{(\w+\*?)\}.*?\\end\{\1\}", " ", text, flags=re.S)
    kept: list[str | None] = []  # inline code and maths, kept out of the markup rules below

    def keep(plain: str | None) -> str:
        kept.append(plain)
        return f"\x00{len(kept) - 1}\x00"

    text = re.sub(r"\{\w+\}`([^`<]*?)\s*(?:<[^`>]*>)?`", lambda m: keep(m.group(1)), text)  # {doc}`x <y>`: x
    text = re.sub(r"`([^`\n]*)`", lambda m: keep(m.group(1)), text)  # inline code: keep the name
    text = re.sub(r"\$((?:[^$\n]|\n(?![ \t]*\n))+?)\$", lambda m: keep(plain_maths(m.group(1))), text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"<[^>\n]+>", "", text)  # HTML tags
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", text)  # images
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: keep their text
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.splitlines() if not re.match(r"\s*(\||#|-{3,}|={3,})", ln)]  # tables, headings
        lines = [re.sub(r"^\s*(?:[-*+]|\d+\.)\s+", "", ln) for ln in lines]  # list bullets and numbers
        para = " ".join(ln.strip() for ln in lines)
        para = re.sub(r"(\*\*|__|\*|(?<!\w)_(?=\w)|(?<=\w)_(?!\w))", "", para)  # emphasis
        sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z\x00])", para)
        para = " ".join(s for s in sentences  # a sentence whose maths has no plain form goes
                        if all(kept[int(i)] is not None for i in re.findall(r"\x00(\d+)\x00", s)))
        para = re.sub(r"\x00(\d+)\x00", lambda m: kept[int(m.group(1))], para)
        for char, plain in ASCII.items():
            para = para.replace(char, plain)
        para = unicodedata.normalize("NFKD", para).encode("ascii", "ignore").decode("ascii")  # é -> e
        para = re.sub(r"\(\s*\)|\[\s*\]", "", para)  # brackets left empty
        para = re.sub(r"\s+([,.;:])(?=\s|$)", r"\1", para)
        para = re.sub(r"\s+", " ", para).strip()
        if len(para) >= MIN_PARAGRAPH:
            paragraphs.append(para)
    return paragraphs


def sources() -> list[tuple[str, str]]:
    """(name, markdown) for each page and each chapter's markdown cells, in book order."""
    found = []
    for page in sorted((ROOT / "book").glob("*.md")):
        if page.name != "references.md":  # a list of citations, not prose
            found.append((page.name, page.read_text(encoding="utf-8")))
    for nb_path in sorted((ROOT / "chapters").glob("*.ipynb")):
        number = int(nb_path.name[:2])
        if 1 <= number <= 12:
            cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
            text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
            found.append((nb_path.name, text))
    return found


def build() -> str:
    paragraphs = [p for _, text in sources() for p in strip_markdown(text)]
    return HEADER + "\n" + "\n".join(paragraphs) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    args = parser.parse_args()
    text = build()
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT.relative_to(ROOT)} is {'up to date' if same else 'out of date: run scripts/make_corpus.py'}")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    body = text.split("\n", 1)[1]
    print(f"wrote {OUT.relative_to(ROOT)}: {len(body):,} characters, {len(set(body))} distinct, "
          f"{body.count(chr(10)):,} paragraphs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
