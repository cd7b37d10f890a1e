"""Lint: the repository's configuration agrees with itself (run by `make lint`, not `make test-unit`).

These checks pin exact versions and wording (requirements, the setup cell, README, CI), not the
behaviour of transformer_lib, so they live apart from the unit tests.

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

ROOT = Path(__file__).resolve().parents[2]
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
        line = line.split(";")[0].strip()
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
    # binder/requirements.txt is Binder's lock (scripts/lock.py); its top-level pins are in
    # binder/requirements.in. tests/lint/test_lock.py checks the lock against both.
    local = pins(ROOT / "requirements.txt")
    binder = pins(ROOT / "binder" / "requirements.in")
    for name in ("numpy", "matplotlib", "ipywidgets", "anywidget"):
        assert name in binder, f"binder/requirements.in does not pin {name}"
    differ = {
        name: (version, local.get(name))
        for name, version in binder.items()
        if local.get(name) != version.split("+")[0]
    }
    assert not differ, f"binder/requirements.in and requirements.txt disagree (binder, local): {differ}"


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
    chapters = {int(path.name[:2]) for path in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")}
    assert seen == chapters, f"the part openers list chapters {sorted(seen)}, the book has {sorted(chapters)}"


# The setup cell, exactly: on Colab and Binder it installs transformer_lib from the repository
# only when the import fails, quietly (pip -q), and says so in one line; locally (and in the
# committed outputs) it prints nothing.
SETUP_CELL_HEAD = """\
# Setup. On Colab or Binder this installs transformer_lib if missing; locally, nothing.
try:
    import transformer_lib as tl
except ImportError:
    REPO = "git+{url}"
    %pip install -q "transformer_lib @ {{REPO}}"
    import transformer_lib as tl
    print("Installed transformer_lib from the book's repository.")
