"""Chapter 17's exercises: weigh the shards of a batch, and simulate a ring all-reduce.

- `check_shard_loss_scale(fn)`: `fn(n_local, n_total, world_size)` is the factor by which a
  process multiplies its own mean loss (over its `n_local` of the batch's `n_total` target
  tokens) so that DDP's average of the processes' gradients is the gradient of the whole batch's
  mean loss. The loss is linear in the per-token losses, so the check compares loss values.
- `check_ring_all_reduce(fn)`: `fn(tensors, send) -> results` simulates, in one process, the
  ring all-reduce of a list of P equal-length 1-D tensors (one per process): a reduce-scatter
  then an all-gather around the ring, each of P - 1 rounds passing one chunk of n / P numbers
  to the next process. Every message goes through `send(src, dst, chunk)`, which records it
  and returns the receiver's copy. `results[r]` is what process r ends with (the sum of all
  tensors). The check follows the numbers: each message must go to a neighbour, hold one
  chunk, carry only what its sender had by then (a process's k-th message goes out in round
  k), and every process must end with the sum having received every share of it, in
  2 (P - 1) messages each: 2 (P - 1) / P * n numbers.

Each returns a one-line verdict when the answer is right and raises AssertionError saying what
is wrong otherwise.
"""
from __future__ import annotations

import copy
import itertools
import numbers

from typing import Callable

import torch

__all__ = ["check_shard_loss_scale", "check_ring_all_reduce", "ring_all_reduce_solution",
           "shard_loss_scale_solution"]


def shard_loss_scale_solution(n_local: int, n_total: int, world_size: int) -> float:
    """The reference answer: P N_r / N."""
    return world_size * n_local / n_total


def _number(value, what: str) -> float:
    if hasattr(value, "item") and hasattr(value, "shape"):   # a tensor or a NumPy array
        size = value.numel() if isinstance(value, torch.Tensor) else getattr(value, "size", 1)
        if size != 1:
            raise AssertionError(f"{what} should be one number, got an array of shape "
                                 f"{tuple(value.shape)}")
        value = value.item()
    if isinstance(value, (bool, str)) or not isinstance(value, numbers.Number) \
            or isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        raise AssertionError(f"{what} should be a number, got {value!r}")
    return float(value)  # int, float, NumPy's scalars, Fraction, Decimal: any real number


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


def ring_all_reduce_solution(tensors, send):
    """The reference answer: reduce-scatter then all-gather around a ring of P simulated
    processes, every chunk passed to the next process through `send`."""
    P = len(tensors)
    chunks = [list(t.clone().chunk(P)) for t in tensors]   # chunks[r][c]: process r's chunk c
    for step in range(P - 1):        # reduce-scatter: pass chunk (r - step) on, add it there
        messages = [(r, (r - step) % P) for r in range(P)]
        arrived = [send(r, (r + 1) % P, chunks[r][c]) for r, c in messages]
        for (r, c), received in zip(messages, arrived):
            chunks[(r + 1) % P][c] += received
    # now process r holds the whole sum of chunk (r + 1) % P
    for step in range(P - 1):        # all-gather: pass the finished chunks on, replace there
        messages = [(r, (r + 1 - step) % P) for r in range(P)]
        arrived = [send(r, (r + 1) % P, chunks[r][c]) for r, c in messages]
        for (r, c), received in zip(messages, arrived):
            chunks[(r + 1) % P][c] = received
    return [torch.cat(c) for c in chunks]


