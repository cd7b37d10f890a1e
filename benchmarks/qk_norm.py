"""QK-norm (Dehghani et al. 2023) against the plain block, at learning rates where the plain one fails.

    python benchmarks/qk_norm.py run --seeds 0-4 --lrs 5e-3 0.1 0.2 --kernels default avx2 [--jobs 2]
    python benchmarks/qk_norm.py run --seeds 0-4 --lrs 0.1 --steps 60    # the chapter's run
    python benchmarks/qk_norm.py report        # the table, from qk_norm.json, into RESULTS.md

The protocol is chapter 16's, on its "all together" configuration (RMSNorm, RoPE, SwiGLU, two
key/value heads, no biases; d_ff matched to the 2017 block's layers by `lm.match_d_ff`; the
variants of `modern_decoder.py`): d_model 64, 4 heads, 2 layers, `tl.train` on batches of 16
random windows of 32 characters of the book's prose, Adam (0.9, 0.98), learning rate rising
linearly over `--warmup` steps (20) to the peak `--lr`, then constant, gradient clipping at
`--clip` (1; "none": no clipping), 200 steps. Each (seed, learning rate, kernel set) trains the
block twice from the same seed, without and with `qk_norm=True`; the seed fixes the windows and
(for each model shape) the initial weights. One process per job, on one thread, with
`ATEN_CPU_CAPABILITY` set.

Measured: the held-out loss (every consecutive 32-character window of the held-out tenth), and at
every training step, over both layers and all heads, the largest attention logit |q.k|/sqrt(d_k)
among the allowed (causal) pairs, and the smallest mean attention entropy (the entropy of a
query's weights, averaged over the batch and the 32 queries, for one head; the first query
always has entropy 0; a head uniform over the keys each query sees averages ln(t + 1) over
t = 0..31, 2.55 nats, the most it can). A run *failed* if
its held-out loss is not finite or is above `FAILED_ABOVE` nats, H1 - 0.5, where H1 = 3.20 is
the unigram entropy (the loss of a model that predicts characters by their frequency alone):
chapter 16 claims that every run of its protocol at its learning rate (5e-3) ends below it. Runs are saved in
benchmarks/qk_norm.json as they finish (the script resumes; commit the file).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from seeds import parse_seeds

HERE = Path(__file__).resolve().parent
STORE = HERE / "qk_norm.json"
SECTION = "qk-norm study"  # its markers in RESULTS.md: <!-- qk-norm study: begin --> ... end -->
STEPS, WARMUP, CLIP = 200, 20, 1.0
FAILED_ABOVE = 2.7  # nats: H1 (3.20) - 0.5, which every run of chapter 16's protocol gets below


class AttentionStats:
    """An `attention_fn` that computes attention as the library does (the explicit path) and
    keeps, for the current step, the largest allowed logit and the smallest mean entropy."""

    def __init__(self):
        self.max_logit, self.min_entropy = 0.0, math.inf

    def __call__(self, q, k, v, mask=None, dropout=None):
        import torch

        from transformer_lib.attention import scaled_dot_product_attention

        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout)
        with torch.no_grad():
            logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, h, T, T)
            if mask is not None:
                logits = logits.masked_fill(~mask, 0.0)
            entropy = -(weights * weights.clamp_min(1e-30).log()).sum(-1)  # (B, h, T)
            self.max_logit = max(self.max_logit, logits.abs().max().item())
            self.min_entropy = min(self.min_entropy, entropy.mean((0, 2)).min().item())
        return out, weights

    def take(self) -> tuple[float, float]:
        values = (self.max_logit, self.min_entropy)
        self.max_logit, self.min_entropy = 0.0, math.inf
        return values


def config(vocab_size: int, qk_norm: bool):
    """Chapter 16's "all together" configuration, with or without QK-norm (same d_ff: the two
    norms add 2 d_k gains per layer, 64 parameters in all)."""
    import modern_decoder

    return dataclasses.replace(modern_decoder.variants(vocab_size)["all together"], qk_norm=qk_norm)


def failed(loss: float) -> bool:
    return not math.isfinite(loss) or loss > FAILED_ABOVE


def one_run(seed: int, lr: float, qk_norm: bool, steps: int = STEPS, warmup: int = WARMUP,
            clip: float | None = CLIP) -> dict:
    """Train one model; returns its record (see the module's docstring)."""
    import torch

    import modern_decoder
    import transformer_lib as tl
    from transformer_lib import attention, lm

    torch.set_num_threads(1)
    vocab_size, train_ids, heldout_ids, h1 = modern_decoder.data()
    torch.manual_seed(seed)
    model = lm.CausalLM(config(vocab_size, qk_norm))
    stats = AttentionStats()
    attention.use_attention(model, stats)
    curve = {"loss": [], "max_logit": [], "min_entropy": []}

    def loss_fn(model, batch, cfg):  # the step's loss, and the attention statistics of its forward pass
        loss = lm.lm_loss(model, batch, cfg)
        logit, entropy = stats.take()
        curve["loss"].append(loss.item())
        curve["max_logit"].append(logit)
        curve["min_entropy"].append(entropy)
        return loss

    cfg = tl.TrainConfig(max_steps=steps, eval_every=steps, schedule="linear_warmup", warmup=warmup, lr=lr,
                         clip_norm=clip, label_smoothing=0.0, progress=False)
    began = time.perf_counter()
    history = tl.train(model, lm.random_windows(train_ids, 16, 32, steps, seed=seed),
                       [modern_decoder.windows(heldout_ids, 32)], cfg, loss_fn=loss_fn, eval_fn=lm.lm_evaluate)
    loss = history.eval_loss[-1]
    finite = [x for x in curve["max_logit"] if math.isfinite(x)]
    return dict(seed=seed, lr=lr, qk_norm=qk_norm, steps=steps, warmup=warmup, clip=clip,
                kernels=os.environ.get("ATEN_CPU_CAPABILITY", "native"), torch=torch.__version__,
                loss=loss if math.isfinite(loss) else None, failed=failed(loss), h1=h1,
                max_logit=max(finite) if finite else None,
                min_entropy=min((x for x in curve["min_entropy"] if math.isfinite(x)), default=None),
                curve=curve, seconds=time.perf_counter() - began)


def _key(r: dict) -> tuple:
    return r["seed"], r["lr"], r["qk_norm"], r["kernels"], r["steps"], r["warmup"], r["clip"]


def run(seeds, lrs, kernels, steps=STEPS, warmup=WARMUP, clip=CLIP, jobs=2, store_path=None) -> list[dict]:
    """Run every (seed, lr, plain/qk_norm, kernel set) not yet in the store; save after each."""
    store_path = Path(store_path or STORE)
    store = json.loads(store_path.read_text()) if store_path.exists() else []
    done = {_key(r) for r in store}
    todo = [(s, lr, q, k) for lr in lrs for s in seeds for q in (False, True) for k in kernels
            if (s, lr, q, k, steps, warmup, clip) not in done]

    def launch(job):
        seed, lr, qk, kernel = job
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.pop("ATEN_CPU_CAPABILITY", None)
        if kernel != "native":
            env["ATEN_CPU_CAPABILITY"] = kernel
        argv = [sys.executable, __file__, "one", "--seed", str(seed), "--lr", repr(lr), "--steps", str(steps),
                "--warmup", str(warmup), "--clip", "none" if clip is None else repr(clip)]
        if qk:
            argv.append("--qk-norm")
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
        if out.returncode:
            raise SystemExit(f"run {job} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(jobs) as pool:
        for record in pool.map(launch, todo):
            store.append(record)
            store_path.write_text(json.dumps(store) + "\n")
            loss = record["loss"] if record["loss"] is None else round(record["loss"], 3)
            print(f"lr {record['lr']:g} seed {record['seed']} {'qk_norm' if record['qk_norm'] else 'plain  '} "
                  f"{record['kernels']:7s}: loss {loss}"
                  f", max logit {record['max_logit'] or float('nan'):.1f}, min entropy {record['min_entropy']:.2f}, "
                  f"{record['seconds']:.0f} s", flush=True)
    return store


def _span(values, fmt="{:.2f}") -> str:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "-"
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low} to {high}"


def table(store: list[dict]) -> str:
    """One row per (clip, warm-up, learning rate, kernel set, plain or QK-norm): the number of
    failed runs over the seeds, and the ranges of the held-out loss, the largest logit and the
    smallest mean entropy."""
    groups: dict[tuple, list[dict]] = {}
    for r in store:
        groups.setdefault((r["steps"], r["clip"] is None, r["clip"] or 0, r["warmup"], r["lr"], r["kernels"],
                           r["qk_norm"]), []).append(r)
    rows = ["| steps, clip, warm-up | peak lr | kernels | block | seeds | failed | held-out loss | "
            "largest logit | smallest mean entropy |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (steps, _, clip, warmup, lr, kernels, qk), runs in sorted(groups.items()):
        seeds = sorted(r["seed"] for r in runs)
        losses = [r["loss"] for r in runs]
        n_bad = sum(failed(math.nan if r["loss"] is None else r["loss"]) for r in runs)
        not_finite = sum(r["loss"] is None for r in runs)
        bad = f"{n_bad} of {len(runs)}" + (f" ({not_finite} not finite)" if not_finite else "")
        rows.append(f"| {steps}, {clip or 'none'}, {warmup} | {lr:g} | {kernels} | "
                    f"{'QK-norm' if qk else 'plain'} | {_span(seeds, '{:d}')} | {bad} | {_span(losses)} | "
                    f"{_span([r['max_logit'] for r in runs], '{:.1f}')} | "
                    f"{_span([r['min_entropy'] for r in runs])} |")
    h1 = store[0]["h1"] if store else float("nan")
    return ("Chapter 16's \"all together\" block (RMSNorm, RoPE, SwiGLU, 2 key/value heads, no biases) without "
            "and with QK-norm (`CausalLMConfig(qk_norm=True)`: RMSNorm on each head's queries and keys before "
            "the rotation; Dehghani et al. 2023), trained by chapter 16's protocol with the peak learning rate "
            "raised: Adam (0.9, 0.98), linear warm-up then constant, batches of 16 windows of 32 characters, "
            "1 thread. Held-out loss in nats per character (unigram entropy H1 = "
            f"{h1:.2f}); a run *failed* if that loss is not finite or above {FAILED_ABOVE} (H1 - 0.5, below "
            "which chapter 16 claims every run of its protocol ends). Largest "
            "logit: max |q.k|/sqrt(d_k) over allowed pairs, layers, heads and training steps; smallest mean "
            "entropy: of a head's attention weights, averaged over batch and queries, minimum over heads and "
            "steps (nats; a head uniform over the keys each query may see averages "
            "ln(t + 1) over t = 0..31, 2.55). Ranges are over the seeds. "
            "`python benchmarks/qk_norm.py run --seeds 0-4 --lrs ... --kernels default avx2`, then "
            "`python benchmarks/qk_norm.py report`.\n\n" + "\n".join(rows))


def write_report(store_path=None, results=None) -> None:
    import run as bench  # benchmarks/run.py: the report's one way of replacing a section

    store = json.loads(Path(store_path or STORE).read_text())
    results = Path(results or HERE / "RESULTS.md")
    text = results.read_text() if results.exists() else ""
    body = "## Chapter 16: QK-norm at raised learning rates\n\n" + table(store)
    results.write_text(bench.replace_section(text, SECTION, body).rstrip("\n") + "\n")
    print(table(store))


def _clip(text: str) -> float | None:
    return None if text == "none" else float(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", default="0-4")
    r.add_argument("--lrs", nargs="+", type=float, default=[5e-3, 0.1, 0.2])
    r.add_argument("--kernels", nargs="+", default=["default", "avx2"])
    r.add_argument("--steps", type=int, default=STEPS)
    r.add_argument("--warmup", type=int, default=WARMUP)
    r.add_argument("--clip", type=_clip, default=CLIP, help="gradient-norm clipping, or 'none'")
    r.add_argument("--jobs", type=int, default=2)
    o = sub.add_parser("one")
    o.add_argument("--seed", type=int, required=True)
    o.add_argument("--lr", type=float, required=True)
    o.add_argument("--qk-norm", action="store_true")
    o.add_argument("--steps", type=int, default=STEPS)
    o.add_argument("--warmup", type=int, default=WARMUP)
    o.add_argument("--clip", type=_clip, default=CLIP)
    sub.add_parser("report")
    args = parser.parse_args()
    if args.command == "one":
        print(json.dumps(one_run(args.seed, args.lr, args.qk_norm, args.steps, args.warmup, args.clip)))
    elif args.command == "run":
        run(parse_seeds(args.seeds), args.lrs, args.kernels, args.steps, args.warmup, args.clip, args.jobs)
    else:
        write_report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
