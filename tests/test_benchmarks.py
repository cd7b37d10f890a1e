"""The performance report's scripts (benchmarks/): each replaces only its own section, prints
medians with their spread, measures memory on a steady step, and gpu.py runs on the CPU."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run = _load("run")

FOREIGN = ("recipe study", "parallel", "chapter 16 study", "claims sweep", "gpu", "induction study")


def section_text(text: str, name: str) -> str:
    begin, end = run.markers(name)
    return text.split(begin, 1)[1].split(end, 1)[0]


# Sections and markers ---------------------------------------------------------------------------


def test_replace_section_keeps_everything_else():
    text = ("# R\n\nintro\n<!-- a: begin -->\nold a\n<!-- a: end -->\nmiddle\n"
            "<!-- b: begin -->\nold b\n<!-- b: end -->\ntail\n")
    out = run.replace_section(text, "a", "new a")
    assert out == text.replace("old a", "new a")
    appended = run.replace_section(text, "c", "new c")
    assert appended.startswith(text.rstrip("\n")) and appended.endswith("<!-- c: begin -->\nnew c\n<!-- c: end -->\n")


@pytest.mark.parametrize("bad, message", [
    ("<!-- a: begin -->\nx\n", "only one of its two markers"),
    ("<!-- a: end -->\nx\n<!-- a: begin -->\n", "before its begin marker"),
    ("<!-- a: begin -->\n<!-- a: end -->\n<!-- a: begin -->\n<!-- a: end -->\n", "more than once"),
])
def test_replace_section_refuses_broken_markers(bad, message):
    with pytest.raises(ValueError, match=message):
        run.replace_section(bad, "a", "new")


def test_committed_report_has_every_section_once():
    text = (BENCH / "RESULTS.md").read_text()
    names = [run.SUMMARY, *(part[1] for part in run.PARTS.values()), *FOREIGN]
    for name in names:
        begin, end = run.markers(name)
        assert text.count(begin) == 1 and text.count(end) == 1, f"section {name!r} needs exactly one pair of markers"
        assert text.index(begin) < text.index(end)
    assert text.index(run.markers(run.SUMMARY)[0]) < text.index(run.markers("chapters")[0]), "the summary comes first"


def test_report_rewrites_only_its_sections(tmp_path):
    """`run.py --report` (what every part ends with) leaves the other scripts' sections as they are,
    and a part with no JSON yet names the command that measures it."""
    before = (BENCH / "RESULTS.md").read_text()
    (tmp_path / "RESULTS.md").write_text(before)
    assert run.main(["--report", "--output-dir", str(tmp_path)]) == 0
    after = (tmp_path / "RESULTS.md").read_text()
    for name in FOREIGN:
        assert section_text(after, name) == section_text(before, name), f"section {name!r} was changed"
    for part, (json_name, name, command) in run.PARTS.items():
        assert not (tmp_path / json_name).exists()
        assert command in section_text(after, name), f"the empty {part} section must give its command"
    summary = section_text(after, run.SUMMARY)
    assert "How long does `make test` take?" in summary and run.PARTS["make-test"][2] in summary
    # and a second pass changes nothing
    run.main(["--report", "--output-dir", str(tmp_path)])
    assert (tmp_path / "RESULTS.md").read_text() == after


# Statistics -------------------------------------------------------------------------------------


def test_spread_and_ratios():
    s = run.spread([0.5, 0.1, 0.3, 0.2, 0.4])
    assert (s["n"], s["median"], s["min"], s["max"]) == (5, 0.3, 0.1, 0.5)
    assert s["q1"] == pytest.approx(0.2) and s["q3"] == pytest.approx(0.4)
    assert run.fmt_time(s) == "300.0 (100.0-500.0)"
    close = run.spread([0.31, 0.12, 0.33, 0.22, 0.41])
    far = run.spread([1.0, 1.1, 0.9, 1.05, 0.95])
    assert run.fmt_ratio(close, s).startswith("≈1 ("), "overlapping interquartile ranges are not told apart"
    assert run.fmt_ratio(far, s) == "3.33x"
    assert run.fmt_ratio(s, far) == "0.30x"


def test_provenance_line_says_when_what_and_how():
    meta = {"date": "2026-11-26 10:00", "commit": "abc", "dirty": True, "command": "make bench", "quick": False,
            "machine": {"cpu": "CPU", "cores": 2, "torch": "2.13.0", "kernels": "AVX2"}, "wait_policy": "PASSIVE",
            "load_median": 2.0, "load_max": 3.0, "max_load": 1.5}
    line = run.provenance(meta)
    for part in ("2026-11-26 10:00", "`abc` plus uncommitted changes", "`make bench`", "wait policy PASSIVE",
                 "median 2.0", "times are inflated"):
        assert part in line
    quiet = run.provenance({**meta, "load_max": 1.0, "dirty": False})
    assert "inflated" not in quiet and "uncommitted" not in quiet


def test_reader_env_unsets_the_wait_policy(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert "OMP_WAIT_POLICY" not in run.reader_env()
    assert run.reader_env(OMP_WAIT_POLICY="PASSIVE")["OMP_WAIT_POLICY"] == "PASSIVE"
    assert run.wait_policy(run.reader_env()).startswith("default")


# What the parts measure --------------------------------------------------------------------------


def test_explicit_attention_holds_the_score_tables():
    """The tensor counter sees what the explicit path stores and the fused one does not: at
    least two (B, h, T, T) float32 tables more (the weights autograd keeps, and a gradient)."""
    from transformer_lib.memory import peak_tensor_memory

    length, d_model = 256, 32
    peaks = {}
    for impl in ("tl_explicit", "tl_fused"):
        step, clear = run.attention_step(impl, d_model, length, batch=4, heads=2)
        step()
        clear()
        with peak_tensor_memory() as mem:
            step()
        clear()
        peaks[impl] = mem.peak
    table = 4 * 2 * length * length * 4
    assert peaks["tl_explicit"] - peaks["tl_fused"] >= 2 * table, peaks


def test_attention_child_reports_steady_memory_and_spread():
    out = subprocess.run([sys.executable, str(BENCH / "run.py"), "--attention-config",
                          json.dumps(["tl_explicit", 32, 256, 1, 5, 0.1])],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["time"]["n"] >= run.MIN_REPS and row["time"]["min"] <= row["time"]["median"] <= row["time"]["max"]
    tables = run.BATCH * run.HEADS * 256 * 256 * 4  # one (B, h, T, T) float32 table: 8.4 MB
    assert row["tensor_peak_bytes"] >= 3 * tables
    if row["rss_exact"]:  # glibc and /proc/self/clear_refs: the resident set follows the step's tensors
        assert 0.5 * row["tensor_peak_bytes"] <= row["rss_peak_bytes"] <= 3 * row["tensor_peak_bytes"], row


def test_date_step_same_size_and_no_mask_conversion():
    """The two models of the step table differ only by nn.Transformer's two final LayerNorms,
    and PyTorch's gets masks it need not convert (no deprecation warning on a step)."""
    _, ours = run.date_step("transformer_lib", n_batches=1, batch_size=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step, theirs = run.date_step("nn.Transformer", n_batches=1, batch_size=8)
        step(0)
    d_model = 64
    assert theirs - ours == 2 * 2 * d_model
    assert not [w for w in caught if "mask" in str(w.message).lower()], [str(w.message) for w in caught]
    with pytest.raises(ValueError, match="impl must be"):
        run.date_step("keras")


def test_chapter_cell_times_from_nbclient_timestamps():
    cell = {"metadata": {"execution": {"iopub.execute_input": "2026-11-26T10:00:00.250000Z",
                                       "shell.execute_reply": "2026-11-26T10:00:02.000000Z"}}}
    assert run.cell_seconds(cell) == pytest.approx(1.75)
    assert run.cell_seconds({"metadata": {}}) is None


# The other scripts' sections ---------------------------------------------------------------------


def test_parallel_section_same_statistic_for_every_row():
    from transformer_lib.runtime import torch_version

    if torch_version() < (2, 10):  # the parallel code needs 2.10: below it, it says so by name
        with pytest.raises(ImportError, match=r"needs torch >= 2\.10"):
            _load("parallel")
        return
    parallel = _load("parallel")
    rows = {key: run.spread([0.1 * (i + 1) + 0.001 * j for j in range(5)]) for i, key in enumerate(parallel.ROWS)}
    data = {"meta": {"date": "2026-11-26 10:00", "commit": "abc", "dirty": False, "command": parallel.COMMAND,
                     "rounds": 5, "steps": 20, "wait_policy": "default (OMP_WAIT_POLICY unset)", "parameters": 173711,
                     "load": {"1p1t": 0.5, "end": 0.6}},
            "rows": rows, "all_reduce": run.spread([0.0006] * 5)}
    text = "\n".join(parallel.section(data))
    for label in parallel.ROWS.values():
        assert f"| {label} | " in text
    assert "5 rounds" in text and "2026-11-26 10:00" in text and parallel.COMMAND in text
    assert "inflated" not in text
    assert "inflated" in "\n".join(parallel.section({**data, "meta": {**data["meta"], "load": {"x": 3.0}}}))
    assert parallel.COMMAND in "\n".join(parallel.section(None))


def test_gqa_speed_models_are_matched_in_size():
    modern = _load("modern_decoder")
    from transformer_lib import lm

    models = modern.speed_models()
    counts = {h: lm.layer_parameters(m) for h, m in models.items()}
    per_unit = 3 * 256 * 4  # one more SwiGLU hidden unit: 3 d_model weights in each of 4 layers
    for h in (2, 1):
        assert models[h].config.n_kv_heads == h
        assert abs(counts[h] - counts[8]) <= per_unit / 2, counts


# gpu.py on the CPU -------------------------------------------------------------------------------


def test_gpu_script_runs_on_the_cpu(tmp_path):
    (tmp_path / "RESULTS.md").write_text((BENCH / "RESULTS.md").read_text())
    out = subprocess.run([sys.executable, str(BENCH / "gpu.py"), "--device", "cpu", "--quick", "--report",
                          "--lengths", "32", "64", "--flash-block", "16", "--threads", "1",
                          "--output-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    data = json.loads((tmp_path / "gpu.json").read_text())
    assert data["card"]["device"] == "cpu" and data["card"]["torch"] == torch.__version__
    att = data["attention"]
    assert {(r["impl"], r["length"]) for r in att} == {(i, L) for i in ("explicit", "flash", "sdpa") for L in (32, 64)}
    assert all("time" in r and r["time"]["n"] >= run.MIN_REPS and r["peak_bytes"] > 0 for r in att)
    by = {(r["impl"], r["length"]): r for r in att}
    assert by["explicit", 64]["peak_bytes"] > by["flash", 64]["peak_bytes"], "the explicit path stores T x T tables"
    assert data["meta"]["flash_block"] == 16
    assert [r["new_tokens"] for r in data["cache"]["rows"]] == [32, 64]
    assert all(r["speedup"] > 0 for r in data["cache"]["rows"])
    assert {r["impl"] for r in data["step"]["rows"] if "time" in r} == {"transformer_lib", "nn.Transformer"}
    text = (tmp_path / "RESULTS.md").read_text()
    gpu = section_text(text, "gpu")
    assert "## On a GPU" in gpu and "Quick settings" in gpu and "| 64 |" in gpu
    assert data["summary"] in section_text(text, run.SUMMARY)
    before = (BENCH / "RESULTS.md").read_text()
    assert section_text(text, "recipe study") == section_text(before, "recipe study")


def test_gpu_script_skips_what_does_not_fit():
    """A size estimated not to fit, or to take too long, is skipped and listed with the longer
    lengths of that implementation, never a crash."""
    gpu = _load("gpu")

    class Small(gpu.Device):
        def free_bytes(self):
            return 6e6  # the explicit path at T = 32 needs about 8.4 MB (4 tables of 32 x 8 x 32^2 x 4 bytes)

    rows = gpu.bench_attention(Small("cpu"), (16, 32, 64), (16,), 16, max_step_seconds=1e-9, log=lambda _: None)
    by = {(r["impl"], r["length"]): r for r in rows}
    assert "time" in by["explicit", 16] and "time" in by["sdpa", 16]
    assert by["explicit", 32]["skipped"].startswith("estimated") and "free" in by["explicit", 32]["skipped"]
    assert by["explicit", 64]["skipped"].startswith("skipped at T = 32")
    assert by["sdpa", 32]["skipped"].startswith("estimated") and "a step" in by["sdpa", 32]["skipped"]
    text = "\n".join(gpu.section({"meta": {"date": "d", "commit": "c", "dirty": False, "seconds": 1, "command": "x",
                                           "flash_block": 64},
                                  "card": {"name": "CPU", "torch": "t", "threads": 1}, "attention": rows}))
    assert "Skipped sizes" in text and "T = 32" in text


def test_remeasuring_some_chapters_replaces_only_their_rows_and_says_when():
    meta = dict(date="2026-01-01 10:00", commit="aaa", dirty=False, load_median=0.5, load_max=0.9)
    row = lambda name, seconds: dict(notebook=name, seconds=seconds)  # noqa: E731
    earlier = {"meta": dict(meta), "rows": [row("01_a.ipynb", 10.0), row("02_b.ipynb", 20.0), row("03_c.ipynb", 5.0)]}
    now = {"meta": dict(meta, date="2026-01-02 11:00", commit="bbb", load_max=1.2), "rows": [row("02_b.ipynb", 15.0)]}
    merged = run.merge_chapters(earlier, now)
    assert [(r["notebook"], r["seconds"]) for r in merged["rows"]] == [
        ("01_a.ipynb", 10.0), ("02_b.ipynb", 15.0), ("03_c.ipynb", 5.0)]
    assert merged["meta"]["date"] == "2026-01-01 10:00"  # the table's own run keeps its provenance
    assert merged["meta"]["remeasured"] == [dict(notebooks=["02_b.ipynb"], date="2026-01-02 11:00", commit="bbb",
                                                 dirty=False, load_median=0.5, load_max=1.2,
                                                 replaced={"02_b.ipynb": 20.0})]
    assert earlier["meta"].get("remeasured") is None  # the inputs are left as they were
    assert "in place of 20.0 s" in run.remeasured_text(merged["meta"]["remeasured"][0])


def test_a_full_run_of_the_chapters_keeps_the_table_it_replaces():
    meta = dict(date="2026-01-01 10:00", commit="aaa", dirty=False, load_median=0.5, load_max=0.9)
    row = lambda name, seconds: dict(notebook=name, seconds=seconds)  # noqa: E731
    first = {"meta": dict(meta), "rows": [row("01_a.ipynb", 10.0), row("02_b.ipynb", 80.0)]}
    second = {"meta": dict(meta, date="2026-01-02 11:00", commit="bbb"), "rows": [row("01_a.ipynb", 12.0),
                                                                                 row("02_b.ipynb", 60.0)]}
    third = {"meta": dict(meta, date="2026-01-03 12:00", commit="ccc"), "rows": [row("01_a.ipynb", 11.0),
                                                                                row("02_b.ipynb", 70.0)]}
    table = run.keep_earlier_run(run.keep_earlier_run(first, second), third)
    assert table["rows"] == third["rows"] and table["meta"]["commit"] == "ccc"  # the newest run is the table
    runs = table["meta"]["earlier_full_runs"]
    assert [(r["date"], r["total"], r["over"]) for r in runs] == [
        ("2026-01-01 10:00", 90.0, {"02_b.ipynb": 80.0}), ("2026-01-02 11:00", 72.0, {})]
    assert runs[0]["seconds"] == {"01_a.ipynb": 10.0, "02_b.ipynb": 80.0}
    text = run.earlier_runs_text(table["meta"])
    assert "over 75 s: 02_b.ipynb (80 s)" in text and "every chapter within 75 s" in text
    assert "on an unrecorded CPU" in text  # these metas name no machine
    named = run.keep_earlier_run(dict(first, meta=dict(meta, machine=dict(cpu="AMD EPYC"))), second)
    assert run.earlier_runs_text(named["meta"]).count("on AMD EPYC (load median") == 1
    assert "earlier_full_runs" not in first["meta"] and "earlier_full_runs" not in second["meta"]


def test_a_new_make_test_measurement_keeps_the_one_it_replaces():
    machine = lambda cpu: dict(cpu=cpu, cores=2)  # noqa: E731
    meta = dict(date="2026-01-01 10:00", commit="aaa", dirty=False, load_median=0.5, load_max=0.9,
                machine=machine("Intel"))
    row = lambda target, seconds, rc=0: dict(target=target, seconds=seconds, returncode=rc)  # noqa: E731
    first = {"meta": dict(meta), "rows": [row(run.FRESH_ENV, 60.0), row("lint", 6.0), row("test-unit", 54.0)]}
    second = {"meta": dict(meta, date="2026-01-02 11:00", commit="bbb", machine=machine("AMD")),
              "rows": [row("lint", 6.0), row("test-unit", 114.0, rc=2)]}
    third = {"meta": dict(meta, date="2026-01-03 12:00", commit="ccc"), "rows": [row("lint", 5.0)]}
    table = run.keep_earlier_make_test(run.keep_earlier_make_test(first, second), third)
    assert table["rows"] == third["rows"] and table["meta"]["commit"] == "ccc"  # the newest is the table
    runs = table["meta"]["earlier_runs"]
    assert [(r["date"], r["cpu"], r["seconds"], r["fresh_seconds"], r["failed"]) for r in runs] == [
        ("2026-01-01 10:00", "Intel", 60.0, 120.0, []), ("2026-01-02 11:00", "AMD", 120.0, None, ["test-unit"])]
    text = run.earlier_make_test_text(table["meta"])
    assert "on Intel (load median 0.5): 1.0 min, 2.0 min on a fresh clone;" in text
    assert "on AMD (load median 0.5): 2.0 min, failed: test-unit." in text
    assert run.earlier_make_test_text(first["meta"]) == "" and "earlier_runs" not in second["meta"]


def test_the_growth_exponents_fit_times_below_a_second():
    # time ~ T^2 in seconds (all below 1 s), tensor bytes ~ T, resident bytes ~ T^2
    lengths = (256, 512, 1024)
    by = {(impl, 128, L): {"time": {"median": 1e-7 * L ** 2}, "tensor_peak_bytes": 1000 * L,
                           "rss_peak_bytes": 10 * L ** 2}
          for impl in run.IMPLEMENTATIONS for L in lengths}
    rows = [line for line in run.growth_section(by, (128,), lengths) if line.startswith("| transformer_lib")]
    assert rows and all(" | 128 | 2.00 | 1.00 | 2.00 | 256 to 1024 |" in line for line in rows)


def test_an_earlier_run_over_the_books_budget_says_so_and_a_merge_across_cpus_is_refused():
    machine = lambda cpu: dict(cpu=cpu, cores=2)  # noqa: E731
    meta = dict(date="2026-01-01 10:00", commit="aaa", dirty=False, load_median=0.5, load_max=0.9,
                machine=machine("Intel"))
    row = lambda name, seconds: dict(notebook=name, seconds=seconds)  # noqa: E731
    slow = {"meta": dict(meta), "rows": [row("01_a.ipynb", 300.0), row("02_b.ipynb", 70.0)]}
    quick = {"meta": dict(meta, date="2026-01-02 11:00", machine=machine("AMD")), "rows": [row("01_a.ipynb", 9.0)]}
    text = run.earlier_runs_text(run.keep_earlier_run(slow, quick)["meta"])
    assert f"on Intel (load median 0.5): 370 s in all, over the {run.BOOK_SECONDS / 60:g}-minute budget," in text
    assert "over the" not in run.earlier_runs_text(run.keep_earlier_run(quick, slow)["meta"])  # 9 s: within
    with pytest.raises(ValueError, match="measured on Intel and these chapters on AMD"):
        run.merge_chapters(slow, quick)
    assert run.merge_chapters(slow, dict(quick, meta=dict(quick["meta"], machine=machine("Intel"))))["rows"][0] \
        == row("01_a.ipynb", 9.0)


def test_a_growth_fit_over_a_zero_is_not_a_number():
    lengths = (256, 512)
    by = {(impl, 128, L): {"time": {"median": 0.1 * L}, "tensor_peak_bytes": L, "rss_peak_bytes": 0}
          for impl in run.IMPLEMENTATIONS for L in lengths}
    rows = [line for line in run.growth_section(by, (128,), lengths) if line.startswith("| transformer_lib")]
    assert rows and all(" | 128 | 1.00 | 1.00 | nan | 256 to 512 |" in line for line in rows)
