"""The contract that makes committed notebook outputs verify on any machine (CONTRIBUTING.md,
"Committed outputs: what is compared, what is asserted"), checked on the notebooks as committed.

- Every chapter was run once, top to bottom, and stores no error.
- At most one output cell in ten is a measurement cell (tagged `nbval-ignore-output`), and no
  cell is skipped or exempted any other way: nbval also honours other tags (aliases such as
  `pytest-validate-ignore-output`, `nbval-skip`, `raises-exception`) and comment markers in the
  code (`# NBVAL_IGNORE_OUTPUT`, `# NBVAL_SKIP`, ...), which would escape the count. The lists
  come from nbval itself (`nbval.plugin.metadata_tags`, `comment_markers`).
- Each measurement cell asserts its claim: some top-level `assert` whose test reads a name that
  the cell assigns, or calls something (so it checks what the cell measured, not a constant or
  an earlier cell's value).
- Figures are SVG (the nbval sanitize rules, tested in tests/test_sanitize.py, replace each SVG
  document by a marker).
- The PNG data that an SVG embeds has its "/" percent-encoded (scripts/execute_notebooks.py,
  `encode_slashes`), so that no base64 text reads like a machine-specific file path, and it
  still decodes to a PNG.
- No timing or progress bar sits in an output that is compared.
"""
from __future__ import annotations

import ast
import base64
import builtins
import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from IPython.core.inputtransformer2 import TransformerManager
from nbval.plugin import comment_markers, find_comment_markers, metadata_tags

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
MEASUREMENT = "nbval-ignore-output"


def code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def output_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append("".join(out["text"]))
        for key in ("text/plain", "text/html"):
            parts.append("".join(out.get("data", {}).get(key, "")))
    return "".join(parts)


def python_source(cell: dict) -> str:
    """The cell as Python (IPython turns `%magic` and `!shell` lines into calls)."""
    return TransformerManager().transform_cell("".join(cell["source"]))


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
          ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def top_level_nodes(tree: ast.AST):
    """Every node the cell runs at its own level: not inside a def, lambda, class or
    comprehension (whose names are local to it)."""
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def names_assigned(tree: ast.AST) -> set[str]:
    """Names the cell binds or writes into (`x = ...`, `for x in`, `x[k] = ...`, `x.a += ...`,
    `x.append(...)`, `with ... as x`, `def x`, `import x`)."""
    names = set()
    for node in top_level_nodes(tree):
        if isinstance(node, ast.Assert):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            base = node
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Attribute)
              and isinstance(node.value.func.value, ast.Name)):
            names.add(node.value.func.value.id)  # a method called for its effect: x.append(...)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def computes(test: ast.expr, assigned: set[str]) -> bool:
    """Whether an assert's test reads a name the cell assigned, or calls something other than
    a builtin (len, all, abs, ...: those only look at values that exist already)."""
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in assigned:
            return True
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                               and hasattr(builtins, node.func.id)):
            return True
    return False


def asserts_what_it_computes(cell: dict) -> bool:
    tree = ast.parse(python_source(cell))
    assigned = names_assigned(tree)
    return any(isinstance(node, ast.Assert) and computes(node.test, assigned)
               for node in top_level_nodes(tree))


