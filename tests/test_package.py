"""Properties of the package as a whole."""
import subprocess
import sys


def test_import_does_not_load_pyplot():
    # pyplot picks a GUI backend and takes time: drawing code imports it on first use only.
    code = "import sys, transformer_lib; print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_public_names_exist_and_from_torch_is_exported():
    import transformer_lib as tl

    missing = [name for name in tl.__all__ if name != "AttentionExplorer" and not hasattr(tl, name)]
    assert not missing, f"__all__ names what the package lacks: {missing}"
    assert {"from_torch", "AddNorm", "interop", "residual"} <= set(tl.__all__)
    assert tl.from_torch is tl.interop.from_torch and tl.AddNorm is tl.residual.AddNorm
