"""The recipe study: what gets the date model to 99% held-out exact match in the fewest steps,
and which stopping rule stops there safely (issue 29).

    python benchmarks/recipe.py run --seeds 0-9                # every setting, 1 thread, CPU
    python benchmarks/recipe.py run --seeds 0-4 --only paper grouped --device cuda
    python benchmarks/recipe.py report                         # the tables, from recipe.json
    python benchmarks/recipe.py step-time                      # ms a step, random and grouped batches

`run` trains the book's date model (`tl.Transformer`, `recipes.DATE_MODEL`) with `tl.train`
from seed s for a fixed number of steps (no stopping), once per setting: the batches (shuffled,
or grouped by source length), the schedule's decay after the peak. Every 100 steps it counts
greedy exact match (`training.evaluate`, one teacher-forced pass) on three sets of dates for
several versions of the weights: the raw weights, the average of the last k weight snapshots
taken at those evaluations (`training.average_weights`; the paper's section 6.1 averages the last
5 checkpoints), and an exponential moving average of the weights. The sets: the 1,000 evenly
spread validation dates of the quick check, the other 2,652 validation dates, and the 3,652
test dates. The weight averages do not change training, so one run holds every version's
trajectory, and a stopping rule ("stop when the quick check reaches a and the other validation
dates reach b") can be replayed on the trajectories afterwards: `report` does that for each
rule and version and prints where each seed would stop and what it would score on the test set.

Steps are deterministic for a seed, thread count, kernel set and torch version (on a GPU, close
to it); seconds are not, so the study counts steps, and `step-time` measures what a step costs
on this machine, with random and with length-grouped batches (OpenMP's default wait policy, as
a reader's notebook runs). Writes benchmarks/recipe.json (runs are added; a run already there is
skipped) and the section between the recipe markers of benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import statistics
import time
from pathlib import Path

from seeds import parse_seeds  # noqa: E402  (benchmarks/ is the script's folder)

import torch

import transformer_lib as tl
from transformer_lib import training
from transformer_lib.data import date_vocabs, make_date_splits
from transformer_lib.recipes import DATE_MODEL, evenly_spaced
from transformer_lib.schedules import factor_for_peak
from transformer_lib.training import TrainConfig, average_weights, evaluate, seq2seq_loss, train
from transformer_lib.vocab import collate, make_loader

HERE = Path(__file__).resolve().parent
STORE = HERE / "recipe.json"
MARK_BEGIN, MARK_END = "<!-- recipe study: begin -->", "<!-- recipe study: end -->"

#: What every setting shares: the recipe of the earlier study (peak 3e-3 after 300 warm-up
#: steps, batch 64), evaluated every 100 steps, run for 3,000 steps.
BASE = dict(peak_lr=3e-3, warmup=300, batch=64, decay=0.5, grouped=False, steps=3000, eval_every=100)
#: name -> changes to BASE. decay: the exponent of the fall after the peak, lr ~ step^-decay
#: (0.5 is equation 3's). grouped: batches of similar source lengths (`group_by_length`).
SETTINGS = {
    "paper": {},
    "grouped": dict(grouped=True),
    "decay1": dict(decay=1.0),
    "grouped-decay1": dict(grouped=True, decay=1.0),
}
#: The versions of the weights each evaluation scores: raw, the mean of the last k snapshots
#: (one per evaluation), and exponential moving averages with the given decay per step.
AVERAGES = (3, 5, 10)
EMAS = (0.99, 0.998)
POOL = 50  # batches per pool of the length-grouped loader


def grouped_loader(pairs, src_vocab, tgt_vocab, batch_size, seed, pool=POOL):
    """Batches of similar source lengths, `tl.vocab.make_loader(..., group_by_length=pool)` if the
    package has it, else the same thing written here."""
    try:
        return make_loader(pairs, src_vocab, tgt_vocab, batch_size=batch_size, seed=seed, group_by_length=pool)
    except TypeError:
        return _GroupedLoader(pairs, src_vocab, tgt_vocab, batch_size, seed, pool)


class _GroupedLoader:
    """Each pass: shuffle the pairs, cut them into pools of `pool` batches, sort each pool by
    source length, cut it into batches and shuffle the batches of the pass."""

    def __init__(self, pairs, src_vocab, tgt_vocab, batch_size, seed, pool):
        self.pairs, self.vocabs, self.batch_size, self.seed, self.pool = list(pairs), (src_vocab, tgt_vocab), batch_size, seed, pool
        self.passes = 0

    def __iter__(self):
        g = torch.Generator(device="cpu").manual_seed(self.seed * 1_000_003 + self.passes)
        self.passes += 1
        order = torch.randperm(len(self.pairs), generator=g, device="cpu").tolist()
        size = self.pool * self.batch_size
        batches = []
        for start in range(0, len(order), size):
            chunk = sorted(order[start:start + size], key=lambda i: len(self.pairs[i][0]))
            batches += [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        for k in torch.randperm(len(batches), generator=g, device="cpu").tolist():
            yield collate([self.pairs[i] for i in batches[k]], *self.vocabs)


def decayed_schedule(peak_lr: float, warmup: int, decay: float):
    """lr(step): a linear warm-up to `peak_lr` at `warmup`, then peak_lr * (warmup / step)^decay.
    decay = 0.5 is equation (3) scaled to its peak."""
    return lambda s: peak_lr * min(s / warmup, (warmup / s) ** decay)


def run(name: str, seed: int, threads: int, device: str | None, data, steps: int | None = None) -> dict:
    """One training run of `name` from `seed`, with every weight version's trajectory."""
    s = {**BASE, **SETTINGS[name], **({"steps": steps} if steps else {})}
    splits, src_vocab, tgt_vocab = data
    device = tl.runtime.setup(seed=seed, threads=threads, device=device)
    model = tl.Transformer(tl.TransformerConfig(len(src_vocab), len(tgt_vocab), **DATE_MODEL))
    if s["grouped"]:
        loader = grouped_loader(splits.train, src_vocab, tgt_vocab, s["batch"], seed)
    else:
        loader = make_loader(splits.train, src_vocab, tgt_vocab, batch_size=s["batch"], seed=seed)
    quick = evenly_spaced(splits.valid, 1000)
    chosen = set(quick)
    rest = [p for p in splits.valid if p not in chosen]
    sets = {name_: [tuple(t.to(device) for t in collate(pairs, src_vocab, tgt_vocab))]
            for name_, pairs in (("quick", quick), ("rest", rest), ("test", splits.test))}
    cfg = TrainConfig(max_steps=s["steps"], warmup=s["warmup"], eval_every=s["eval_every"], progress=False,
                      factor=factor_for_peak(s["peak_lr"], DATE_MODEL["d_model"], s["warmup"]))

    versions = ["raw"] + [f"avg{k}" for k in AVERAGES] + [f"ema{d}" for d in EMAS]
    acc = {v: {k: [] for k in sets} for v in versions}
    snapshots: list[dict] = []
    ema = {d: {k: t.detach().clone() for k, t in model.state_dict().items()} for d in EMAS}
    shadow = copy.deepcopy(model)

    def loss_fn(m, batch, c):  # the EMAs follow the weights after every step
        with torch.no_grad():
            for d, avg in ema.items():
                for k, t in m.state_dict().items():
                    if t.is_floating_point():
                        avg[k].lerp_(t, 1 - d)
        return seq2seq_loss(m, batch, c)

    def score(weights: dict, version: str) -> None:
        shadow.load_state_dict(weights)
        for set_name, batches in sets.items():
            acc[version][set_name].append(round(evaluate(shadow, batches, cfg)[0], 5))

    def on_eval(step, quick_accuracy):
        snapshots.append({k: t.detach().clone() for k, t in model.state_dict().items()})
        del snapshots[:-max(AVERAGES)]
        score(model.state_dict(), "raw")
        for k in AVERAGES:
            score(average_weights(snapshots[-k:]), f"avg{k}")
        for d in EMAS:
            score(ema[d], f"ema{d}")

    load_start = os.getloadavg()[0]
    schedule = decayed_schedule(s["peak_lr"], s["warmup"], s["decay"])
    original = training.lr_schedule
    training.lr_schedule = lambda cfg_, model_: schedule  # the study's schedule, for tl.train
    try:
        hist = train(model, loader, sets["quick"], cfg, on_eval=on_eval, loss_fn=loss_fn)
    finally:
        training.lr_schedule = original
    return {"setting": name, "seed": seed, "threads": threads, **s, "device": str(device),
            "torch": torch.__version__, "kernels": torch.backends.cpu.get_cpu_capability()
            if device.type == "cpu" else torch.cuda.get_device_name() if device.type == "cuda" else device.type,
            "seconds": round(hist.seconds, 1), "eval_seconds": round(hist.eval_seconds, 1),
            "load_start": round(load_start, 2), "load_end": round(os.getloadavg()[0], 2),
            "date": dt.date.today().isoformat(), "eval_step": hist.eval_step, "accuracy": acc,
            "loss_every_50": [round(x, 4) for x in hist.loss[::50]]}


