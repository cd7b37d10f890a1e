"""Only `transformer_lib.parallel` (chapter 17) needs torch >= 2.10; everything else runs on what
chapters 1-16 use. Importing parallel on an older torch raises an ImportError that says so, and
tests/test_parallel.py is then skipped with that reason. The older torch is played here by
`torch.__version__` in a fresh interpreter."""
import subprocess
import sys

import pytest

from transformer_lib import runtime

OLD = """
import torch
torch.__version__ = "2.9.1"
import transformer_lib, transformer_lib.book  # the library and the book's aids import
from transformer_lib.runtime import TorchTooOld
try:
    import transformer_lib.parallel
except TorchTooOld as err:
    print("refused:", err)
"""


@pytest.mark.slow
def test_parallel_alone_refuses_an_older_torch_and_says_why():
    out = subprocess.run([sys.executable, "-c", OLD], capture_output=True, text=True, check=True).stdout
    assert out.startswith("refused: transformer_lib.parallel (chapter 17) needs torch >= 2.10"), out
    assert "this is torch 2.9.1" in out and "Everything else in transformer_lib works with it" in out


def test_parallel_imports_on_the_pinned_torch_and_states_its_floor():
    if runtime.torch_version() < (2, 10):
        pytest.skip(f"torch {runtime.torch_version()} is older than chapter 17 needs")
    from transformer_lib import parallel

    assert parallel.MIN_TORCH == (2, 10) and runtime.torch_version() >= parallel.MIN_TORCH


def test_require_torch_compares_releases_as_numbers(monkeypatch):
    import torch

    for version, expected in (("2.10.0", (2, 10)), ("2.9.1+cpu", (2, 9)), ("3.0.0a0", (3, 0))):
        monkeypatch.setattr(torch, "__version__", version)
        assert runtime.torch_version() == expected
    monkeypatch.setattr(torch, "__version__", "2.9.1")
    runtime.require_torch((2, 5), "something")  # 2.9 is newer than 2.5
    with pytest.raises(runtime.TorchTooOld, match=r"something needs torch >= 2.10 \(a reason\)"):
        runtime.require_torch((2, 10), "something", "a reason")
