"""Pipeline parallelism: a language model's layers cut into stages, one process each, fed
micro-batches by PyTorch's `torch.distributed.pipelining` schedules, GPipe (Huang et al. 2019,
arXiv:1811.06965) and 1F1B (PipeDream, Narayanan et al., SOSP 2019; the flushed form used here,
PipeDream-Flush, in section 2.2 of Narayanan et al. 2021, arXiv:2104.04473); and a simulation of
those schedules in time slots, which counts each stage's idle time (the "bubble").
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .._checks import check_choice, check_last_dim, check_positive_int, check_tensor, check_token_ids, entry_point
from ..lm import CausalLM, CausalLMConfig
from ..masks import causal_mask

#: The schedules `pipeline_worker` and `simulate_schedule` know.
SCHEDULES = ("gpipe", "1f1b")


class LMStage(nn.Module):
    """Stage `stage` of `stages` of a `CausalLM` (a copy of its parts): the first stage embeds the
    ids, each stage runs its share of the layers (consecutive, as even as possible), the last
    stage applies the final norm and the output layer. Stage s takes what stage s - 1 returns:
    ids (B, T) for the first, hidden states (B, T, d_model) for the others; the last returns
    logits (B, T, vocab_size). The output layer must not share the embedding's matrix
    (`tie_output=False`): the two live on different stages."""

    def __init__(self, model: CausalLM, stage: int, stages: int):
        super().__init__()
        if not isinstance(model, CausalLM):
            raise TypeError(f"model must be a transformer_lib CausalLM, got {type(model).__name__}")
        check_positive_int("stages", stages)
        n = len(model.layers)
        if stages > n:
            raise ValueError(f"stages={stages} is more than the model's {n} layers: every stage needs one")
        if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < stages:
            raise ValueError(f"stage must be an integer in 0..{stages - 1}, got {stage!r}")
        if model.config.tie_output:
            raise ValueError("model must be built with tie_output=False: its embedding (first stage) and "
                             "output layer (last stage) cannot share one matrix across processes")
        self.first, self.last = stage == 0, stage == stages - 1
        self.d_model = model.config.d_model
        self.layer_ids = stage_layers(n, stages)[stage]
        self.embed = copy.deepcopy(model.embed) if self.first else None
        self.layers = nn.ModuleList(copy.deepcopy(model.layers[i]) for i in self.layer_ids)
        self.norm = copy.deepcopy(model.norm) if self.last else None
        self.out = copy.deepcopy(model.out) if self.last else None

    def _check(self, x: torch.Tensor) -> None:
        if self.first:
            check_token_ids("x", x, self.embed.num_embeddings)
        else:  # shape only: PyTorch's schedules first run a stage on an uninitialised buffer
            check_tensor("x", x, ndim=3, floating=True)
            check_last_dim("x", x, self.d_model)

    @entry_point(_check)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The layers of this stage skip their own input checks (this is the entry point), so that
        PyTorch's shape inference may run them on a buffer that holds NaNs."""
        h = self.embed(x) if self.first else x
        mask = causal_mask(h.shape[1], device=h.device)
        for layer in self.layers:
            h = layer(h, mask)
        return self.out(self.norm(h)) if self.last else h

    def full_names(self) -> dict[str, str]:
        """This stage's parameter names -> the whole model's (`layers.0.` -> `layers.{i}.`)."""
        names = {}
        for name, _ in self.named_parameters():
            if name.startswith("layers."):
                _, j, rest = name.split(".", 2)
                names[name] = f"layers.{self.layer_ids[int(j)]}.{rest}"
            else:
                names[name] = name
        return names


def stage_layers(n_layers: int, stages: int) -> list[list[int]]:
    """The layers of each stage: consecutive, the first stages one more when they do not divide."""
    check_positive_int("n_layers", n_layers)
    check_positive_int("stages", stages)
    if stages > n_layers:
        raise ValueError(f"stages={stages} is more than n_layers={n_layers}: every stage needs a layer")
    base, extra = divmod(n_layers, stages)
    bounds = [0]
    for s in range(stages):
        bounds.append(bounds[-1] + base + (s < extra))
    return [list(range(bounds[s], bounds[s + 1])) for s in range(stages)]


