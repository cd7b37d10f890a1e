"""The repository's configuration agrees with itself.

- Every chapter notebook installs transformer_lib (on Colab/Binder) from the repository named
  in _config.yml, in a first code cell tagged `hide-cell`, and is listed in _toc.yml.
- Each part-opener page (book/parts/) links every chapter of its part that exists and marks
  the others "(in preparation)".
- binder/requirements.txt pins the same versions as requirements.txt, and torch is pinned
  exactly in both (a loose torch spec pulls a multi-GB CUDA build).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
INSTALL_URL = re.compile(r"git\+(https?://[^\s\"'@#]+)")


def repository_url() -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return config["repository"]["url"]


def pins(path: Path) -> dict[str, str]:
    """name -> version for every `name==version` line (names normalised as pip does)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9._-]+)(\[[^\]]*\])?\s*==\s*(\S+)", line)
        assert m, f"{path.relative_to(ROOT)}: {line!r} is not pinned with =="
        found[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(3)
    return found


def toc_files() -> set[str]:
    return set(re.findall(r"file:\s*([^\s#]+)", (ROOT / "_toc.yml").read_text()))


def test_repository_url_is_set():
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", repository_url())


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_setup_cell_installs_from_this_repository(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "no code cells"
    setup = code[0]
    source = "".join(setup["source"])
    assert "hide-cell" in setup.get("metadata", {}).get("tags", []), "the setup cell must be tagged hide-cell"
    urls = INSTALL_URL.findall(source)
    assert urls, "the setup cell does not install transformer_lib from git"
    assert set(urls) == {repository_url()}, f"install URL {urls} differs from repository.url in _config.yml"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_chapter_is_in_toc(path):
    entry = path.relative_to(ROOT).with_suffix("").as_posix()
    assert entry in toc_files(), f"{entry} is not listed in _toc.yml (add it under its part)"


def test_toc_entries_exist():
    for entry in toc_files() | {yaml.safe_load((ROOT / "_toc.yml").read_text())["root"]}:
        assert any((ROOT / f"{entry}{ext}").is_file() for ext in (".md", ".ipynb")), f"_toc.yml lists missing {entry}"


def test_torch_pinned_exactly():
    local = pins(ROOT / "requirements.txt")
    binder = pins(ROOT / "binder" / "requirements.txt")
    assert local.get("torch") == "2.13.0", "requirements.txt must pin torch==2.13.0 (the CPU wheel)"
    assert binder.get("torch", "").split("+")[0] == local["torch"]
    assert binder["torch"].endswith("+cpu"), "Binder must install the CPU build of torch"


def test_binder_pins_match_requirements():
    local = pins(ROOT / "requirements.txt")
    binder = pins(ROOT / "binder" / "requirements.txt")
    for name in ("numpy", "matplotlib", "ipywidgets", "anywidget"):
        assert name in binder, f"binder/requirements.txt does not pin {name}"
    differ = {
        name: (version, local.get(name))
        for name, version in binder.items()
        if local.get(name) != version.split("+")[0]
    }
    assert not differ, f"binder/requirements.txt and requirements.txt disagree (binder, local): {differ}"


PART_ENTRY = re.compile(r"^(\d+)\. (.*)$", re.M)


def test_part_openers_match_the_chapters():
    seen = set()
    for page in sorted((ROOT / "book" / "parts").glob("part*.md")):
        for number, text in PART_ENTRY.findall(page.read_text()):
            seen.add(int(number))
            written = sorted((ROOT / "chapters").glob(f"{int(number):02d}_*.ipynb"))
            where = f"{page.relative_to(ROOT)}, chapter {number}"
            if written:
                target = f"../../chapters/{written[0].name}"
                assert f"]({target})" in text, f"{where}: link the chapter, [**title**]({target})"
                assert "in preparation" not in text, f"{where}: the chapter exists; drop '(in preparation)'"
            else:
                assert "*(in preparation)*" in text, f"{where}: no notebook yet; mark it *(in preparation)*"
    assert seen == set(range(1, 15)), f"the part openers list chapters {sorted(seen)}, not 1 to 14"
