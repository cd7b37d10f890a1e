"""benchmarks/sweep_claims.py: the claims table, with a sweep on another machine kept beside
the first (`--tag`), and the tag's spelling checked."""

import json

import pytest

BENCHMARK = "sweep_claims"  # loaded by conftest's study fixture


def _sweep(chapter, cpu, values, bound=0.5):
    machine = dict(cpu=cpu, date="2026-01-01 10:00 UTC", commit="aaa", uncommitted=[], torch="2.13.0",
                   native_kernels="AVX512", cores=2, load_before=0.1, load_after=0.2)
    records = [dict(claim="loss", value=v, at_least=None, at_most=bound, seed=s, kernels="native")
               for s, v in enumerate(values)]
    runs = [dict(seed=s, kernels="native", seconds=1.0, claims=1, error=None) for s in range(len(values))]
    return dict(chapter=chapter, machine=machine, runs=runs, records=records)


def test_a_tagged_sweep_is_a_second_row_named_by_its_cpu(study, tmp_path, monkeypatch):
    monkeypatch.setattr(study, "OUT", tmp_path)
    (tmp_path / "ch11.json").write_text(json.dumps(_sweep("11_training.ipynb", "Intel Xeon", [0.1, 0.3])))
    (tmp_path / "ch11-amd-epyc.json").write_text(json.dumps(_sweep("11_training.ipynb", "AMD EPYC", [0.2, 0.49])))
    lines = study.report().splitlines()
    assert "| 11 | loss | ≤ 0.5 | 0.1 | 0.3 | 2 (2 x native) | 40% |" in lines
    assert "| 11 (AMD EPYC) | loss | ≤ 0.5 | 0.2 | 0.49 | 2 (2 x native) | 2% **thin** |" in lines
    notes = [line for line in lines if line.startswith("- `")]
    assert notes[0].startswith("- `ch11-amd-epyc.json`: 2026-01-01 10:00 UTC, commit aaa, AMD EPYC, torch")
    assert "Intel Xeon, torch" in notes[1]


@pytest.mark.parametrize("tag", ["AMD", "amd_epyc", "-amd", "amd--epyc", ""])
def test_a_tag_that_is_not_lower_case_words_joined_by_hyphens_is_refused(study, tag, capsys, monkeypatch):
    swept = []
    monkeypatch.setattr(study, "sweep", lambda *args: swept.append(args))
    with pytest.raises(SystemExit):
        study.main(["11", f"--tag={tag}"])
    assert "--tag: expected lower case letters, digits and hyphens" in capsys.readouterr().err
    assert swept == []  # refused before any chapter runs


def test_a_tag_reaches_the_sweep_and_names_its_file(study, tmp_path, monkeypatch):
    swept = []
    monkeypatch.setattr(study, "sweep", lambda *args: swept.append(args))
    assert study.main(["11", "12", "--seeds", "0-1", "--kernels", "native", "--tag", "amd-epyc"]) == 0
    assert swept == [(11, [0, 1], ["native"], 900, "amd-epyc"), (12, [0, 1], ["native"], 900, "amd-epyc")]
    with pytest.raises(SystemExit):
        study.main(["--report", "--tag", "amd-epyc"])  # a tag without chapters names nothing


def test_a_tagged_sweep_writes_its_own_file(study, tmp_path, monkeypatch):
    monkeypatch.setattr(study, "ROOT", tmp_path)  # the script names its files relative to the root
    monkeypatch.setattr(study, "OUT", tmp_path / "claims")
    monkeypatch.setattr(study, "run_once", lambda path, seed, kernels, log, timeout: 1.0)  # records nothing
    first = study.sweep(11, [0], ["native"], 10)
    tagged = study.sweep(11, [0], ["native"], 10, "amd-epyc")
    assert (first.name, tagged.name) == ("ch11.json", "ch11-amd-epyc.json")
    assert json.loads(tagged.read_text())["machine"]["cpu"]  # the CPU is recorded
