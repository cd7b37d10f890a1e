"""Chapter 17's exercises: weigh the shards of a batch, and simulate a ring all-reduce.

- `check_shard_loss_scale(fn)`: `fn(n_local, n_total, world_size)` is the factor by which a
  process multiplies its own mean loss (over its `n_local` of the batch's `n_total` target
  tokens) so that DDP's average of the processes' gradients is the gradient of the whole batch's
  mean loss. The loss is linear in the per-token losses, so the check compares loss values.
- `check_ring_all_reduce(fn)`: `fn(tensors) -> (results, sent)` simulates, in one process, the
  ring all-reduce of a list of P equal-length 1-D tensors (one per process): a reduce-scatter
  then an all-gather around the ring, each of P - 1 steps passing one chunk of n / P numbers to
  the next process. `results[r]` is what process r ends with (the sum of all tensors) and
  `sent[r]` how many numbers process r sent; the check wants 2 (P - 1) / P * n for each.

Each returns a one-line verdict when the answer is right and raises AssertionError saying what
is wrong otherwise.
"""
from __future__ import annotations

import numbers

from typing import Callable

import torch

__all__ = ["check_shard_loss_scale", "check_ring_all_reduce", "ring_all_reduce_solution",
           "shard_loss_scale_solution"]


def shard_loss_scale_solution(n_local: int, n_total: int, world_size: int) -> float:
    """The reference answer: P N_r / N."""
    return world_size * n_local / n_total


def _number(value, what: str) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise AssertionError(f"{what} should be one number, got a tensor of shape "
                                 f"{tuple(value.shape)}")
        value = value.item()
    if isinstance(value, (bool, str)) or not isinstance(value, numbers.Real):
        raise AssertionError(f"{what} should be a number, got {value!r}")
    return float(value)  # int, float, NumPy's scalars, Fraction: any real number


def check_shard_loss_scale(fn: Callable) -> str:
    """Chapter 17, exercise 1. Returns "Correct: ..." or raises AssertionError saying which
    shards the factor gets wrong, and how."""
    if not callable(fn):
        raise TypeError(f"fn must be a function (n_local, n_total, world_size) -> factor, "
                        f"got {fn!r}")
    gen = torch.Generator().manual_seed(4)
    cases = [[20, 4], [7, 7]]          # unequal, then equal shards (the factor is then 1)
    for world_size in (3, 8):
        cases.append(torch.randint(1, 40, (world_size,), generator=gen).tolist())
    for sizes in cases:
        world_size, n_total = len(sizes), sum(sizes)
        losses = torch.rand(n_total, generator=gen, dtype=torch.float64)
        shards = losses.split(sizes)
        factors = [_number(fn(len(s), n_total, world_size),
                           f"shard_loss_scale({len(s)}, {n_total}, {world_size})")
                   for s in shards]
        ddp = sum(f * s.mean().item() for f, s in zip(factors, shards)) / world_size
        want = losses.mean().item()
        if abs(ddp - want) > 1e-6 * abs(want):
            ratio = ddp / want
            if abs(ratio * world_size - 1) < 1e-6:
                why = ("it is P times too small: DDP divides the sum of the gradients by P, "
                       "so the factor must undo that division")
            elif all(abs(f - 1) < 1e-12 for f in factors):
                why = "a factor of 1 is right only when every shard holds N / P tokens"
            else:
                why = ("each shard's mean must weigh as its share of the tokens, N_r / N, "
                       "after DDP's division by P")
            raise AssertionError(
                f"with {world_size} shards of {sizes} tokens your factors {factors} make DDP's "
                f"average {ddp:.6f}, the whole batch's mean is {want:.6f}: {why}")
    return "Correct: DDP's average of the scaled shard means is the whole batch's mean."


