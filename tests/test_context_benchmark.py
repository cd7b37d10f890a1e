"""benchmarks/context.py: one short run records what chapter 16's context-extension study
reports, and the report writes its table between its own markers only."""
import json

import pytest


BENCHMARK = "context"  # loaded by conftest's study fixture


@pytest.fixture(scope="module")
def record(study):
    return study.one_run(seed=0, steps=2, tune_steps=1, lengths=(64,))


def test_a_run_records_every_method_as_trained_and_tuned(study, record):
    from transformer_lib.book.context import METHODS

    assert set(record["loss"]) == set(record["tuned"]) == set(METHODS)
    assert all(set(row) == {"64"} for row in record["loss"].values())
    assert all(0 < value < 10 for row in record["loss"].values() for value in row.values())
    assert (record["seed"], record["steps"], record["tune_steps"]) == (0, 2, 1)
    # the methods differ from plain RoPE past the trained length, not at it
    assert len({round(row["64"], 6) for row in record["loss"].values()}) > 1


def test_the_report_replaces_only_its_own_section(study, record, tmp_path, monkeypatch):
    store = [dict(record, kernels=k) for k in ("default", "avx2")]
    text = study.table(store)
    assert "| plain RoPE |" in text and "2 runs" in text
    assert "(+" in text or "(-" in text  # each method's change from plain RoPE, per run
    results = tmp_path / "RESULTS.md"
    results.write_text("# Report\n\n<!-- other: begin -->\nkept\n<!-- other: end -->\n")
    monkeypatch.setattr(study, "HERE", tmp_path)
    monkeypatch.setattr(study, "STORE", tmp_path / "context.json")
    (tmp_path / "context.json").write_text(json.dumps(store))
    study.write_report()
    written = results.read_text()
    assert "<!-- other: begin -->\nkept\n<!-- other: end -->" in written
    assert written.count("<!-- context study: begin -->") == 1 and "| YaRN |" in written