def test_assert_check_tells_a_real_check_from_a_hollow_one():
    def cell(source: str) -> dict:
        return {"cell_type": "code", "source": source}

    real = [
        "t = measure()\nassert t < 2.0",
        "times = {}\nfor T in (1, 2):\n    times[T] = run(T)\nassert times[2] > times[1]",
        "history.append(train())\nassert history[-1].loss < 0.1",
        "assert train(model).loss < 0.1",
        "%matplotlib inline\nx = run()\nassert x > 0",
        "for d in (1, 2):\n    assert slope[d] > 1.6",  # reads d, bound by this cell's loop
    ]
    hollow = [
        "x = run()\nassert True",
        "assert 1 == 1",
        "print(result)\nassert result > 0",  # result comes from an earlier cell
        "assert len(result) > 0",
        "assert all(r > 0 for r in result)",
        "def check():\n    y = run()\n    assert y > 0",  # never runs at the cell's level
        "x = run()\nprint(x)",
    ]
    assert all(asserts_what_it_computes(cell(s)) for s in real)
    assert not any(asserts_what_it_computes(cell(s)) for s in hollow)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_run_once_top_to_bottom_without_errors(path):
    cells = [c for c in code_cells(path) if "".join(c["source"]).strip()]
    counts = [c["execution_count"] for c in cells]
    assert counts == list(range(1, len(cells) + 1)), "re-execute the chapter: make notebooks NB=" + path.name
    errors = [o.get("ename") for c in cells for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors, f"stored errors: {errors}"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_measurement_cells_are_few_and_assert_their_claim(path):
    cells = code_cells(path)
    with_output = [c for c in cells if c.get("outputs")]
    measured = [c for c in cells if MEASUREMENT in tags(c)]
    assert 10 * len(measured) <= len(with_output), (
        f"{len(measured)} of {len(with_output)} output cells are exempt from comparison; "
        "at most one in ten may be")
    for cell in measured:
        assert asserts_what_it_computes(cell), (
            "a measurement cell must assert its claim on a value it computes (an assert that "
            "reads a name the cell assigns, or calls something):\n" + "".join(cell["source"])[:400])


def other_exemptions(cell: dict) -> list[str]:
    """The ways besides the counted tag in which nbval would skip or not compare a cell: its
    other tags (aliases included), `skip-execution`, and comment markers (nbval's own list, and
    any spelling of them, so that a near-miss is not left looking like an exemption)."""
    found = [t for t in tags(cell) if t in metadata_tags and t != MEASUREMENT]
    found += [t for t in tags(cell) if t == "skip-execution"]
    source = "".join(cell["source"])
    comments = [line.strip() for line in source.splitlines() if line.strip().startswith("#")]
    found += [c for c in comments
              if re.match(r"(NBVAL|PYTEST_VALIDATE)_", c.lstrip("#").strip(), re.I)]
    if list(find_comment_markers(source)) and not found:  # nbval's own reading, as a backstop
        found.append("a comment marker nbval acts on")
    return found


def test_exemption_check_finds_every_marker():
    def cell(source: str, *tag: str) -> dict:
        return {"cell_type": "code", "source": source, "metadata": {"tags": list(tag)}}

    for marker in comment_markers:
        assert other_exemptions(cell(f"# {marker}\nx = 1")), marker
    exempt = [cell("#NBVAL_SKIP\nx = 1"), cell("  #  nbval_ignore_output\nx = 1"),
              cell("x = 1", "pytest-validate-ignore-output"), cell("x = 1", "nbval-skip"),
              cell("x = 1", "raises-exception"), cell("x = 1", "skip-execution")]
    assert all(other_exemptions(c) for c in exempt)
    fine = [cell("x = 1", MEASUREMENT), cell("x = '# NBVAL_SKIP'"), cell("x = 1", "hide-cell")]
    assert not any(other_exemptions(c) for c in fine)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_no_cell_is_skipped_or_exempted_another_way(path):
    for i, cell in enumerate(code_cells(path)):
        assert not other_exemptions(cell), (
            f"code cell {i}: {other_exemptions(cell)}: only the tag {MEASUREMENT!r} may exempt a "
            f"cell (it is counted); nbval also honours the comment markers "
            f"{', '.join(sorted(comment_markers))}, other tags and aliases")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_figures_are_svg(path):
    for cell in code_cells(path):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            assert "image/png" not in data and "image/jpeg" not in data, (
                "a bitmap figure: book.setup() draws SVG (crisp on the site, checked by nbval as a figure)")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_embedded_pictures_read_as_no_path(path):
    png_data = re.compile(r"data:image/png;base64,([^\"']+)")
    for cell in code_cells(path):
        for out in cell.get("outputs", []):
            svg = "".join(out.get("data", {}).get("image/svg+xml", ""))
            for payload in png_data.findall(svg):
                assert "/" not in payload, "run scripts/execute_notebooks.py (encode_slashes)"
                png = base64.b64decode(re.sub(r"\s", "", unquote(payload)), validate=True)
                assert png.startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_no_timings_in_compared_outputs(path):
    timing = re.compile(r"\d\s*(it|step|steps)/s\b|\d+:\d\d<\d+:\d\d|\belapsed\b", re.I)
    for cell in code_cells(path):
        if MEASUREMENT in tags(cell):
            continue
        text = output_text(cell)
        assert not timing.search(text), f"a timing or progress bar in a compared output:\n{text[:300]}"
