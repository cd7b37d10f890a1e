"""Properties of the package as a whole."""
import subprocess
import sys


def test_the_library_never_imports_the_books_aids():
    # transformer_lib.book (figures, explorer, asides, bug hunt, setup) stands above the library:
    # importing the library loads none of it, and no library module names it
    code = "import sys, transformer_lib; print(sorted(m for m in sys.modules if '.book' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "transformer_lib"
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


def _package_imports() -> dict[str, set[str]]:
    """module -> the package modules it imports (at the top or inside functions), read with ast."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "transformer_lib"
    graph = {}
    for path in root.glob("*.py"):
        name, found = path.stem, set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    found.update(alias.name for alias in node.names)
        graph[name] = found - {name}
    return graph


TEACHING = {"attention", "kv_cache", "positional", "masks", "residual", "layers", "model", "rnn"}


def test_the_teaching_modules_import_only_each_other_and_the_checks():
    # the modules that read like the papers never reach up into training, decoding, interop or drawing
    graph = _package_imports()
    for name in TEACHING:
        # `_checks` validates, `runtime` says which device tensors go to; both import nothing of ours
        assert graph[name] <= TEACHING | {"_checks", "runtime", "vocab"}, (name, graph[name] - TEACHING)


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