def _lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def pipeline_worker(config: dict, state: dict, ids: torch.Tensor, targets: torch.Tensor, micro_batches: int,
                    schedule: str = "gpipe", dtype: torch.dtype = torch.float64) -> dict:
    """One training step's forward and backward pass of the `CausalLM(CausalLMConfig(**config))`
    with weights `state`, cut into one stage per process (`LMStage`) and run by PyTorch's
    `ScheduleGPipe` or `Schedule1F1B` over `micro_batches` micro-batches of the batch
    (ids, targets), each (B, T) with B divisible by `micro_batches`. The loss is the mean
    next-token cross-entropy of each micro-batch; the schedule adds the micro-batches' gradients
    and divides by their number (`scale_grads`), which is the whole batch's mean loss gradient.

    Returns {"stage", "loss" (the mean of the micro-batch losses, on the last stage; None on the
    others), "grads" (this stage's gradients, under the whole model's parameter names)}."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    check_choice("schedule", schedule, SCHEDULES)
    check_positive_int("micro_batches", micro_batches)
    if ids.shape != targets.shape or ids.dim() != 2:
        raise ValueError(f"ids and targets must both be (batch, T), got {tuple(ids.shape)} and "
                         f"{tuple(targets.shape)}")
    if ids.shape[0] % micro_batches:
        raise ValueError(f"the batch of {ids.shape[0]} must divide into micro_batches={micro_batches}")
    rank, stages = dist.get_rank(), dist.get_world_size()
    model = CausalLM(CausalLMConfig(**config)).to(dtype)
    model.load_state_dict(state)
    stage = LMStage(model, rank, stages)
    pipe_stage = PipelineStage(stage, rank, stages, torch.device("cpu"))
    kind = ScheduleGPipe if schedule == "gpipe" else Schedule1F1B
    runner = kind(pipe_stage, micro_batches, loss_fn=_lm_loss)
    losses: list = []
    if stage.first and stage.last:
        runner.step(ids, target=targets, losses=losses)
    elif stage.first:
        runner.step(ids)
    elif stage.last:
        runner.step(target=targets, losses=losses)
    else:
        runner.step()
    names = stage.full_names()
    grads = {names[n]: p.grad.detach().clone() for n, p in stage.named_parameters()}
    loss = torch.stack(losses).mean().detach() if stage.last else None
    return {"stage": rank, "loss": loss, "grads": grads}


def simulate_schedule(stages: int, micro_batches: int, schedule: str = "gpipe",
                      backward_slots: int = 1) -> list[list[str | None]]:
    """The time slots of one training step of a pipeline, as each stage spends them.

    Stage s runs, for micro-batch i, a forward pass "F{i}" (one slot, after stage s - 1's F{i})
    and a backward pass "B{i}" (`backward_slots` slots, after stage s + 1's B{i}, or on the last
    stage after its own F{i}). GPipe runs every forward, then every backward; 1F1B lets stage s
    run stages - s - 1 forwards ahead, then alternates one forward and one backward. Each stage
    starts its next pass as soon as that pass may start. Returns one row per stage, a slot per
    entry: the pass it runs ("F0", "B3", ...), or None when the stage waits."""
    check_positive_int("stages", stages)
    check_positive_int("micro_batches", micro_batches)
    check_positive_int("backward_slots", backward_slots)
    check_choice("schedule", schedule, SCHEDULES)
    m = micro_batches
    orders = []
    for s in range(stages):
        if schedule == "gpipe":
            order = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
        else:
            ahead = min(stages - s - 1, m)
            order = [("F", i) for i in range(ahead)]
            for i in range(m):
                if ahead + i < m:
                    order.append(("F", ahead + i))
                order.append(("B", i))
        orders.append(order)
    done: dict[tuple[str, int, int], int] = {}  # (pass, micro-batch, stage) -> the slot it ends at
    rows: list[list[str | None]] = [[] for _ in range(stages)]
    nxt, busy_until, t = [0] * stages, [0] * stages, 0
    while any(nxt[s] < len(orders[s]) for s in range(stages)):
        for s in range(stages):
            if busy_until[s] > t:
                continue
            if nxt[s] == len(orders[s]):
                rows[s].append(None)
                continue
            kind, i = orders[s][nxt[s]]
            if kind == "F":
                ready = s == 0 or done.get(("F", i, s - 1), t + 1) <= t
                length = 1
            else:
                after = ("F", i, s) if s == stages - 1 else ("B", i, s + 1)
                ready = done.get(after, t + 1) <= t
                length = backward_slots
            if ready:
                rows[s].extend([f"{kind}{i}"] * length)
                done[(kind, i, s)] = t + length
                busy_until[s] = t + length
                nxt[s] += 1
            else:
                rows[s].append(None)
        t += 1
    width = max(len(r) for r in rows)
    return [r + [None] * (width - len(r)) for r in rows]


def idle_fraction(rows: list[list[str | None]]) -> list[float]:
    """Each stage's share of the step's time slots spent waiting (the bubble), from the rows of
    `simulate_schedule`."""
    if not rows or not all(isinstance(r, (list, tuple)) for r in rows):
        raise ValueError("rows must be the non-empty list of rows that simulate_schedule returns")
    return [sum(slot is None for slot in r) / len(r) for r in rows]


def bubble_formula(stages: int, micro_batches: int) -> float:
    """(p - 1) / (m + p - 1): the idle fraction of every stage of a GPipe or 1F1B schedule with p
    stages and m micro-batches, when every forward pass takes the same time and every backward
    pass too (GPipe's bubble overhead, Huang et al. 2019; Narayanan et al. 2021,
    section 2.2.1, give the same bubble as (p - 1) / m of the ideal, bubble-free time)."""
    check_positive_int("stages", stages)
    check_positive_int("micro_batches", micro_batches)
    return (stages - 1) / (micro_batches + stages - 1)


def pipeline_schedules_worker(config: dict, state: dict, ids: torch.Tensor, targets: torch.Tensor,
                              micro_batches: int, schedules: tuple[str, ...] = SCHEDULES,
                              dtype: torch.dtype = torch.float64) -> dict:
    """`pipeline_worker` once per schedule in `schedules`, in one launch: {schedule: result}."""
    if isinstance(schedules, str) or not schedules:
        raise ValueError(f"schedules must be a non-empty tuple of names from {SCHEDULES}, got {schedules!r}")
    for schedule in schedules:
        check_choice("schedule", schedule, SCHEDULES)
    return {s: pipeline_worker(config, state, ids, targets, micro_batches, s, dtype) for s in schedules}
