"""The claims sweep: every run-dependent claim of the chapters, measured over seeds and kernel sets.

    python benchmarks/sweep_claims.py 12                  # chapter 12: seeds 0-4 x default, avx2
    python benchmarks/sweep_claims.py 11 12 --seeds 0-5 --kernels default avx2 native
    python benchmarks/sweep_claims.py --report            # rewrite RESULTS.md's table from claims/

A chapter states each claim about a run (training, decoding with an under-trained model,
sampling, a timing ratio) as `assert book.claim(name, value, at_least=..., at_most=...)`
(`transformer_lib/book/claims.py`). This script runs the chapter top to bottom in a fresh
kernel once per seed and kernel set, with `TL_SEED` (the seed `book.setup` uses instead of the
setup cell's) and `ATEN_CPU_CAPABILITY` (PyTorch's kernel set: `default`, `avx2`, `avx512`;
`native` leaves it unset, the machine's own), and `TL_CLAIMS_LOG`, so that every claim records
its value instead of raising. The notebook file is not changed.

For each chapter it writes `benchmarks/claims/chNN.json`: every recorded value, with the date,
the commit, the CPU, the machine's own kernel set, the torch version and the load. With `--tag
NAME` (a sweep on another machine) it writes `chNN-NAME.json` instead, kept beside the first; the
report labels its rows with that machine's CPU. `--report` gathers
those files into the table between the claims markers of `benchmarks/RESULTS.md`: for each
claim, its bound, the lowest and highest value seen, the number of runs, and the margin (how
far the worst run stayed inside the bound, as a fraction of the bound). A claim whose worst run
sits closer than `MIN_MARGIN` to its bound is flagged: tighten the claim, not the runs.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import cpu_name  # noqa: E402  (benchmarks/ is the script's folder)
from seeds import parse_seeds  # noqa: E402

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from sitetools import this_interpreter_kernels  # noqa: E402

CHAPTERS = ROOT / "chapters"
OUT = Path(__file__).resolve().parent / "claims"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
BEGIN, END = "<!-- claims sweep: begin -->", "<!-- claims sweep: end -->"
#: A claim's worst run must stay at least this far inside its bound (relative to the bound).
MIN_MARGIN = 0.05


def chapter_path(number: int) -> Path:
    found = sorted(CHAPTERS.glob(f"{number:02d}_*.ipynb"))
    if not found:
        raise SystemExit(f"no chapter {number:02d} in {CHAPTERS}")
    return found[0]


def run_once(path: Path, seed: int, kernels: str, log: Path, timeout: int) -> float:
    """Execute the notebook once (outputs discarded) with the sweep's environment."""
    env = dict(os.environ, TL_SEED=str(seed), TL_CLAIMS_LOG=str(log), TL_CHAPTER=path.name[:2])
    env.pop("ATEN_CPU_CAPABILITY", None)
    if kernels != "native":
        env["ATEN_CPU_CAPABILITY"] = kernels
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name="python3", kernel_spec_manager=this_interpreter_kernels())
    client = NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(CHAPTERS)}})
    start = time.perf_counter()
    try:
        km.start_kernel(env=env)
        client.execute()
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    return time.perf_counter() - start


def machine() -> dict:
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                            capture_output=True, text=True).stdout.splitlines()
    changed = [line[3:] for line in status if not line[3:].startswith("benchmarks/")]  # what the runs ran
    return {"cpu": cpu_name(), "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit,
            "uncommitted": changed,
            "torch": torch.__version__, "native_kernels": torch.backends.cpu.get_cpu_capability(),
            "cores": os.cpu_count(), "load_before": round(os.getloadavg()[0], 2)}


def sweep(number: int, seeds: list[int], kernel_sets: list[str], timeout: int, tag: str | None = None) -> Path:
    path = chapter_path(number)
    info = machine()
    records, runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for kernels in kernel_sets:
            for seed in seeds:
                log = Path(tmp) / f"{kernels}-{seed}.jsonl"
                print(f"{path.name}: seed {seed}, kernels {kernels} ...", flush=True)
                try:
                    seconds = run_once(path, seed, kernels, log, timeout)
                    error = None
                except Exception as err:  # a cell raised: keep what was recorded, say so
                    seconds, error = None, f"{type(err).__name__}: {str(err).splitlines()[-1][:300]}"
                    print(f"  failed: {error}", flush=True)
                got = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
                for r in got:
                    r["kernels"] = kernels  # the set asked for (`native` = the machine's own)
                records.extend(got)
                runs.append({"seed": seed, "kernels": kernels, "seconds": seconds, "claims": len(got),
                             "error": error})
    info["load_after"] = round(os.getloadavg()[0], 2)
    OUT.mkdir(exist_ok=True)
    target = OUT / (f"ch{number:02d}.json" if tag is None else f"ch{number:02d}-{tag}.json")
    target.write_text(json.dumps({"chapter": path.name, "machine": info, "runs": runs,
                                  "records": records}, indent=1) + "\n")
    print(f"wrote {target.relative_to(ROOT)}: {len(records)} values from {len(runs)} runs")
    return target