from transformer_lib import book
book.setup("""


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_first_code_cell_is_the_setup_cell(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "no code cells"
    source = "".join(code[0]["source"])
    expected = SETUP_CELL_HEAD.format(url=repository_url())
    assert source.startswith(expected), (
        "the first code cell must begin with the setup cell of CONTRIBUTING.md, word for word:\n"
        f"{expected}...\nit begins:\n{source[:len(expected) + 40]}"
    )
    shown = ("stream", "display_data", "execute_result")
    printed = [o for o in code[0].get("outputs", []) if o.get("output_type") in shown]
    assert not printed, "the setup cell prints something locally (its committed outputs should be empty)"
    later = [i for i, c in enumerate(code[1:], 2) if re.search(r"^\s*[%!]\s*pip\b", "".join(c["source"]), re.M)]
    assert not later, f"code cells {later} install packages: only the setup cell may"


def test_contributing_shows_the_setup_cell():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    lines = SETUP_CELL_HEAD.format(url=repository_url()).splitlines()
    indented = r"\n".join(r"[ ]*" + re.escape(line) for line in lines)  # inside a list item
    assert re.search(indented, text), "CONTRIBUTING.md's setup cell differs from the one the chapters must use"


IMPORT = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", re.M)
# Import name -> the distribution that provides it, where the two differ.
DISTRIBUTION = {"sklearn": "scikit-learn", "PIL": "pillow", "yaml": "pyyaml", "IPython": "ipython"}


def project_dependencies() -> list[str]:
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", d).group(0)).lower() for d in deps]


def test_binder_installs_what_the_package_needs():
    # postBuild installs transformer_lib with --no-deps, so each of its dependencies must be
    # pinned in binder/requirements.txt.
    binder = pins(ROOT / "binder" / "requirements.txt")
    missing = [d for d in project_dependencies() if d not in binder]
    assert not missing, f"binder/requirements.txt lacks transformer_lib's dependencies {missing}"


def test_binder_installs_what_the_chapters_import():
    import sys

    binder = set(pins(ROOT / "binder" / "requirements.txt"))
    provided = binder | {"transformer-lib", "ipython"}  # postBuild; IPython comes with ipykernel
    missing = {}
    for path in CHAPTERS:
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            for name in IMPORT.findall("".join(cell["source"])):
                if name in sys.stdlib_module_names:
                    continue
                dist = re.sub(r"[-_.]+", "-", DISTRIBUTION.get(name, name)).lower()
                if dist not in provided:
                    missing.setdefault(dist, set()).add(path.name)
    assert not missing, f"chapters import packages that binder/requirements.txt does not install: {missing}"


def test_binder_environment():
    requirements = (ROOT / "binder" / "requirements.txt").read_text()
    assert re.search(r"^--extra-index-url https://download\.pytorch\.org/whl/cpu\s*$", requirements, re.M), (
        "binder/requirements.txt must take torch from PyTorch's CPU index (the CUDA build does not fit Binder)"
    )
    # Binder gives about 2 GB of memory and builds an image per commit: nothing beyond what a
    # reader runs (no site builder, test tools or browser driver; Binder brings JupyterLab).
    heavy = {"jupyter-book", "sphinx", "playwright", "pytest", "nbval", "jupyterlab", "myst-nb"}
    assert not heavy & set(pins(ROOT / "binder" / "requirements.txt")), "binder/ installs build or test tools"
    post_build = ROOT / "binder" / "postBuild"
    assert post_build.is_file() and post_build.stat().st_mode & 0o111, "binder/postBuild must exist and be executable"
    commands = [line for line in post_build.read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert any(re.search(r"\bpip install\b.*\s-e\s+\.\s*$|\bpip install\b.*\s\.\s*$", line) for line in commands), (
        "binder/postBuild must install the repository's own package (pip install -e .)"
    )
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert runtime == "python-3.11", f"binder/runtime.txt says {runtime!r}; the book is pinned for Python 3.11"


def test_launch_settings():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] == "https://github.com/transformer-book/transformer-book"
    assert config["repository"]["branch"] == "main"
    launch = config["launch_buttons"]
    assert launch["binderhub_url"].rstrip("/") == "https://mybinder.org"
    assert launch["colab_url"].rstrip("/") == "https://colab.research.google.com"


def ci_commands(text: str) -> list[str]:
    return re.findall(r"^\s*(?:run:?\s+)?(make (?:test|test-kernels|book|browser-test))(?=\s|$)", text, re.M)


def test_ci_script_runs_every_check():
    text = (ROOT / ".ci" / "run").read_text()
    assert ci_commands(text) == ["make test", "make test-kernels", "make book", "make browser-test"]
    # the notebook check under the machine's own kernels (variable unset), plain and AVX2 ones
    assert re.search(r"^unset ATEN_CPU_CAPABILITY$", text, re.M)
    assert re.search(r"make test-kernels KERNELS=\"default avx2\"", text)


def test_make_test_needs_no_built_site():
    makefile = (ROOT / "Makefile").read_text()
    rules = {m.group(1): (m.group(2).split(), m.group(3)) for m in
             re.finditer(r"^([\w-]+):([^=\n]*)\n((?:\t.*\n)*)", makefile, re.M)}
    assert "test" in rules, "the Makefile has no test rule"
    todo, seen = ["test"], set()
    while todo:  # the test rule and every rule it depends on
        name = todo.pop()
        if name in seen or name not in rules:
            continue
        seen.add(name)
        prerequisites, recipe = rules[name]
        assert "book" not in prerequisites and "_build" not in recipe and "browser" not in recipe, name
        todo += prerequisites
    assert {"lint", "test-unit", "test-notebooks"} <= seen


def test_make_test_unit_leaves_out_lint_and_notebooks():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^test-unit:[^\n]*\n((?:\t.*\n)*)", makefile, re.M).group(1)
    assert "--ignore=tests/lint" in recipe and "--nbval" not in recipe and "chapters" not in recipe
    lint = re.search(r"^lint:[^\n]*\n((?:\t.*\n)*)", makefile, re.M).group(1)
    assert "tests/lint" in lint
    assert re.search(r"ruff check transformer_lib tests scripts\b", lint), "make lint must run ruff on the code"


def test_readme_commands():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    assert blocks[:2] == ["make book\n", "make test\n"], "the README must open with `make book` and `make test`"
    assert "(benchmarks/RESULTS.md)" in readme, "the README must link the performance report"
    assert (ROOT / "benchmarks" / "RESULTS.md").is_file(), "benchmarks/RESULTS.md is missing: run `make bench`"


def test_workflow_builds_tests_and_publishes():
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    assert workflows, "no GitHub Actions workflow"
    text = "\n".join(w.read_text() for w in workflows)
    docs = [yaml.safe_load(w.read_text()) for w in workflows]
    triggers = {}
    for doc in docs:
        on = doc.get("on", doc.get(True))  # YAML 1.1 reads the key `on` as True
        triggers.update(on if isinstance(on, dict) else {name: None for name in ([on] if isinstance(on, str) else on)})
    assert "pull_request" in triggers, "the workflow must run on pull requests"
    assert "main" in (triggers.get("push") or {}).get("branches", []), "the workflow must run on pushes to main"
    assert ci_commands(text)[:4] == ["make test", "make test-kernels", "make book", "make browser-test"], (
        "the workflow must run the README's commands and the notebook check under other kernels")
    assert re.search(r"apt-get install[^\n]*(\\\n[^\n]*)*\bchromium\b", text), (
        "the workflow must install chromium with apt")
    assert "actions/upload-pages-artifact" in text and "actions/deploy-pages" in text, (
        "the workflow must publish to Pages")
    assert "_build/html" in text


def test_how_to_run_walks_through_the_three_ways():
    text = (ROOT / "book" / "how_to_run.md").read_text()
    url = repository_url()
    owner_repo = url.removeprefix("https://github.com/")
    for needed in (
        f"git clone {url}", "make book", "make test",  # on your own machine
        f"https://mybinder.org/v2/gh/{owner_repo}/main?urlpath=lab/tree/chapters/",  # Binder
        f"https://colab.research.google.com/github/{owner_repo}/blob/main/chapters/",  # Colab
        f'%pip install -q "transformer_lib @ git+{url}"',
    ):
        assert needed in text, f"book/how_to_run.md does not show {needed!r}"


REPO_FILE = re.compile(r"""Path\(\s*["']\.\.["']\s*\)|["']\.\./|["'](?:checkpoints|scripts|binder)/""")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_chapter_needs_no_repository_files(path):
    # Colab opens the notebook alone: whatever a chapter reads must come with transformer_lib
    # (its checkpoints are package data, tl.CHECKPOINTS), not from the repository around it.
    nb = json.loads(path.read_text())
    found = [
        (i, m.group(0))
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code"
        for m in REPO_FILE.finditer("".join(c["source"]))
    ]
    assert not found, f"cells read files of the repository, which Colab does not have: {found}"


def chapter_code(notebook: Path) -> str:
    return "\n".join("".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"]
                     if cell["cell_type"] == "code")


def uses_both_cores(notebook: Path) -> bool:
    """A chapter that trains on more than one thread (book.setup(threads=2), torch.set_num_threads)
    or starts processes (parallel.launch)."""
    code = chapter_code(notebook)
    threads = [int(n) for n in re.findall(r"(?:threads=|set_num_threads\()\s*(\d+)", code)]
    return any(n > 1 for n in threads) or bool(re.search(r"\blaunch\(", code))


def make_list(name: str) -> set[str]:
    """The words of a `NAME := ...` line of the Makefile (continued lines included)."""
    found = re.search(rf"^{name} := ((?:.*\\\n)*.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert found, f"the Makefile has no {name} line"
    return set(found.group(1).replace("\\\n", " ").split())


def test_chapters_that_use_both_cores_run_alone():
    """`make test-notebooks` runs the one-thread chapters two at a time, then NB_BOTH_CORES one at
    a time (the Makefile says why). A chapter that computes on both cores must be in the list, or
    it runs beside another chapter (and a speed claim there or in it is measured on a busy
    machine); a one-thread chapter must not be (it would only make the check slower)."""
    both = {f"chapters/{nb.name}" for nb in sorted((ROOT / "chapters").glob("*.ipynb")) if uses_both_cores(nb)}
    assert both, "no chapter found that uses both cores: has the setup call changed?"
    assert make_list("NB_BOTH_CORES") == both, f"NB_BOTH_CORES should be {sorted(both)}"


def test_chapters_with_close_speed_claims_read_a_clock():
    """NB_CLOSE_TIMES (run alone for a speed claim near its bound) lists chapters that time
    something, and none that is already in NB_BOTH_CORES."""
    close = make_list("NB_CLOSE_TIMES")
    for name in close:
        assert re.search(r"\btime\.(perf_counter|process_time|time)\(|\bbest_time\(", chapter_code(ROOT / name)), (
            f"{name} is in NB_CLOSE_TIMES but reads no clock")
    assert not close & make_list("NB_BOTH_CORES")
