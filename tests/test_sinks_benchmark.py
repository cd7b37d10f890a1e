"""benchmarks/sinks.py: a short run records the sink scores and the streaming losses, a rerun
skips what is stored, and the report writes its tables between its own markers only."""
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


BENCHMARK = "sinks"  # loaded by conftest's study fixture


@pytest.fixture(scope="module")
def stored(study, tmp_path_factory):
    folder = tmp_path_factory.mktemp("sinks")
    store = folder / "sinks.json"
    study.STORE = store
    try:
        study.run([0], ["native"], [5], ["RoPE"], jobs=1, max_windows=4)
        first = json.loads(store.read_text())
        study.run([0], ["native"], [5], ["RoPE"], jobs=1, max_windows=4)  # nothing left to do
        again = json.loads(store.read_text())
    finally:
        study.STORE = BENCH / "sinks.json"
    return folder, first, again


def test_a_run_records_scores_and_losses(stored):
    _, (record,), again = stored
    assert len(again) == 1
    assert record["steps"] == 5 and record["variant"] == "RoPE" and record["windows"] == [4, 4]
    assert [len(layer) for layer in record["sink_first"]] == [4, 4]
    assert all(0 <= a <= b <= 1 for l1, l4 in zip(record["sink_first"], record["sink_first4"])
               for a, b in zip(l1, l4))
    assert record["uniform_first"] < record["uniform_first4"] < 1
    assert set(record["losses"]) == {"full_in_range", "full", "banded", "recent", "sinks"}
    assert all(0 < x < 10 for x in record["losses"].values())


def test_the_report_replaces_only_its_own_section(study, stored, monkeypatch):
    folder, store, _ = stored
    store = store + [dict(r, kernels="avx2") for r in store]
    text = study.table(store)
    assert "| RoPE | 5 | 2 (0; avx2, native) |" in text
    results = folder / "RESULTS.md"
    results.write_text("# Report\n\n<!-- other: begin -->\nkept\n<!-- other: end -->\n")
    (folder / "sinks.json").write_text(json.dumps(store))
    monkeypatch.setattr(study, "HERE", folder)
    monkeypatch.setattr(study, "STORE", folder / "sinks.json")
    study.write_report()
    study.write_report()  # twice: still one section
    written = results.read_text()
    assert "<!-- other: begin -->\nkept\n<!-- other: end -->" in written
    assert written.count("<!-- sinks study: begin -->") == 1 and written.count("| variant |") == 2