def margin(row: dict) -> float:
    """How far the worst value stayed inside the bound, relative to the bound (negative: outside)."""
    out = []
    if row["at_least"] is not None:
        out.append((row["lo"] - row["at_least"]) / (abs(row["at_least"]) or 1e-12))
    if row["at_most"] is not None:
        out.append((row["at_most"] - row["hi"]) / (abs(row["at_most"]) or 1e-12))
    return min(out)


def summarise(data: dict) -> list[dict]:
    rows: dict[str, dict] = {}
    for r in data["records"]:
        row = rows.setdefault(r["claim"], {"claim": r["claim"], "at_least": r["at_least"],
                                           "at_most": r["at_most"], "values": [], "kernels": set(),
                                           "seeds": set()})
        row["values"].append(r["value"])
        row["kernels"].add(r["kernels"])
        row["seeds"].add(r["seed"])
    for row in rows.values():
        row["lo"], row["hi"], row["n"] = min(row["values"]), max(row["values"]), len(row["values"])
        row["margin"] = margin(row)
    return list(rows.values())


def fmt(x: float) -> str:
    return f"{x:.4g}"


def report() -> str:
    lines = ["| chapter | claim | bound | lowest | highest | runs (seeds x kernel sets) | margin |",
             "| --- | --- | --- | ---: | ---: | --- | ---: |"]
    notes = []
    for path in sorted(OUT.glob("ch*.json")):
        data = json.loads(path.read_text())
        m = data["machine"]
        failed = [r for r in data["runs"] if r["error"]]
        tag = path.stem.split("-", 1)[1] if "-" in path.stem else None  # a tagged sweep: another machine
        where = f" ({m.get('cpu') or tag})" if tag else ""
        notes.append(f"- `{path.name}`: {m['date']}, commit {m['commit']}"
                     + (f" plus uncommitted changes to {', '.join(m['uncommitted'])}" if m.get("uncommitted") else "")
                     + (f", {m['cpu']}" if m.get("cpu") else "") + f", torch {m['torch']}, this machine's "
                     f"own kernels {m['native_kernels']}, load {m['load_before']}-{m['load_after']}"
                     + (f"; {len(failed)} run(s) stopped early: " + "; ".join(
                         f"seed {r['seed']} {r['kernels']}: {r['error']}" for r in failed) if failed else "")
                     + (f". {m['note']}" if m.get("note") else "")
                     + "".join(f" Retired, so not in the table (its {len(r['records'])} records kept under"
                               f" `retired`): {r['claim']!r}." for r in data.get("retired", [])))
        for row in summarise(data):
            bound = " and ".join(f"{w} {fmt(b)}" for w, b in (("≥", row["at_least"]), ("≤", row["at_most"]))
                                 if b is not None)
            flag = "" if row["margin"] >= MIN_MARGIN else " **thin**"
            lines.append(f"| {data['chapter'][:2]}{where} | "
                         f"{row['claim']} | {bound} | {fmt(row['lo'])} | {fmt(row['hi'])} | "
                         f"{row['n']} ({len(row['seeds'])} x {', '.join(sorted(row['kernels']))}) | "
                         f"{row['margin']:.0%}{flag} |")
    return "\n".join(lines + [""] + notes)


def write_report() -> None:
    text = RESULTS.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{RESULTS.name} has no claims markers ({BEGIN} ... {END})")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    RESULTS.write_text(head + BEGIN + "\n" + report() + "\n" + END + tail)
    print(f"rewrote the claims table in {RESULTS.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", type=int, help="chapter numbers to sweep")
    parser.add_argument("--seeds", default="0-4", help="seeds, e.g. 0-4 or 0,2,5 (default 0-4)")
    parser.add_argument("--kernels", nargs="+", default=["default", "avx2"],
                        help="kernel sets: default, avx2, avx512, native (default: default avx2)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed per cell")
    parser.add_argument("--tag", help="write claims/chNN-TAG.json instead of chNN.json: a sweep on another"
                        " machine, kept beside the first (lower case letters, digits and hyphens)")
    parser.add_argument("--report", action="store_true", help="rewrite RESULTS.md's claims table")
    args = parser.parse_args(argv)
    if not args.chapters and not args.report:
        parser.error("name chapters to sweep, or --report")
    if args.tag is not None and not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", args.tag):
        parser.error(f"--tag: expected lower case letters, digits and hyphens, got {args.tag!r}")
    if args.tag is not None and not args.chapters:
        parser.error("--tag names the files of a sweep: name the chapters to sweep")
    for number in args.chapters:
        sweep(number, parse_seeds(args.seeds), args.kernels, args.timeout, args.tag)
    if args.report:
        write_report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
