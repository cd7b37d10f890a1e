"""Each chapter's reading time, for the first path and with every "Going deeper" block.

    python scripts/reading_time.py                 # print the table for every chapter
    python scripts/reading_time.py --write         # also write the line into each chapter's opening
    python scripts/reading_time.py chapters/04_*.ipynb

A chapter has a first-reading path and side studies a reader may skip ("Going deeper" blocks,
CONTRIBUTING.md): a markdown dropdown whose title begins with "Going deeper", and the code
cells tagged `going-deeper` that belong to it. The first path is every other markdown and code
cell, less the recall answers and exercise solutions (the other dropdowns) and the setup cell.

The time is computed, not guessed: prose at `WORDS_PER_MINUTE`, code at `CODE_LINES_PER_MINUTE`
(a reader reads code more slowly than prose, and runs it), rounded to 5 minutes. The opening
cell (the chapter's first markdown cell) carries the result as one line,

    *Reading time: about 20 minutes on the first path, 45 with every "Going deeper" block.*

and `tests/lint/test_reading_time.py` checks that the line equals what this script computes.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 20
#: The tag of a code cell that belongs to a "Going deeper" block.
DEEPER_TAG = "going-deeper"
LINE = re.compile(r"^\*Reading time: about \d+ minutes on the first path, \d+ with every "
                  r"\"Going deeper\" block\.\*$", re.M)
# A MyST dropdown (``` or ::: fence, any length), its title and body.
DROPDOWN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{dropdown\}(?P<title>[^\n]*)\n(?P<body>.*?)^(?P=fence)\s*$",
                      re.M | re.S)
WORD = re.compile(r"[A-Za-z0-9]+(?:['’-][A-Za-z0-9]+)*")


def words(markdown: str) -> int:
    """Words a reader reads: code spans and maths count as one word each, link targets and
    MyST options not at all."""
    text = re.sub(r"\$\$.*?\$\$", " x ", markdown, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", " x ", text)
    text = re.sub(r"`[^`\n]+`", " x ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)           # [text](target): the target is not read
    text = re.sub(r"^:[a-z-]+:.*$", "", text, flags=re.M)  # directive options
    text = re.sub(r"<[^>]+>", " ", text)               # HTML tags
    return len(WORD.findall(text))


@dataclass
class Count:
    first_words: int = 0
    first_code: int = 0
    deeper_words: int = 0
    deeper_code: int = 0

    @staticmethod
    def minutes(words: int, code: int) -> int:
        exact = words / WORDS_PER_MINUTE + code / CODE_LINES_PER_MINUTE
        return max(5, 5 * round(exact / 5))

    @property
    def first_minutes(self) -> int:
        return self.minutes(self.first_words, self.first_code)

    @property
    def all_minutes(self) -> int:
        return self.minutes(self.first_words + self.deeper_words, self.first_code + self.deeper_code)

    def line(self) -> str:
        return (f"*Reading time: about {self.first_minutes} minutes on the first path, "
                f"{self.all_minutes} with every \"Going deeper\" block.*")


def code_lines(source: str) -> int:
    return sum(1 for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#"))


def count(nb: dict) -> Count:
    c = Count()
    code_seen = 0
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] == "markdown":
            source = LINE.sub("", source)
            for m in DROPDOWN.finditer(source):
                if m["title"].strip().lower().startswith("going deeper"):
                    c.deeper_words += words(m["title"] + "\n" + m["body"])
            c.first_words += words(DROPDOWN.sub("", source))
        elif cell["cell_type"] == "code":
            code_seen += 1
            if code_seen == 1:
                continue  # the setup cell, collapsed on the site
            if DEEPER_TAG in tags:
                c.deeper_code += code_lines(source)
            else:
                c.first_code += code_lines(source)
    return c


def opening(nb: dict) -> dict:
    return next(cell for cell in nb["cells"] if cell["cell_type"] == "markdown")


def stated(nb: dict) -> str | None:
    m = LINE.search("".join(opening(nb)["source"]))
    return m.group(0) if m else None


def write_line(path: Path) -> bool:
    """Put the computed line into the opening cell (replacing the old one, or before the
    learning goals); True when the file changed."""
    nb = json.loads(path.read_text())
    cell = opening(nb)
    source = "".join(cell["source"])
    line = count(nb).line()
    if LINE.search(source):
        new = LINE.sub(line, source)
    elif "**In this chapter you will**" in source:
        new = source.replace("**In this chapter you will**", line + "\n\n**In this chapter you will**", 1)
    else:
        new = source.rstrip("\n") + "\n\n" + line
    if new == source:
        return False
    parts = new.split("\n")
    cell["source"] = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--write", action="store_true", help="write the line into each chapter's opening cell")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb"))
    print(f"{'chapter':32} {'first words':>11} {'code':>5} {'deeper words':>12} {'code':>5} {'min':>4} {'all':>4}")
    for path in paths:
        nb = json.loads(path.read_text())
        c = count(nb)
        print(f"{path.name:32} {c.first_words:11} {c.first_code:5} {c.deeper_words:12} {c.deeper_code:5} "
              f"{c.first_minutes:4} {c.all_minutes:4}")
        if args.write and write_line(path):
            print(f"  wrote: {c.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