# ---------------------------------------------------------------------------------------------
# Stopping rules, replayed on the stored trajectories


def stop_of(row: dict, version: str, quick_at: float, rest_at: float, cap: int) -> tuple[int, float, bool]:
    """Where `version` would stop under "quick >= quick_at and rest >= rest_at" (checked at every
    evaluation up to `cap`), the test exact match there, and whether the rule fired (False: the
    cap; the result is then the version's weights at the cap)."""
    a = row["accuracy"][version]
    last = 0
    for i, step in enumerate(row["eval_step"]):
        if step > cap:
            break
        last = i
        if a["quick"][i] >= quick_at and a["rest"][i] >= rest_at:
            return step, a["test"][i], True
    return row["eval_step"][last], a["test"][last], False


def first_step(row: dict, version: str, set_name: str, at: float) -> int | None:
    a = row["accuracy"][version][set_name]
    return next((s for s, x in zip(row["eval_step"], a) if x >= at), None)


def swing(row: dict, version: str, lo: int, hi: int) -> float:
    """The mean absolute change of test exact match between consecutive evaluations in
    [lo, hi], in points: how much the end of training swings."""
    xs = [x for s, x in zip(row["eval_step"], row["accuracy"][version]["test"]) if lo <= s <= hi]
    return 100 * statistics.mean(abs(b - a) for a, b in zip(xs, xs[1:]))


