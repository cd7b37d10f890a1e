"""benchmarks/qk_norm.py: a 5-step run records what the QK-norm study reports, the runner resumes
from its store, and the report writes its table between its own markers only."""
import json
import math

import pytest


BENCHMARK = "qk_norm"  # loaded by conftest's study fixture


@pytest.fixture(scope="module")
def records(study):
    return [study.one_run(seed=0, lr=0.1, qk_norm=q, steps=5, warmup=2) for q in (False, True)]


def test_a_run_records_loss_logits_and_entropy_at_every_step(records):
    for r in records:
        assert set(r["curve"]) == {"loss", "max_logit", "min_entropy"}
        assert all(len(c) == 5 for c in r["curve"].values())
        assert r["max_logit"] == max(r["curve"]["max_logit"]) > 0
        assert 0 <= r["min_entropy"] == min(r["curve"]["min_entropy"]) <= math.log(32)
        assert math.isfinite(r["loss"]) and r["failed"] == (r["loss"] > 2.7)
        assert (r["steps"], r["warmup"], r["clip"], r["lr"]) == (5, 2, 1.0, 0.1)
    plain, normed = records
    assert not plain["qk_norm"] and normed["qk_norm"]
    # QK-norm with its initial gains: every logit is at most sqrt(d_k) = 4 at the first step
    assert normed["curve"]["max_logit"][0] <= 4.0


def test_failed_means_not_finite_or_above_the_threshold(study):
    assert study.failed(float("nan")) and study.failed(float("inf")) and study.failed(study.FAILED_ABOVE + 0.01)
    assert not study.failed(study.FAILED_ABOVE - 0.01)


def test_the_runner_resumes_and_the_report_replaces_only_its_own_section(study, records, tmp_path):
    store = tmp_path / "qk_norm.json"
    study.run([0], [0.1], ["native"], steps=2, warmup=1, jobs=1, store_path=store)
    first = json.loads(store.read_text())
    assert sorted(r["qk_norm"] for r in first) == [False, True]
    study.run([0], [0.1], ["native"], steps=2, warmup=1, jobs=1, store_path=store)  # nothing left to do
    assert json.loads(store.read_text()) == first
    store.write_text(json.dumps(first + [dict(r, kernels="avx2") for r in records]))
    results = tmp_path / "RESULTS.md"
    results.write_text("# Report\n\n<!-- other: begin -->\nkept\n<!-- other: end -->\n")
    study.write_report(store, results)
    study.write_report(store, results)  # twice: the section is replaced, not added again
    written = results.read_text()
    assert "<!-- other: begin -->\nkept\n<!-- other: end -->" in written
    assert written.count("<!-- qk-norm study: begin -->") == 1 and written.count("<!-- qk-norm study: end -->") == 1
    assert written.count("| 5, 1.0, 2 | 0.1 | avx2 |") == 2  # plain and QK-norm rows of the 5-step runs
    assert "| 2, 1.0, 1 | 0.1 | native | QK-norm | 0 |" in written
