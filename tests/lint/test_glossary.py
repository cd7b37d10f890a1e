"""Lint: a term is linked to the glossary wherever a page uses it before the chapter that
defines it.

`book/glossary.md` holds a Sphinx glossary. Each entry is one or more term lines (spellings of
one term: "LayerNorm", "layer normalisation") and an indented definition that names its defining
chapter with a link ``{doc}`chapter 7 <../chapters/07_encoder_layer>` ``. The pages are read in
the order of `_toc.yml`; in every page that comes before an entry's defining chapter (earlier
chapters, the intro, the part openers), **the first use of the term must be a link**,
``{term}`query` `` or ``{term}`queries <query>` ``. Later uses on the same page may be plain
words: the reader has had the link once, and a page that underlined every "head" would be hard
to read. A link later on the page does not excuse a plain use before it.

What counts as a use: any spelling of the entry, or its plural, as a whole word (a hyphen joins
words: "multi-head" is not a use of "head"), in any case, in a page's markdown, outside code
(spans, fences, code cells), maths (`$...$`, `$$...$$`, `{math}`, `\\begin...\\end`), HTML,
directive options, images, links inside the book (their text goes to a chapter already) and
link targets. A chapter's References cell is not read (paper titles cannot be reworded).

Also checked: every ``{term}`...` `` role on any page names a glossary term (a misspelt target
would fail `make book`), every entry names one existing defining chapter, and the glossary
holds the terms a newcomer meets early.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "book" / "glossary.md"

# Terms the glossary must hold (the project's list of words met before their chapter).
REQUIRED = [
    "encoder-decoder", "context vector", "alignment", "query", "key", "value",
    "attention weights", "softmax", "self-attention", "multi-head attention", "head",
    "positional encoding", "residual connection", "LayerNorm", "feed-forward network",
    "padding mask", "causal mask", "cross-attention", "teacher forcing", "label smoothing",
    "exact match", "BLEU", "beam search", "greedy decoding", "KV cache", "perplexity",
]

# Directives whose content is code or maths, not prose.
NON_PROSE_DIRECTIVES = {"code", "code-cell", "code-block", "sourcecode", "math", "raw",
                        "eval-rst", "mermaid", "literalinclude", "image", "figure-md"}
# Roles that link inside the book: their text is already a link.
LINK_ROLES = {"doc", "ref", "numref", "eq", "cite", "download", "any", "term"}


# ----------------------------------------------------------------------------------------
# The glossary


@dataclass
class Entry:
    terms: list[str]
    definition: str
    chapter: str | None = None        # "07", from the definition's {doc} link
    forms: list[str] = field(default_factory=list)


def plural(word: str) -> str:
    """English plural of a term's last word, enough for the glossary's terms."""
    low = word.lower()
    if low.endswith(("s", "x", "ch", "sh")):
        return word if low.endswith("s") else word + "es"
    if low.endswith("y") and low[-2:-1] not in set("aeiou"):
        return word[:-1] + "ies"
    return word + "s"


def glossary_block(text: str) -> list[str]:
    """The lines inside the page's ```{glossary} fence, its options removed."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines)
                     if re.match(r"^(```+|:::+)\{glossary\}", line.strip()))
    except StopIteration:
        raise AssertionError("book/glossary.md has no ```{glossary} block") from None
    fence = re.match(r"^(`+|:+)", lines[start].strip()).group(1)
    body = []
    for line in lines[start + 1:]:
        if line.strip() == fence:
            return [b for b in body if not re.match(r"^:[\w-]+:", b)]
        body.append(line)
    raise AssertionError("book/glossary.md: the {glossary} block is not closed")


