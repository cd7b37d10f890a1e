"""Claims about runs: a measured value and the bound the chapter's prose rests on.

A cell that trains a model, decodes with an under-trained one or times something measures a
quantity that moves from machine to machine (another kernel set adds numbers in another order)
and from seed to seed. Such a cell states its claim as

    assert book.claim("beam search's short answers, over greedy's", ratio, at_least=1.3)

`claim` checks the bound and, when it fails, raises an AssertionError that names the claim,
the value and the bound. The bound is not the stored run's value: it is what held over at
least five seeds and PyTorch's `default` and `avx2` kernel sets, with room to spare, as
measured by `benchmarks/sweep_claims.py` (its table is in `benchmarks/RESULTS.md`).

The sweep runs each chapter with the environment variable `TL_SEED` (which `book.setup` takes
instead of the seed the setup cell names) and `TL_CLAIMS_LOG` (a file): every claim then
appends one JSON line (chapter, claim, value, bound, whether it held, seed, kernel set) to the
file and does not raise, so that one run reports every claim of the chapter.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

__all__ = ["LOG_VARIABLE", "SEED_VARIABLE", "claim", "seed"]

#: The file a sweep collects the claims in (one JSON line each); unset, claims only assert.
LOG_VARIABLE = "TL_CLAIMS_LOG"
#: The seed a sweep runs a chapter with, in place of the setup cell's.
SEED_VARIABLE = "TL_SEED"

_SEED = {"value": 0}


def seed(offset: int = 0) -> int:
    """The chapter's seed (the setup cell's, or `TL_SEED` under the sweep) plus `offset`: a cell
    that re-seeds before a run it measures seeds with this, so that the sweep varies it."""
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"offset must be a non-negative integer, got {offset!r}")
    return _SEED["value"] + offset


def chosen_seed(seed_in_cell: int) -> int:
    """The seed `book.setup` uses: `TL_SEED` when set (the sweep), else the setup cell's."""
    text = os.environ.get(SEED_VARIABLE, "").strip()
    if not text:
        value = seed_in_cell
    elif text.isdigit():
        value = int(text)
    else:
        raise ValueError(f"{SEED_VARIABLE} must be a non-negative integer, got {text!r}")
    _SEED["value"] = value
    return value


def _number(name: str, value) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"claim {name!r}: the value must be one number, got a tensor of shape "
                             f"{tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"claim {name!r}: the value must be a number, got {type(value).__name__}")
    return float(value)


def claim(name: str, value, *, at_least: float | None = None, at_most: float | None = None) -> bool:
    """Check that `value` (a number, or a one-element tensor) lies in [at_least, at_most]
    (either bound may be left out, not both); return True, or raise an AssertionError that
    names the claim, the value and the bound. Under the sweep (`TL_CLAIMS_LOG` set) record the
    claim and return True whether or not it held."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if at_least is None and at_most is None:
        raise ValueError(f"claim {name!r}: give at_least, at_most or both")
    bounds = [_number(name, b) if b is not None else None for b in (at_least, at_most)]
    if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
        raise ValueError(f"claim {name!r}: at_least {bounds[0]} is above at_most {bounds[1]}")
    number = _number(name, value)
    holds = not math.isnan(number) and (bounds[0] is None or number >= bounds[0]) and (
        bounds[1] is None or number <= bounds[1])
    log = os.environ.get(LOG_VARIABLE, "").strip()
    if log:
        record = {"claim": name, "value": number, "at_least": bounds[0], "at_most": bounds[1],
                  "holds": holds, "seed": _SEED["value"],
                  "kernels": os.environ.get("ATEN_CPU_CAPABILITY") or torch.backends.cpu.get_cpu_capability(),
                  "chapter": os.environ.get("TL_CHAPTER", "")}
        with Path(log).open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        return True
    if not holds:
        bound = " and ".join(f"{word} {b:g}" for word, b in zip(("at least", "at most"), bounds)
                             if b is not None)
        raise AssertionError(f"claim {name!r} does not hold here: measured {number:.4g}, the chapter "
                             f"claims {bound}")
    return True