def ring_all_reduce_solution(tensors):
    """The reference answer: reduce-scatter then all-gather around a ring of P simulated
    processes, counting the numbers each one sends."""
    P = len(tensors)
    chunks = [list(t.clone().chunk(P)) for t in tensors]   # chunks[r][c]: process r's chunk c
    sent = [0] * P
    for step in range(P - 1):        # reduce-scatter: pass chunk (r - step) on, add it there
        messages = [(r, (r - step) % P, chunks[r][(r - step) % P].clone()) for r in range(P)]
        for r, c, message in messages:
            chunks[(r + 1) % P][c] += message
            sent[r] += message.numel()
    # now process r holds the whole sum of chunk (r + 1) % P
    for step in range(P - 1):        # all-gather: pass the finished chunks on, replace there
        messages = [(r, (r + 1 - step) % P, chunks[r][(r + 1 - step) % P].clone())
                    for r in range(P)]
        for r, c, message in messages:
            chunks[(r + 1) % P][c] = message
            sent[r] += message.numel()
    return [torch.cat(c) for c in chunks], sent


def check_ring_all_reduce(fn: Callable) -> str:
    """Chapter 17, exercise 2. Returns "Correct: ..." or raises AssertionError saying whether
    the results or the numbers sent are wrong, and how."""
    if not callable(fn):
        raise TypeError(f"fn must be a function tensors -> (results, sent), got {fn!r}")
    gen = torch.Generator().manual_seed(17)
    for P, n in ((2, 6), (3, 12), (4, 8), (5, 20)):
        tensors = [torch.randn(n, generator=gen, dtype=torch.float64) for _ in range(P)]
        originals = [t.clone() for t in tensors]
        out = fn(tensors)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise AssertionError(f"return (results, sent), two things; got {type(out).__name__}")
        results, sent = out
        if any(not torch.equal(t, o) for t, o in zip(tensors, originals)):
            raise AssertionError("your function changed the tensors it was given: each process's "
                                 "input should stay as it was (work on copies)")
        if len(results) != P or len(sent) != P:
            raise AssertionError(f"with P = {P} processes, results and sent need {P} entries "
                                 f"each, got {len(results)} and {len(sent)}")
        total = sum(originals)
        for r, got in enumerate(results):
            got = torch.as_tensor(got, dtype=torch.float64).flatten()
            if got.shape != total.shape:
                raise AssertionError(f"P = {P}: process {r} ends with {got.numel()} numbers, "
                                     f"it should hold all {n} of the sum")
            if torch.allclose(got * P, total, atol=1e-6):
                raise AssertionError(f"P = {P}: process {r} holds the mean, not the sum (an "
                                     "all-reduce adds; DDP divides by P afterwards)")
            if not torch.allclose(got, total, atol=1e-6):
                wrong = (got - total).abs().gt(1e-6).nonzero().flatten().tolist()
                raise AssertionError(
                    f"P = {P}: process {r} does not hold the sum at positions {wrong}: after "
                    "the reduce-scatter each process holds the sum of one chunk only; the "
                    "all-gather must hand every finished chunk around the ring")
        want = 2 * (P - 1) * n // P
        counts = [int(_number(s, f"sent[{r}]")) for r, s in enumerate(sent)]
        if counts != [want] * P:
            if counts == [(P - 1) * n] * P:
                why = ("that is every process sending its whole tensor to every other: the ring "
                       "sends chunks of n / P")
            elif counts == [2 * (P - 1) * n] * P:
                why = "each step should pass one chunk of n / P numbers, not the whole tensor"
            elif counts == [(P - 1) * n // P] * P:
                why = "that counts only one of the two passes (reduce-scatter and all-gather)"
            else:
                why = "each of the 2 (P - 1) steps sends one chunk of n / P numbers"
            raise AssertionError(f"P = {P}, n = {n}: your processes sent {counts} numbers, a ring "
                                 f"all-reduce sends {want} each: {why}")
    return "Correct: each process ends with the sum, having sent 2 (P - 1) / P * n numbers."
