"""Properties of the package as a whole: its floors (no import runs back up), no cycles, no
module over 400 lines, the library apart from the book's aids."""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "transformer_lib"


def test_the_library_never_imports_the_books_aids():
    # transformer_lib.book (figures, explorer, asides, bug hunt, setup) stands above the library:
    # importing the library loads none of it, and no library module names it
    code = "import sys, transformer_lib; print(sorted(m for m in sys.modules if '.book' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
    root = ROOT
    offenders = []
    for path in root.rglob("*.py"):
        if "book" in path.relative_to(root).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            if any(n == "book" or n.startswith("book.") or ".book" in n for n in names):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not offenders, f"library modules import transformer_lib.book: {offenders}"


def test_import_does_not_load_pyplot():
    # pyplot picks a GUI backend and takes time: drawing code imports it on first use only.
    code = "import sys, transformer_lib; print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_public_names_exist_and_from_torch_is_exported():
    import transformer_lib as tl

    missing = [name for name in tl.__all__ if not hasattr(tl, name)]
    assert not missing, f"__all__ names what the package lacks: {missing}"
    assert {"from_torch", "AddNorm", "interop", "residual"} <= set(tl.__all__)
    assert tl.from_torch is tl.interop.from_torch and tl.AddNorm is tl.residual.AddNorm


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__init__"


def _package_imports() -> dict[str, set[str]]:
    """module (dotted, below transformer_lib) -> the package modules it imports, at the top or
    inside functions, read with ast (relative imports resolved; `from . import x` names x)."""
    graph = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = _module_name(path)
        package = [] if name == "__init__" else name.split(".")[: None if path.name == "__init__.py" else -1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - node.level + 1]
                if node.module:
                    found.add(".".join(base + node.module.split(".")))
                else:
                    found.update(".".join(base + [alias.name]) for alias in node.names)
        graph[name] = found - {name}
    return graph


#: The floors of the package, from the ground up (CONTRIBUTING.md, "Layout", draws them): a
#: module imports only from its own floor or the floors below. Every module stands on one.
FLOORS = [
    ("foundation", {"_checks", "special_tokens", "runtime", "memory", "metrics", "dates"}),
    ("the paper's pieces, and the data", {"masks", "positional", "kv_cache", "residual", "losses", "schedules",
                                          "vocab", "data"}),
    ("attention", {"attention"}),
    ("blocks and efficient attention", {"layers", "efficient", "flash"}),
    ("models", {"model", "rnn", "lm"}),
    ("what uses a model", {"checkpoints", "checkpoints.format", "interop", "attention_maps", "decoding", "training",
                           "recipes"}),
    ("parallel (chapter 17)", {"parallel"}),
    ("the book's teaching aids", {"book"}),
    ("the package's face", {"__init__"}),
]
#: The modules that read like the papers: they never reach into the data plumbing.
PAPER = FLOORS[1][1] - {"vocab", "data"} | FLOORS[2][1] | FLOORS[3][1] | FLOORS[4][1]


def _floor(module: str) -> int:
    top = module.split(".")[0]
    for i, (_, members) in enumerate(FLOORS):
        if module in members or (top in ("parallel", "book") and top in members):
            return i
    raise AssertionError(f"transformer_lib.{module} stands on no floor: add it to FLOORS (and to CONTRIBUTING.md)")


def test_no_import_runs_back_up_a_floor():
    graph = _package_imports()
    upward = [f"{a} (floor {_floor(a)}: {FLOORS[_floor(a)][0]}) imports {b} (floor {_floor(b)}: {FLOORS[_floor(b)][0]})"
              for a, targets in graph.items() for b in targets if _floor(b) > _floor(a)]
    assert not upward, "imports that run back up:\n" + "\n".join(upward)
    assert {name for name in graph if name != "book" and not name.startswith("book.")} >= {"model", "parallel.ring"}


def test_the_floor_check_can_fail():
    assert _floor("attention") < _floor("training")  # so training -> attention is down, the reverse is up
    graph = {"attention": {"training"}}
    assert [b for a, t in graph.items() for b in t if _floor(b) > _floor(a)] == ["training"]


def test_the_papers_modules_import_nothing_of_the_data_plumbing():
    graph = _package_imports()
    for name in PAPER:
        assert not graph[name] & {"vocab", "data", "dates"}, (name, graph[name])


def test_the_package_imports_form_no_cycle():
    graph = {k: v for k, v in _package_imports().items() if k != "__init__"}
    state: dict[str, str] = {}

    def visit(node, path):
        if state.get(node) == "done":
            return
        assert state.get(node) != "open", f"import cycle: {' -> '.join(path + [node])}"
        state[node] = "open"
        for nxt in graph.get(node, ()):
            visit(nxt, path + [node])
        state[node] = "done"

    for node in graph:
        visit(node, [])


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_checkpoints_is_one_package_holding_the_format_and_the_shipped_files():
    import transformer_lib as tl
    from transformer_lib import checkpoints

    assert Path(checkpoints.__file__).parent == tl.CHECKPOINTS == checkpoints.CHECKPOINTS
    assert (tl.CHECKPOINTS / "transformer_dates.pt").is_file() and checkpoints.load is checkpoints.format.load


def test_eval_mode_gives_the_model_back_in_the_callers_mode_even_after_an_error():
    import pytest
    import torch

    from transformer_lib.runtime import device_of, eval_mode

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).train()
    with pytest.raises(RuntimeError, match="inside"):
        with eval_mode(model):
            assert not model.training and not model[1].training
            raise RuntimeError("inside")
    assert model.training and model[1].training
    assert device_of(model) == torch.device("cpu")
    assert device_of(torch.nn.ReLU()) == torch.device("cpu")  # no parameters: the CPU