def rule_table(rows: list[dict], rules: list[tuple], settings: list[str], cap: int) -> list[str]:
    out = ["| setting | weights | stop when quick check, other validation dates reach | runs | stopped by the rule"
           " | stop step: median (range) | test exact match at the stop: lowest, median | runs below 99% |",
           "| --- | --- | --- | ---: | ---: | --- | --- | ---: |"]
    for name in settings:
        rs = [r for r in rows if r["setting"] == name]
        for version, qa, ra in rules:
            stops = [stop_of(r, version, qa, ra, cap) for r in rs]
            steps = [s for s, _, _ in stops]
            tests = [t for _, t, _ in stops]
            out.append(f"| {name} | {version} | {100 * qa:g}%, {100 * ra:g}% | {len(rs)} | {sum(f for *_, f in stops)}"
                       f" | {statistics.median(steps):,.0f} ({min(steps):,}-{max(steps):,}) | {100 * min(tests):.2f}%,"
                       f" {100 * statistics.median(tests):.2f}% | {sum(t < 0.99 for t in tests)} |")
    return out


def trajectory_table(rows: list[dict], settings: list[str], versions: list[str]) -> list[str]:
    out = ["| setting | weights | runs | first evaluation at 99% on the test dates: median (range) |"
           " test exact match at 1,000 / 1,500 / 2,000 steps: median (lowest) | swing, 1,000-2,000 steps |",
           "| --- | --- | ---: | --- | --- | ---: |"]
    for name in settings:
        rs = [r for r in rows if r["setting"] == name]
        for v in versions:
            firsts = [first_step(r, v, "test", 0.99) for r in rs]
            known = [f for f in firsts if f is not None]
            first = (f"{statistics.median(known):,.0f} ({min(known):,}-{max(known):,})" if known else "never")
            first += f", {len(firsts) - len(known)} never" if known and len(known) < len(firsts) else ""
            at = []
            for step in (1000, 1500, 2000):
                xs = [r["accuracy"][v]["test"][r["eval_step"].index(step)] for r in rs if step in r["eval_step"]]
                at.append(f"{100 * statistics.median(xs):.2f} ({100 * min(xs):.2f})" if xs else "-")
            sw = statistics.mean(swing(r, v, 1000, 2000) for r in rs)
            out.append(f"| {name} | {v} | {len(rs)} | {first} | {' / '.join(at)} | {sw:.2f} |")
    return out


