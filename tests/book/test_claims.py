"""book.claim: a measured value held against its bound, and the sweep's record of it."""
import json

import pytest
import torch

from transformer_lib import book
from transformer_lib.book import claims


def test_a_claim_that_holds_returns_true_and_one_that_fails_says_what_and_by_how_much(monkeypatch):
    monkeypatch.delenv(claims.LOG_VARIABLE, raising=False)
    assert book.claim("ratio", 1.6, at_least=1.3)
    assert book.claim("ratio", torch.tensor(1.6), at_least=1.3, at_most=2.0)
    with pytest.raises(AssertionError, match=r"claim 'ratio' does not hold here: measured 1.2, .*at least 1.3"):
        book.claim("ratio", 1.2, at_least=1.3)
    with pytest.raises(AssertionError, match="at most 2"):
        book.claim("ratio", 2.5, at_least=1.3, at_most=2.0)
    with pytest.raises(AssertionError, match="measured nan"):
        book.claim("ratio", float("nan"), at_most=2.0)  # NaN never satisfies a bound


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(name="", value=1.0, at_least=0.0), ValueError, "name"),
    (dict(name="x", value=1.0), ValueError, "at_least, at_most or both"),
    (dict(name="x", value=1.0, at_least=2.0, at_most=1.0), ValueError, "above at_most"),
    (dict(name="x", value="1.0", at_least=0.0), TypeError, "must be a number"),
    (dict(name="x", value=True, at_least=0.0), TypeError, "must be a number"),
    (dict(name="x", value=torch.ones(2), at_least=0.0), ValueError, r"shape \(2,\)"),
])
def test_bad_arguments_are_refused_by_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        book.claim(**kwargs)


def test_under_the_sweep_every_claim_is_recorded_and_none_raises(tmp_path, monkeypatch):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(claims.LOG_VARIABLE, str(log))
    monkeypatch.setenv(claims.SEED_VARIABLE, "3")
    monkeypatch.setenv("TL_CHAPTER", "12")
    book.setup(seed=0, threads=1, plots=False)
    assert book.seed() == 3 and book.seed(2) == 5
    assert book.claim("holds", 1.6, at_least=1.3)
    assert book.claim("fails", 1.0, at_least=1.3)  # recorded, not raised
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["claim"], r["holds"], r["seed"], r["chapter"]) for r in rows] == [
        ("holds", True, 3, "12"), ("fails", False, 3, "12")]
    assert rows[1]["value"] == 1.0 and rows[1]["at_least"] == 1.3 and rows[1]["at_most"] is None


def test_the_seed_variable_is_checked_and_the_cells_seed_is_used_without_it(monkeypatch):
    monkeypatch.setenv(claims.SEED_VARIABLE, "three")
    with pytest.raises(ValueError, match="TL_SEED must be a non-negative integer"):
        book.setup(seed=0, threads=1, plots=False)
    monkeypatch.delenv(claims.SEED_VARIABLE)
    book.setup(seed=7, threads=1, plots=False)
    assert book.seed() == 7
    with pytest.raises(ValueError, match="offset"):
        book.seed(-1)
    book.setup(seed=0, threads=1, plots=False)
