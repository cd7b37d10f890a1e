"""Properties of the package as a whole."""
import subprocess
import sys


def test_import_does_not_load_pyplot():
    # pyplot picks a GUI backend and takes time: drawing code imports it on first use only.
    code = "import sys, transformer_lib; print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