def read_glossary(text: str | None = None) -> list[Entry]:
    """Entries in the order written: consecutive unindented lines are one entry's terms, the
    indented lines after them its definition."""
    body = glossary_block(GLOSSARY.read_text() if text is None else text)
    entries: list[Entry] = []
    terms: list[str] = []
    definition: list[str] = []
    for line in body + [""]:
        if line and not line[0].isspace():
            if definition:
                entries.append(Entry(terms, " ".join(definition)))
                terms, definition = [], []
            terms.append(line.strip())
        elif line.strip():
            assert terms, f"glossary: definition text with no term above it: {line!r}"
            definition.append(line.strip())
    if terms:
        assert definition, f"glossary: {terms} has no definition"
        entries.append(Entry(terms, " ".join(definition)))
    for entry in entries:
        m = re.search(r"\{doc\}`[^`]*?<\.\./chapters/(\d\d)_[\w-]+>`", entry.definition)
        entry.chapter = m.group(1) if m else None
        forms = {t for t in entry.terms} | {plural(t) for t in entry.terms}
        entry.forms = sorted(forms, key=len, reverse=True)
    return entries


# ----------------------------------------------------------------------------------------
# The pages, in reading order


def toc_pages() -> list[str]:
    """Every page of _toc.yml in reading order, as a path without suffix ("book/intro")."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        for chapter in part.get("chapters", []):
            pages.append(chapter["file"])
    return pages


def page_path(page: str) -> Path:
    for suffix in (".ipynb", ".md"):
        if (ROOT / (page + suffix)).exists():
            return ROOT / (page + suffix)
    raise AssertionError(f"_toc.yml lists {page}, which is neither .ipynb nor .md")


def chapter_number(page: str) -> str | None:
    m = re.match(r"chapters/(\d\d)_", page)
    return m.group(1) if m else None


@dataclass
class Cell:
    where: str      # "cell 14 (id abc)" or "lines 1-40"
    text: str


def page_cells(path: Path) -> list[Cell]:
    """The markdown a page shows, cell by cell (a .md page is one cell); a chapter's
    References cell is left out."""
    if path.suffix == ".md":
        return [Cell("the page", path.read_text())]
    cells = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        if re.match(r"\s*#+\s*References\s*$", source.splitlines()[0] if source else ""):
            continue
        cells.append(Cell(f"cell {i} (id {cell.get('id', '?')})", source))
    return cells


# ----------------------------------------------------------------------------------------
# Prose: what a reader reads as words


TERM_MARK = "\x00{}\x00"


def _blank(match: re.Match) -> str:
    return " "


def prose(markdown: str) -> str:
    """The words of a markdown text with code, maths, HTML, images, internal links and link
    targets removed; each ``{term}`...` `` role is replaced by a marker "\\0target\\0" that
    `uses` reads as a link."""
    out: list[str] = []
    fences: list[tuple[str, bool]] = []  # (closing fence, content is prose)
    options_allowed = False
    for line in markdown.splitlines():
        stripped = line.strip()
        if fences:
            close, is_prose = fences[-1]
            if stripped == close or (close[0] == ":" and re.fullmatch(r":{3,}", stripped)
                                     and len(stripped) >= len(close)):
                fences.pop()
                options_allowed = False
                continue
        m = re.match(r"^(`{3,}|~{3,}|:{3,})\s*(\{([\w:-]+)\})?\s*(.*)$", stripped)
        if m and (not fences or fences[-1][1]):
            fence, _, name, args = m.groups()
            if fence[0] == ":" and name is None:
                out.append(line)  # a line of colons with no directive: not a fence
                continue
            is_prose = name is not None and name not in NON_PROSE_DIRECTIVES
            fences.append((fence, is_prose))
            options_allowed = True
            if is_prose and name not in {"figure", "glossary"}:
                out.append(args)  # a directive's title ("Going deeper: ...") is prose
            continue
        if fences and not fences[-1][1]:
            continue
        if fences and options_allowed and re.match(r"^:[\w-]+:", stripped):
            continue
        options_allowed = False
        if stripped.startswith("%"):  # MyST comment
            continue
        out.append(line)
    text = "\n".join(out)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\\begin\{(\w+\*?)\}.*?\\end\{\1\}", " ", text, flags=re.S)
    text = re.sub(r"(?<![\\$])\$(?!\$)(?:\\.|[^$\\\n])+?\$", " ", text)
    # Roles: {term}`text <target>` or {term}`target` become a marker; other links vanish.
    def role(m: re.Match) -> str:
        name, body = m.group(1), m.group(2)
        if name == "term":
            target = re.search(r"<([^<>]+)>\s*$", body)
            target = target.group(1) if target else body
            return " " + TERM_MARK.format(" ".join(target.split())) + " "
        return " "
    text = re.sub(r"\{([\w:-]+)\}`([^`]*)`", role, text)
    text = re.sub(r"(`+).+?\1", " ", text, flags=re.S)       # inline code
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", " ", text)            # images
    def link(m: re.Match) -> str:
        words, target = m.group(1), m.group(2).strip()
        external = re.match(r"[a-z][a-z0-9+.-]*:", target, flags=re.I)
        return words if external else " "
    text = re.sub(r"\[([^\]]*)\]\(([^)]*)\)", link, text)         # links: keep outside words
    text = re.sub(r"<https?://[^>]*>", " ", text)
    text = re.sub(r"https?://\S+", " ", text)
    text = re.sub(r"</?[A-Za-z][^>]*>", " ", text)                # HTML tags
    return text


def uses(text: str, entries: list[Entry]) -> list[tuple[int, str, bool, str]]:
    """(entry index, words, is a link, context) for every use or {term} link in prose
    `text`, in reading order."""
    form_of = {}
    for i, entry in enumerate(entries):
        for form in entry.forms:
            form_of.setdefault(form.lower(), i)
    term_of = {t.lower(): i for i, e in enumerate(entries) for t in e.terms}
    forms = sorted(form_of, key=len, reverse=True)
    words = "|".join(re.escape(f).replace(r"\ ", r"\s+") for f in forms)
    pattern = re.compile(r"\x00([^\x00]*)\x00|(?<![\w-])(" + words + r")(?![\w-])", re.I)
    found = []
    for m in pattern.finditer(text):
        context = " ".join(text[max(0, m.start() - 40):m.end() + 40].split())
        context = context.replace("\x00", "`")
        if m.group(1) is not None:
            index = term_of.get(m.group(1).lower())
            if index is not None:
                found.append((index, m.group(1), True, context))
        else:
            found.append((form_of[" ".join(m.group(2).lower().split())], m.group(2), False,
                          context))
    return found


def unknown_term_links(text: str, entries: list[Entry]) -> list[str]:
    known = {t.lower() for e in entries for t in e.terms}
    return [t for t in re.findall(r"\x00([^\x00]*)\x00", text) if t.lower() not in known]


def early_plain_uses(page: str, entries: list[Entry]) -> list[str]:
    """One line per term whose first use on `page` (a page before its defining chapter) is
    not a link."""
    order = toc_pages()
    position = order.index(page)
    chapter_position = {chapter_number(p): k for k, p in enumerate(order) if chapter_number(p)}
    early = {i for i, e in enumerate(entries)
             if e.chapter in chapter_position and position < chapter_position[e.chapter]}
    seen: set[int] = set()
    problems = []
    for cell in page_cells(page_path(page)):
        for index, words, is_link, context in uses(prose(cell.text), entries):
            if index not in early or index in seen:
                continue
            seen.add(index)
            if not is_link:
                entry = entries[index]
                words = " ".join(words.split())
                known = words.lower() in {t.lower() for t in entry.terms}
                link = (f"{{term}}`{words}`" if known
                        else f"{{term}}`{words} <{entry.terms[0]}>`")
                problems.append(f"  {cell.where}: {words!r} (chapter {entry.chapter}): write "
                                f"{link} or reword: ...{context}...")
    return problems


# ----------------------------------------------------------------------------------------
# The tests

ENTRIES = read_glossary()
PAGES = toc_pages()


def test_glossary_is_in_the_toc():
    assert "book/glossary" in PAGES, "_toc.yml does not list book/glossary (Reference part)"


def test_every_entry_names_its_defining_chapter():
    chapters = {chapter_number(p) for p in PAGES if chapter_number(p)}
    problems = [f"  {e.terms[0]!r}: " + ("no {doc} link to ../chapters/NN_name" if e.chapter
                                         is None else f"chapter {e.chapter} is not in _toc.yml")
                for e in ENTRIES if e.chapter not in chapters]
    assert not problems, "glossary entries without a defining chapter:\n" + "\n".join(problems)


def test_no_term_is_written_twice():
    seen: dict[str, str] = {}
    doubled = []
    for entry in ENTRIES:
        for form in entry.forms:
            first = seen.setdefault(form.lower(), entry.terms[0])
            if first != entry.terms[0]:
                doubled.append(f"  {form!r} in {first!r} and {entry.terms[0]!r}")
    assert not doubled, "spellings claimed by two entries:\n" + "\n".join(doubled)


def test_glossary_holds_the_early_terms():
    known = {t.lower() for e in ENTRIES for t in e.terms}
    missing = [t for t in REQUIRED if t.lower() not in known]
    assert not missing, f"the glossary lacks {missing}"


@pytest.mark.parametrize("page", PAGES, ids=PAGES)
def test_term_links_name_glossary_terms(page):
    bad = [(cell.where, t) for cell in page_cells(page_path(page))
           for t in unknown_term_links(prose(cell.text), ENTRIES)]
    assert not bad, (f"{page}: {{term}} links to words the glossary does not define "
                     "(write {term}`plural <singular>` for a plural):\n"
                     + "\n".join(f"  {w}: {t!r}" for w, t in bad))


EARLY_PAGES = [p for p in PAGES if not p.startswith("book/") or p in
               {"book/intro"} or p.startswith("book/parts/")]


@pytest.mark.parametrize("page", EARLY_PAGES, ids=EARLY_PAGES)
def test_terms_are_linked_before_their_chapter(page):
    problems = early_plain_uses(page, ENTRIES)
    assert not problems, (
        f"{page_path(page).relative_to(ROOT)} uses {len(problems)} glossary term(s) before "
        "the chapter that defines them; link the first use of each to book/glossary.md:\n"
        + "\n".join(problems))


# The reader above must itself be right: small cases with known answers.

SAMPLE_GLOSSARY = """\
```{glossary}
:sorted:

query
  Asks. Defined in {doc}`chapter 4 <../chapters/04_qkv_attention>`.

attention head
head
  One of several. Defined in {doc}`chapter 5 <../chapters/05_multi_head_attention>`.
```
"""


def test_reader_parses_entries_forms_and_chapters():
    entries = read_glossary(SAMPLE_GLOSSARY)
    assert [e.terms for e in entries] == [["query"], ["attention head", "head"]]
    assert [e.chapter for e in entries] == ["04", "05"]
    assert set(entries[0].forms) == {"query", "queries"}
    assert set(entries[1].forms) == {"attention head", "attention heads", "head", "heads"}


@pytest.mark.parametrize("markdown", [
    "the `query` tensor", "maths $q_i$ here", "$$\nq \\cdot k\n$$",
    "see [the query chapter](../chapters/04_qkv_attention.ipynb)",
    "![a query](img.png)", "{doc}`queries <04_qkv_attention>`", "```python\nquery = 1\n```",
    "a multi-head layer", "<img alt='query' src='x.png'>",
    ":::{figure} a.png\n:alt: every query\nA caption.\n:::",
    "\\begin{align} query \\end{align}", "[paper](https://example.org/query)",
])
def test_prose_leaves_out_code_maths_and_links(markdown):
    entries = read_glossary(SAMPLE_GLOSSARY)
    assert uses(prose(markdown), entries) == [], prose(markdown)


@pytest.mark.parametrize("markdown, expected", [
    ("Each Query meets a key.", [(0, False)]),
    ("Two queries\nand three heads.", [(0, False), (1, False)]),
    ("A {term}`query` first, then a query.", [(0, True), (0, False)]),
    ("{term}`heads <head>` side by side", [(1, True)]),
    ("[attention heads, see](https://example.org)", [(1, False)]),
    (":::{dropdown} Going deeper: one head\ntext\n:::", [(1, False)]),
    ("```{dropdown} Answer\nThe query.\n```", [(0, False)]),
    ("every attention\nhead", [(1, False)]),
])
def test_prose_finds_uses_and_links(markdown, expected):
    entries = read_glossary(SAMPLE_GLOSSARY)
    assert [(i, link) for i, _, link, _ in uses(prose(markdown), entries)] == expected


def test_unknown_term_link_is_reported():
    entries = read_glossary(SAMPLE_GLOSSARY)
    assert unknown_term_links(prose("{term}`queries` and {term}`keys <key>`"), entries) == [
        "queries", "key"]
