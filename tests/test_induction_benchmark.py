"""benchmarks/induction.py: one short run records what chapter 18's study reports, and the report
writes its table between its own markers only."""

import pytest


BENCHMARK = "induction"  # loaded by conftest's study fixture


@pytest.fixture(scope="module")
def records(study):
    return [study.one_run(seed=0, n_layers=n, steps=2) for n in (2, 1)]


def test_a_run_records_curves_scores_and_ablations(records):
    two, one = records
    assert two["curve"]["step"] == [0, 2] and len(two["curve"]["repeat"]) == 2
    assert [len(layer["induction"]) for layer in two["heads"]] == [4, 4]
    assert set(two["ablations"]) == {f"{layer}.{head}" for layer in range(2) for head in range(4)}
    assert 0 <= two["induction_head"] < 4 and 0 <= two["previous_head"] < 4
    assert two["phase_change"] is None  # two steps: nothing has formed
    assert "induction_head" not in one and len(one["heads"]) == 1


def test_the_report_replaces_only_its_own_section(study, records, tmp_path, monkeypatch):
    two, one = records
    store = [dict(r, kernels=k, torch="2.13.0+cpu") for r in (two, one) for k in ("default", "avx2")]
    text = study.table(store)
    assert text.count("\n| 0 |") == 2 and "none by 2" in text
    results = tmp_path / "RESULTS.md"
    results.write_text("# Report\n\n<!-- other: begin -->\nkept\n<!-- other: end -->\n")
    monkeypatch.setattr(study, "HERE", tmp_path)
    monkeypatch.setattr(study, "STORE", tmp_path / "induction.json")
    (tmp_path / "induction.json").write_text(__import__("json").dumps(store))
    study.write_report()
    written = results.read_text()
    assert "<!-- other: begin -->\nkept\n<!-- other: end -->" in written
    assert written.count("<!-- induction study: begin -->") == 1 and "| seed |" in written