# ---------------------------------------------------------------------------------------------
# One step's cost


def step_time(grouped: bool, threads: int, reps: int, data) -> dict:
    """Best and median time of one training step (forward, backward, clipping, Adam) on batches
    of 64 training pairs, shuffled or grouped by length, and the mean padded source length."""
    splits, src_vocab, tgt_vocab = data
    tl.runtime.setup(seed=0, threads=threads)
    model = tl.Transformer(tl.TransformerConfig(len(src_vocab), len(tgt_vocab), **DATE_MODEL))
    if grouped:
        loader = grouped_loader(splits.train, src_vocab, tgt_vocab, 64, 0)
    else:
        loader = make_loader(splits.train, src_vocab, tgt_vocab, batch_size=64, seed=0)
    batches = list(loader)
    cfg = TrainConfig(progress=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    times, load = [], os.getloadavg()[0]
    for i in range(reps + 3):  # three warm-up steps
        batch = batches[i % len(batches)]
        began = time.perf_counter()
        loss = seq2seq_loss(model, batch, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= 3:
            times.append(time.perf_counter() - began)
    return {"batches": "grouped" if grouped else "shuffled", "threads": threads,
            "best_ms": round(1000 * min(times), 1), "median_ms": round(1000 * statistics.median(times), 1),
            "reps": reps, "load": round(load, 2), "padded_source": round(statistics.mean(b[0].shape[1] for b in batches), 1),
            "source": round(statistics.mean(len(s) for s, _ in splits.train), 1),
            "wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"), "kernels": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__, "date": dt.datetime.now().isoformat(timespec="minutes")}


# ---------------------------------------------------------------------------------------------
# The report


def load_store() -> dict:
    saved = json.loads(STORE.read_text()) if STORE.exists() else {}
    return saved if isinstance(saved, dict) and "study" in saved else {"study": [], "step_time": []}


def step_table(rows: list[dict]) -> list[str]:
    out = ["| threads | batches | best (median) ms a step | padded source length, mean | load (1 min) | when |",
           "| ---: | --- | --- | ---: | ---: | --- |"]
    for r in rows:
        out.append(f"| {r['threads']} | {r['batches']} | {r['best_ms']} ({r['median_ms']}) | {r['padded_source']} |"
                   f" {r['load']} | {r['date']} |")
    return out


RULES = [("raw", 0.996, 0.995), ("avg5", 0.996, 0.995), ("ema0.99", 0.996, 0.995), ("avg5", 0.99, 0.99)]
VERSIONS = ["raw", "avg3", "avg5", "avg10", "ema0.99", "ema0.998"]


def write_report(store: dict) -> None:
    rows = store["study"]
    settings = [s for s in SETTINGS if any(r["setting"] == s for r in rows)]
    devices = sorted({f"{r['kernels']}, torch {r['torch']}" for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    dates = sorted({r["date"] for r in rows})
    lines = [MARK_BEGIN, "## Training recipe: the levers, over seeds", "",
             f"Measured {', '.join(dates)} with `benchmarks/recipe.py run` (seeds {seeds[0]}-{seeds[-1]}, every setting;"
             f" on {'; '.join(devices)}: sixteen runs at a time on one GPU, which is not bit-reproducible and does"
             " not need to be for a comparison over seeds); tables rewritten from `benchmarks/recipe.json` by"
             " `.venv/bin/python benchmarks/recipe.py report`. Each run trains the date model (`DATE_MODEL`,"
             " `tl.train`, batch 64, Adam 0.9/0.98, label smoothing 0.1, clipping 1.0, a linear warm-up over 300 steps"
             " to 3e-3) for 3,000 steps without stopping, and every 100 steps counts greedy exact match (one"
             " teacher-forced pass) on the 1,000 quick-check validation dates, the other 2,652 validation dates and"
             " the 3,652 test dates, for the raw weights, the average of the last k snapshots (`avgk`, one snapshot"
             " per evaluation; the paper averages the last 5 checkpoints) and exponential moving averages of the"
             " weights (`ema0.99`: each step, avg = 0.99 avg + 0.01 weights). Settings: `paper` (shuffled batches,"
             " equation (3)'s decay, step^-0.5, after the peak), `grouped` (batches cut from pools of 50 batches"
             " sorted by source length, then shuffled), `decay1` (step^-1 after the peak), `grouped-decay1`.", "",
             "### How soon, and how steadily, each version of the weights reaches 99% on the test dates", "",
             "Swing: the mean change of test exact match between consecutive evaluations from step 1,000 to 2,000,"
             " in points.", ""]
    lines += trajectory_table(rows, settings, VERSIONS)
    lines += ["", "### Stopping rules replayed on the trajectories", "",
              "A rule stops at the first evaluation where the version's quick check reaches the first number and the"
              " other validation dates reach the second (the chapter's rule: 99.6% and 99.5%); the test exact match"
              " is that version's at the stop. Cap 3,000 steps.", ""]
    lines += rule_table(rows, RULES, settings, 3000)
    lines += ["", "What it shows. (1) Averaging is the lever that counts: with the paper's schedule the average of the"
              " last 3 or 5 snapshots first reached 99% on the test dates 300-900 steps before the raw weights did,"
              " and moved about a tenth as much from one evaluation to the next; the exponential average with a"
              " memory of about 100 steps (`ema0.99`) did as well, a little sooner. Averaging too far back (`avg10`,"
              " `ema0.998`, memories of 1,000 and 500 steps) is worse early: it drags along weights from early in"
              " training. (2) Grouping batches by length makes each step cheaper (the step-time table: the padded"
              " source is about half as long) but costs steps: every version needed about half as many steps again to"
              " reach 99%, more than the cheaper step saves. (3) A faster decay after the peak helps the raw weights"
              " (99% about 350 steps sooner) and leaves the averaged ones where they were: an average damps the last"
              " steps' wobble as a falling learning rate does.",
              "Chosen (`transformer_lib.recipes.DATE_RECIPE`): the paper's schedule, shuffled batches, and the average"
              " of the last 5 snapshots, checked every 100 steps on the quick check (99.6%) and then on the other"
              " 2,652 validation dates (99.5%): in this study every seed stopped by the rule, at 1,200-1,500 steps,"
              " with 99.45-99.75% on the test dates. Chapter 11 trains with it live and"
              " `scripts/train_transformer.py` made the shipped checkpoint with it; its claims over seeds and the"
              " two kernel sets (default, avx2) are in the claims table below (`benchmarks/claims/ch11.json`).",
              ""]
    claims = HERE / "claims" / "ch11.json"
    if claims.exists():
        data = json.loads(claims.read_text())
        m = data["machine"]
        sets = [k for k in ("default", "avx2", "native") if any(r["kernels"] == k for r in data["records"])]
        lines += ["### Chapter 11's live run over seeds and kernel sets", "",
                  f"Chapter 11 run top to bottom once per seed and kernel set (seeds and kernel sets below; this"
                  f" machine's own kernels are {m['native_kernels']}, torch {m['torch']}, commit {m['commit']},"
                  f" {m['date']}, load {m['load_before']}-{m['load_after']}), each value its live-run cell recorded"
                  " (`benchmarks/claims/ch11.json`; command: `.venv/bin/python benchmarks/sweep_claims.py 11"
                  f" --seeds 0-4 --kernels {' '.join(sets)}`).", "",
                  f"| claim | bound | seed: value under {' / '.join(sets)} |", "| --- | --- | --- |"]
        by_claim: dict[str, dict] = {}
        for r in data["records"]:
            by_claim.setdefault(r["claim"], {"bound": (r["at_least"], r["at_most"]), "v": {}})
            by_claim[r["claim"]]["v"][(r["seed"], r["kernels"])] = r["value"]
        for name, c in by_claim.items():
            lo, hi = c["bound"]
            bound = " and ".join(f"{w} {b:g}" for w, b in (("≥", lo), ("≤", hi)) if b is not None)
            seeds_ = sorted({s_ for s_, _ in c["v"]})
            cells = "; ".join(f"{s_}: " + " / ".join(f"{c['v'].get((s_, k), float('nan')):g}"
                                                   for k in sets) for s_ in seeds_)
            lines.append(f"| {name} | {bound} | {cells} |")
        lines += [""]
    steps = store.get("step_time") or []
    if steps:
        lines += ["### One training step, shuffled and grouped batches", "",
                  "Forward, backward, clipping and Adam for the date model on batches of 64 training pairs,"
                  " OpenMP's default wait policy (what a notebook gets), this machine's own kernels; best and median"
                  " of the timed steps after three warm-up steps (`.venv/bin/python benchmarks/recipe.py step-time`)."
                  " Wall time on a machine shared with other jobs: the load column says how shared.", ""]
        lines += step_table(steps) + [""]
    lines += [MARK_END]
    path = HERE / "RESULTS.md"
    text = path.read_text() if path.exists() else ""
    if MARK_BEGIN in text and MARK_END in text:
        text = text[: text.index(MARK_BEGIN)] + "\n".join(lines) + text[text.index(MARK_END) + len(MARK_END):]
    else:
        text = text.rstrip() + "\n\n" + "\n".join(lines) + "\n"
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="training runs (resumes: runs already stored are skipped)")
    r.add_argument("--seeds", type=parse_seeds, default=parse_seeds("0-4"))
    r.add_argument("--only", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--device", default=None, help="cpu (default) or cuda")
    r.add_argument("--out", type=Path, default=None, help="append runs to this JSON-lines file, not recipe.json")
    r.add_argument("--steps", type=int, default=None, help="fewer steps than the study's (a smoke test)")
    r.add_argument("--worker", default="0/1", help="i/n: run only every n-th job from the i-th (parallel workers)")
    st = sub.add_parser("step-time", help="one step's cost, shuffled and grouped batches, 1 and 2 threads")
    st.add_argument("--reps", type=int, default=60)
    sub.add_parser("report", help="print the tables of the stored runs and write them into RESULTS.md")
    imp = sub.add_parser("import", help="add the runs of JSON-lines files (from run --out) to recipe.json")
    imp.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args()

    store = load_store()
    save = lambda: STORE.write_text(json.dumps(store, indent=None, separators=(",", ":")) + "\n")  # noqa: E731
    if args.command == "run":
        splits = make_date_splits(seed=0)
        data = (splits, *date_vocabs())
        done = {(x["setting"], x["seed"], x["device"]) for x in store["study"]}
        i, n = map(int, args.worker.split("/"))
        jobs = [(seed, name) for seed in args.seeds for name in args.only][i::n]  # seed-major
        for seed, name in jobs:
            if (name, seed, args.device or "cpu") in done and args.out is None:
                continue
            row = run(name, seed, args.threads, args.device, data, args.steps)
            if args.out is not None:
                with args.out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
            else:
                store["study"].append(row)
                save()
            a = row["accuracy"]
            shown = [k for k, s_ in enumerate(row["eval_step"]) if s_ in (1500, 2000)] + [-1]
            print(f"{name:>15} seed {seed}: {row['seconds']} s; test at {[row['eval_step'][k] for k in shown]}: "
                  f"raw {[a['raw']['test'][k] for k in shown]}, avg5 {[a['avg5']['test'][k] for k in shown]}",
                  flush=True)
    elif args.command == "import":
        for f in args.files:
            for line in f.read_text().splitlines():
                if line.strip():
                    store["study"].append(json.loads(line))
        save()
    elif args.command == "step-time":
        data = (make_date_splits(seed=0), *date_vocabs())
        rows = [step_time(g, t, args.reps, data) for t in (1, 2) for g in (False, True)]
        store["step_time"] = rows
        save()
        for x in rows:
            print(x)
    elif args.command == "report":
        rows = store["study"]
        settings = [s for s in SETTINGS if any(r["setting"] == s for r in rows)]
        print("\n".join(trajectory_table(rows, settings, VERSIONS)))
        print("\n".join(rule_table(rows, RULES, settings, 3000)))
        write_report(store)


if __name__ == "__main__":
    main()