class _Ring:
    """The checker's network: `send(src, dst, chunk)` records the message and hands the
    receiver a copy; `messages[r]` lists process r's messages in the order it sent them."""

    def __init__(self, P: int):
        self.P = P
        self.messages: list[list[tuple[int, torch.Tensor]]] = [[] for _ in range(P)]

    def send(self, src, dst, chunk):
        for name, value in (("src", src), ("dst", dst)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
                    or not 0 <= value < self.P:
                raise AssertionError(f"send(src, dst, chunk): {name} should be a process "
                                     f"number from 0 to {self.P - 1}, got {value!r}")
        try:
            values = torch.as_tensor(chunk, dtype=torch.float64).detach().clone().flatten()
        except (TypeError, ValueError, RuntimeError) as err:
            raise AssertionError(f"send(src, dst, chunk): chunk should be numbers (a tensor "
                                 f"or a list), got {type(chunk).__name__}") from err
        self.messages[int(src)].append((int(dst), values))
        return chunk.clone() if isinstance(chunk, torch.Tensor) else copy.deepcopy(chunk)


def _contents(values: torch.Tensor, chunks: list[list[torch.Tensor]]):
    """Which chunk c, summed over which processes S, a message carries: (c, S) or None."""
    P = len(chunks)
    for c in range(P):
        if values.shape != chunks[0][c].shape:
            continue
        for size in range(1, P + 1):
            for S in itertools.combinations(range(P), size):
                if torch.allclose(values, sum(chunks[r][c] for r in S), rtol=1e-5, atol=1e-5):
                    return c, frozenset(S)
    return None


def _check_messages(ring: _Ring, chunks, n: int) -> list[list[set]]:
    """Follow the numbers around the ring, round by round (a process's k-th message goes out
    in round k, all at once). Returns what each process knows at the end: known[r][c] is the
    set of processes whose chunk c process r has had a share of."""
    P = ring.P
    known = [[{r} for _ in range(P)] for r in range(P)]
    rounds = max(len(m) for m in ring.messages)
    for k in range(rounds):
        arriving = []
        for src in range(P):
            if k >= len(ring.messages[src]):
                continue
            dst, values = ring.messages[src][k]
            where = f"P = {P}: process {src}'s message {k + 1} (to process {dst})"
            if dst not in ((src + 1) % P, (src - 1) % P):
                raise AssertionError(f"{where} skips the ring: a process sends only to its "
                                     f"neighbours, {(src - 1) % P} and {(src + 1) % P}")
            if values.numel() != n // P:
                why = (" (the whole tensor: the ring passes one chunk at a time)"
                       if values.numel() == n else "")
                raise AssertionError(f"{where} holds {values.numel()} numbers{why}; each "
                                     f"message is one chunk of n / P = {n // P}")
            found = _contents(values, chunks)
            if found is None:
                raise AssertionError(f"{where} is not one chunk of the inputs, nor a sum of "
                                     "the same chunk over some processes")
            c, S = found
            if not S <= known[src][c]:
                missing = sorted(S - known[src][c])
                raise AssertionError(
                    f"{where} carries chunk {c} of process(es) {missing}, which process {src} "
                    f"had not received by then: in a round every process sends at once, so "
                    "what arrives in a round can go on only in the next one")
            arriving.append((dst, c, S))
        for dst, c, S in arriving:
            known[dst][c] |= S
    return known


def _counts_like(value, P: int) -> bool:
    """True for the exercise's old second return value: P whole numbers of values sent."""
    return isinstance(value, (list, tuple)) and len(value) == P and all(
        isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in value)


def _as_send(deliver: Callable) -> Callable:
    """`deliver` as the `send(src, dst, chunk)` the reader's function is given: every run gets
    the same kind of function, so an answer cannot tell the marked run from the others."""
    def send(src, dst, chunk):
        return deliver(src, dst, chunk)
    return send


def _check_built_from_messages(fn: Callable) -> None:
    """Run `fn` once more with a `send` that delivers every chunk plus 1000 (dst + 1), an amount
    that depends on the receiver. A process whose result is built from what it received ends
    far from the plain sum in every position, and at another place than every other process
    (the marks it collected differ); one that reads the inputs, or copies another process's
    numbers instead of what `send` handed it, does not."""
    gen = torch.Generator().manual_seed(18)
    P, n = 3, 12
    tensors = [torch.randn(n, generator=gen, dtype=torch.float64) for _ in range(P)]
    total = sum(t.clone() for t in tensors)

    def marked(src, dst, chunk):
        moved = torch.as_tensor(chunk, dtype=torch.float64) + 1000.0 * (int(dst) + 1)
        return moved.to(chunk.dtype) if isinstance(chunk, torch.Tensor) else moved.tolist()

    results = [torch.as_tensor(got, dtype=torch.float64).flatten() for got in fn(tensors, _as_send(marked))]
    for r, got in enumerate(results):
        if got.shape == total.shape and (got - total).abs().lt(1.0).any():
            raise AssertionError(
                f"process {r}'s result does not come from the messages: when every message "
                "arrived changed, it still held the plain sum. Each process may use only its own "
                "tensor and what send hands back to it")
    for r in range(len(results)):
        for q in range(r):
            if results[r].shape == results[q].shape and (results[r] - results[q]).abs().lt(1.0).any():
                raise AssertionError(
                    f"processes {q} and {r} end with the same numbers even when every message is "
                    "changed on arrival by an amount that depends on its receiver: a process's "
                    "result must be built from what send handed to it, not copied from another "
                    "process's memory")


def check_ring_all_reduce(fn: Callable) -> str:
    """Chapter 17, exercise 2. Returns "Correct: ..." or raises AssertionError saying whether
    the results or the messages are wrong, and how."""
    if not callable(fn):
        raise TypeError(f"fn must be a function (tensors, send) -> results, got {fn!r}")
    gen = torch.Generator().manual_seed(17)
    for P, n in ((2, 6), (3, 12), (4, 8), (5, 20)):
        tensors = [torch.randn(n, generator=gen, dtype=torch.float64) for _ in range(P)]
        originals = [t.clone() for t in tensors]
        ring = _Ring(P)
        results = fn(tensors, _as_send(ring.send))
        if isinstance(results, tuple) and len(results) == 2 and _counts_like(results[1], P):
            raise AssertionError("return the results only: the check counts what each "
                                 "process sends through send itself")
        try:
            results = list(results)
        except TypeError as err:
            raise AssertionError(f"return a list of P results, one per process; got "
                                 f"{type(results).__name__}") from err
        if any(not torch.equal(t, o) for t, o in zip(tensors, originals)):
            raise AssertionError("your function changed the tensors it was given: each process's "
                                 "input should stay as it was (work on copies)")
        if len(results) != P:
            raise AssertionError(f"with P = {P} processes, return {P} results, got "
                                 f"{len(results)}")
        total = sum(originals)
        for r, got in enumerate(results):
            got = torch.as_tensor(got, dtype=torch.float64).flatten()
            if got.shape != total.shape:
                raise AssertionError(f"P = {P}: process {r} ends with {got.numel()} numbers, "
                                     f"it should hold all {n} of the sum")
            if torch.allclose(got * P, total, atol=1e-5):
                raise AssertionError(f"P = {P}: process {r} holds the mean, not the sum (an "
                                     "all-reduce adds; DDP divides by P afterwards)")
            if not torch.allclose(got, total, atol=1e-5):
                wrong = (got - total).abs().gt(1e-5).nonzero().flatten().tolist()
                raise AssertionError(
                    f"P = {P}: process {r} does not hold the sum at positions {wrong}: after "
                    "the reduce-scatter each process holds the sum of one chunk only; the "
                    "all-gather must hand every finished chunk around the ring")
        chunks = [list(t.chunk(P)) for t in originals]
        known = _check_messages(ring, chunks, n)
        for r in range(P):
            for c in range(P):
                if len(known[r][c]) < P:
                    missing = sorted(set(range(P)) - known[r][c])
                    raise AssertionError(
                        f"P = {P}: process {r} ends with the sum, but chunk {c} of process(es) "
                        f"{missing} never reached it through send: every number a process "
                        "uses from another must travel around the ring as a message")
        counts = [len(m) for m in ring.messages]
        if counts != [2 * (P - 1)] * P:
            raise AssertionError(f"P = {P}: your processes sent {counts} messages; a ring "
                                 f"all-reduce needs 2 (P - 1) = {2 * (P - 1)} each, P - 1 to "
                                 "add the chunks up and P - 1 to hand the sums round")
    _check_built_from_messages(fn)
    sent = sum(values.numel() for _, values in ring.messages[0])
    return (f"Correct: every process ends with the sum, having sent 2 (P - 1) chunks of n / P "
            f"numbers to its neighbour ({sent} for P = {P}, n = {n}).")
