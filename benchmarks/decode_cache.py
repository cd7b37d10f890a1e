"""The encoder-decoder's key/value cache: how much faster greedy decoding and beam search run on
the shipped date model with it than without it.

    .venv/bin/python benchmarks/decode_cache.py                 # 1,000 test dates, 5 rounds
    .venv/bin/python benchmarks/decode_cache.py --rounds 9 --threads 2

Not a test: wall time on this machine (it prints the load average; run it when the machine is
quiet). For each search (greedy; beam search with 4 beams) it decodes the same 1,000 test dates
(spread over the calendar, `recipes.evenly_spaced`) in one batch, `--rounds` times with the cache
and `--rounds` times without, alternating, and prints the best and the median seconds of each
and the speed-up of both. It checks first that the two ways give the same tokens.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib.data import date_vocabs, make_date_splits  # noqa: E402
from transformer_lib.recipes import evenly_spaced  # noqa: E402
from transformer_lib.vocab import collate  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dates", type=int, default=1000, help="test dates decoded in one batch (default 1,000)")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each way (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch threads (default 1)")
    parser.add_argument("--beam", type=int, default=4, help="beam size (default 4)")
    args = parser.parse_args(argv)

    tl.runtime.setup(seed=0, threads=args.threads)
    src_vocab, tgt_vocab = date_vocabs()
    model, *_ = tl.checkpoints.load(tl.CHECKPOINTS / "transformer_dates.pt", src_vocab, tgt_vocab)
    pairs = evenly_spaced(make_date_splits(seed=0).test, args.dates)
    src, _ = collate(pairs, src_vocab, tgt_vocab)
    searches = {"greedy": lambda cache: tl.decoding.greedy_decode(model, src, 12, use_cache=cache),
                f"beam {args.beam}": lambda cache: tl.decoding.beam_search(model, src, 12, beam_size=args.beam,
                                                                            use_cache=cache)}
    load = [os.getloadavg()[0]]
    print(f"{len(pairs):,} test dates in one batch, the shipped date model, {args.threads} thread(s), "
          f"torch {torch.__version__}, {args.rounds} rounds")
    print(f"{'search':<8} {'cache':>12} {'best s':>8} {'median s':>9}   speed-up (best, median)")
    for name, run in searches.items():
        cached, uncached = run(True), run(False)  # a warm-up, and the check that both decode alike
        same = torch.equal(cached.tokens, uncached.tokens)
        times = {True: [], False: []}
        for _ in range(args.rounds):
            for cache in (True, False):
                start = time.perf_counter()
                run(cache)
                times[cache].append(time.perf_counter() - start)
        load.append(os.getloadavg()[0])
        best = {c: min(t) for c, t in times.items()}
        median = {c: statistics.median(t) for c, t in times.items()}
        for cache in (False, True):
            label = "with" if cache else "without"
            tail = (f"   {best[False] / best[True]:.2f}x, {median[False] / median[True]:.2f}x"
                    f"{'' if same else '  (tokens differ!)'}") if cache else ""
            print(f"{name:<8} {label:>12} {best[cache]:8.3f} {median[cache]:9.3f}{tail}")
    print(f"load average (1 min) while measuring: {', '.join(f'{x:.1f}' for x in load)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
