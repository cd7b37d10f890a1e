"""The induction-head study of chapter 18: when the phase change comes, and what the heads do.

    python benchmarks/induction.py run --seeds 0-4 --kernels default avx2 [--jobs 10]
    python benchmarks/induction.py report          # the table, from induction.json, into RESULTS.md

`run` trains chapter 18's attention-only model (`book.induction.model_config`, two layers, and
the one-layer control) from each seed with `tl.train` and chapter 18's recipe
(`book.induction.train_config`) on the book's corpus mixed with repeated random segments
(`induction_windows`), one process per (seed, layers, kernel set), each on one thread with
`ATEN_CPU_CAPABILITY` set. Every 100 steps it records the loss on the first and the repeated
half of 256 held-out repeated sequences and the in-context score on held-out text. After
training: each head's previous-token, induction and copying scores, and the repeated-half and
text losses with each head ablated, and with the induction head and the previous-token head
ablated together. The phase change is the first evaluation at which the repeated half's loss is
below half the first half's. Writes benchmarks/induction.json (one entry per run).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from seeds import parse_seeds

HERE = Path(__file__).resolve().parent
STORE = HERE / "induction.json"
SECTION = "induction study"  # its markers in RESULTS.md: <!-- induction study: begin --> ... end -->


def one_run(seed: int, n_layers: int, steps: int, checkpoint: str | None = None, lr: float = 3e-3,
            min_repeat: int | None = None) -> dict:
    import torch

    import transformer_lib as tl
    from transformer_lib import lm
    from transformer_lib.book import induction as ind
    from transformer_lib.vocab import Vocab

    torch.set_num_threads(1)
    text = lm.load_corpus()
    vocab = Vocab.from_texts([text])
    ids = torch.tensor(vocab.encode(text))
    cut = int(0.9 * len(ids))
    train_ids, held_ids = ids[:cut], ids[cut:]
    alphabet = torch.tensor(sorted(set(ids.tolist())))
    test, text_windows = ind.held_out_sets(alphabet, held_ids)

    torch.manual_seed(seed)
    model = lm.CausalLM(ind.model_config(len(vocab), n_layers))
    min_repeat = ind.MIN_REPEAT if min_repeat is None else min_repeat
    cfg = dataclasses.replace(ind.train_config(max_steps=steps), lr=lr)
    loader = ind.induction_windows(train_ids, alphabet, 32, ind.LENGTH, steps, min_repeat=min_repeat, seed=seed)
    curve = {"step": [], "first": [], "repeat": [], "icl": []}

    def measure(step, _accuracy):
        ind.measure(model, curve, step, test, text_windows)

    measure(0, None)
    history = tl.train(model, loader, [(test[:8, :-1], test[:8, 1:])], cfg, on_eval=measure,
                       loss_fn=lm.lm_loss, eval_fn=lm.lm_evaluate)
    change = ind.phase_change_step(curve)

    def text_loss():
        return lm.lm_evaluate(model, [(text_windows[:, :-1], text_windows[:, 1:])])[1]

    with torch.no_grad(), tl.record_attention(model) as weights:
        model.eval()
        model(test[:64])
    period = ind.LENGTH // 2
    layers = []
    for i in range(n_layers):
        w = weights[f"layers.{i}.self_attn"]
        layers.append({"previous": ind.previous_token_score(w).tolist(),
                       "induction": ind.induction_score(w, period).tolist(),
                       "copying": ind.copying_score(model, i, alphabet).tolist()})
    base = {"repeat": ind.half_losses(model, test)[1], "text": text_loss()}
    ablations = {}
    for i in range(n_layers):
        for h in range(model.config.n_heads):
            with ind.ablate_heads(model, [(i, h)]):
                ablations[f"{i}.{h}"] = {"repeat": ind.half_losses(model, test)[1], "text": text_loss()}
    record = {"seed": seed, "layers": n_layers, "steps": steps, "lr": lr, "min_repeat": min_repeat,
              "phase_change": change, "curve": curve,
              "heads": layers, "base": base, "ablations": ablations,
              "seconds": history.seconds, "torch": torch.__version__,
              "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "native")}
    if n_layers == 2:  # the induction head (layer 1) and the previous-token head (layer 0) it reads
        ind_head = max(range(model.config.n_heads), key=lambda h: layers[1]["induction"][h])
        prev_head = max(range(model.config.n_heads), key=lambda h: layers[0]["previous"][h])
        with ind.ablate_heads(model, [(0, prev_head)]):
            prev_only = {"repeat": ind.half_losses(model, test)[1], "text": text_loss()}
        record.update(induction_head=ind_head, previous_head=prev_head, previous_ablated=prev_only)
    if checkpoint:
        tl.checkpoints.save(checkpoint, model, vocab, vocab, {k: record[k] for k in record if k != "ablations"})
    return record


def run(seeds, kernels, layers, steps, jobs, checkpoint_dir, lr=3e-3, min_repeat=None):
    from transformer_lib.book.induction import MIN_REPEAT

    min_repeat = MIN_REPEAT if min_repeat is None else min_repeat
    store = json.loads(STORE.read_text()) if STORE.exists() else []
    done = {(r["seed"], r["layers"], r["kernels"], r["steps"], r["lr"], r["min_repeat"]) for r in store}
    todo = [(s, n, k) for s in seeds for n in layers for k in kernels
            if (s, n, k, steps, lr, min_repeat) not in done]

    def launch(job):
        seed, n, kernel = job
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if kernel != "native":
            env["ATEN_CPU_CAPABILITY"] = kernel
        argv = [sys.executable, __file__, "one", "--seed", str(seed), "--layers", str(n), "--steps", str(steps),
                "--lr", str(lr), "--min-repeat", str(min_repeat)]
        if checkpoint_dir and kernel == kernels[0] and seed == seeds[0]:
            argv += ["--checkpoint", str(Path(checkpoint_dir) / f"induction_{n}layer_seed{seed}.pt")]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
        if out.returncode:
            raise SystemExit(f"run {job} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(jobs) as pool:
        for record in pool.map(launch, todo):
            store.append(record)
            print(f"seed {record['seed']} layers {record['layers']} {record['kernels']}: phase change at "
                  f"{record['phase_change']}, {record['seconds']:.0f} s", flush=True)
    STORE.write_text(json.dumps(store, indent=1) + "\n")


def shifts(run: dict, control: dict | None) -> str:
    """The in-context score's shift across the phase change (`in_context_shift`), for the run and
    for its one-layer control at the same step; a dash without a phase change."""
    from transformer_lib.book.induction import in_context_shift

    step = run["phase_change"]
    if step is None:
        return "-"
    other = f"{in_context_shift(control['curve'], step):+.2f}" if control else "-"
    return f"{in_context_shift(run['curve'], step):+.2f} / {other}"


def table(store: list[dict]) -> str:
    """The study's table: one row per two-layer run, with its one-layer control beside it."""
    main = [r for r in store if r["min_repeat"] == 8]  # the recipe of chapter 18
    aside = [r for r in store if r["min_repeat"] != 8]
    store = main
    control = {(r["seed"], r["kernels"]): r for r in store if r["layers"] == 1}
    rows = ["| seed | kernels (torch) | phase change (step) | in-context shift at it, 2 layers / 1 layer "
            "| repeat loss, 2 layers / 1 layer | best induction score "
            "(layer 1) | its copying score | best previous-token score (layer 0) | repeat loss, induction head "
            "ablated | repeat loss, previous-token head ablated | text loss: base / ind. ablated / prev. ablated |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted((r for r in store if r["layers"] == 2), key=lambda r: (r["seed"], r["kernels"])):
        one = control.get((r["seed"], r["kernels"]))
        ih, ph = r["induction_head"], r["previous_head"]
        ablated = r["ablations"][f"1.{ih}"]
        rows.append(
            f"| {r['seed']} | {r['kernels']} ({r['torch'].split('+')[0]}) | "
            f"{r['phase_change'] or 'none by ' + format(r['steps'], ',')} | {shifts(r, one)} | "
            f"{r['base']['repeat']:.2f} / {one['base']['repeat'] if one else float('nan'):.2f} | "
            f"{r['heads'][1]['induction'][ih]:.2f} (head {ih}) | {r['heads'][1]['copying'][ih]:.2f} | "
            f"{r['heads'][0]['previous'][ph]:.2f} (head {ph}) | {ablated['repeat']:.2f} | "
            f"{r['previous_ablated']['repeat']:.2f} | {r['base']['text']:.2f} / {ablated['text']:.2f} / "
            f"{r['previous_ablated']['text']:.2f} |")
    first = store[0]
    return ("Chapter 18's attention-only model (`book.induction.model_config`, 2 layers of 4 heads, d_model 64, "
            f"learned positions) trained {first['steps']:,} steps by `book.induction.train_config` on the book's "
            f"corpus mixed with repeated random segments of {first['min_repeat']} to 32 characters; losses in nats "
            "per token on 256 held-out sequences of 32 random characters repeated (chance: ln 92 = 4.52) and on 512 "
            "windows of held-out text; the induction head is layer 1's head with the highest induction score, the "
            "previous-token head layer 0's with the highest previous-token score. The default and avx2 rows: "
            "`python benchmarks/induction.py run --seeds 0-4 --kernels default avx2 --steps 4000 --jobs 20` on "
            "the 16 CPU cores of the GPU machine (one thread a run); the native rows, on this book's 2-core machine: "
            "seed 3 is the shipped checkpoints' run (`--seeds 3 --kernels native --checkpoints DIR`), seed 4 a "
            "second check of the two kernel sets against this machine's own; "
            "`python benchmarks/induction.py report` writes this table.\n\n" + "\n".join(rows)
            + "".join(f"\n\nAn earlier recipe, repeated segments of {r['min_repeat']} to 32 characters, "
                      f"seed {r['seed']}, {r['kernels']} kernels, {r['steps']:,} steps: repeated half "
                      f"{r['base']['repeat']:.2f} nats with no layer-1 induction score above "
                      f"{max(r['heads'][1]['induction']):.2f}."
                      for r in aside if r["layers"] == 2))


def write_report() -> None:
    import run as bench  # benchmarks/run.py: the report's one way of replacing a section

    store = json.loads(STORE.read_text())
    results = HERE / "RESULTS.md"
    results.write_text(bench.replace_section(results.read_text(), SECTION, table(store)).rstrip("\n") + "\n")
    print(table(store))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", default="0-4")
    r.add_argument("--kernels", nargs="+", default=["default", "avx2"])
    r.add_argument("--layers", nargs="+", type=int, default=[2, 1])
    r.add_argument("--steps", type=int, default=3000)
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--checkpoints", default=None, help="folder for the first seed's models (first kernel set)")
    r.add_argument("--lr", type=float, default=3e-3)
    r.add_argument("--min-repeat", type=int, default=None)
    o = sub.add_parser("one")
    o.add_argument("--seed", type=int, required=True)
    o.add_argument("--layers", type=int, default=2)
    o.add_argument("--steps", type=int, default=3000)
    o.add_argument("--checkpoint", default=None)
    o.add_argument("--lr", type=float, default=3e-3)
    o.add_argument("--min-repeat", type=int, default=None)
    sub.add_parser("report")
    args = parser.parse_args()
    if args.command == "one":
        print(json.dumps(one_run(args.seed, args.layers, args.steps, args.checkpoint, args.lr, args.min_repeat)))
    elif args.command == "run":
        run(parse_seeds(args.seeds), args.kernels, args.layers, args.steps, args.jobs, args.checkpoints, args.lr,
            args.min_repeat)
    else:
        write_report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
