"""scripts/execute_notebooks.py stores a cell's consecutive printed outputs as one output (one box
on the site, however the kernel flushed them), without reordering anything."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))  # the script imports its neighbour sitetools
spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / "scripts" / "execute_notebooks.py")
execute_notebooks = importlib.util.module_from_spec(spec)
sys.modules["execute_notebooks"] = execute_notebooks
spec.loader.exec_module(execute_notebooks)


def stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def test_consecutive_streams_merge_and_nothing_moves():
    figure = {"output_type": "display_data", "data": {"text/plain": "<Figure>"}, "metadata": {}}
    outputs = [stream("a\n"), stream(["b\n", "c\n"]), stream("warn\n", "stderr"), stream("d\n"),
               figure, stream("e\n"), stream("f\n")]
    merged = [dict(out, text="".join(out["text"])) if "text" in out else out
              for out in execute_notebooks.merge_streams(outputs)]
    assert merged == [stream("a\nb\nc\n"), stream("warn\n", "stderr"), stream("d\n"), figure,
                      stream("e\nf\n")]
    assert execute_notebooks.merge_streams([]) == []
