"""Data parallelism: the date model trained with DistributedDataParallel through the book's one
loop (Li et al. 2020, arXiv:2006.15704).
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import time
from functools import partial

import torch
import torch.distributed as dist
from torch import nn

from .._checks import check_positive_int
from ..model import Transformer, TransformerConfig
from ..training import TrainConfig, train
from ..vocab import collate, make_loader
from .launch import worker_device


def build_model(config: dict, state: dict | None = None, dtype: torch.dtype = torch.float32,
                device: str | torch.device | None = None) -> Transformer:
    """`Transformer(TransformerConfig(**config))` in `dtype` on `device` (default the CPU), with
    the weights `state` if given: how every process makes the same model."""
    model = Transformer(TransformerConfig(**config)).to(dtype=dtype, device=device or "cpu")
    if state is not None:
        model.load_state_dict(state)
    return model


def shard_loader(pairs, src_vocab, tgt_vocab, global_batch: int, rank: int | None = None,
                 world_size: int | None = None):
    """This process's part of every global batch of `pairs`, in order, as (src, tgt) id batches.

    PyTorch's `DistributedSampler` (without shuffling) gives rank r the items r, r + P, r + 2P,
    ...; batches of global_batch / P of them make, over the P processes, exactly the global
    batches that `vocab.make_loader(pairs, ..., batch_size=global_batch, shuffle=False)` reads
    in one process. Shuffle `pairs` beforehand if you want a random order.
    """
    rank = dist.get_rank() if rank is None else rank
    world_size = dist.get_world_size() if world_size is None else world_size
    check_positive_int("global_batch", global_batch)
    if global_batch % world_size:
        raise ValueError(f"global_batch={global_batch} must be divisible by the number of processes {world_size}")
    sampler = torch.utils.data.DistributedSampler(pairs, num_replicas=world_size, rank=rank, shuffle=False,
                                                  drop_last=True)
    return torch.utils.data.DataLoader(list(pairs), batch_size=global_batch // world_size, sampler=sampler,
                                       collate_fn=partial(collate, src_vocab=src_vocab, tgt_vocab=tgt_vocab))


def seconds_per_step(model: nn.Module, loader, cfg: TrainConfig, steps: int, warmup_steps: int = 2) -> float:
    """Wall-clock seconds per training step of `training.train` on `model` (a measurement): a
    short warm-up run first, then `steps` steps timed together. Changes the model's weights."""
    check_positive_int("steps", steps)
    train(model, loader, None, _with(cfg, max_steps=warmup_steps))
    start = time.perf_counter()
    train(model, loader, None, _with(cfg, max_steps=steps))
    return (time.perf_counter() - start) / steps


def time_all_reduce(n_elements: int, repeats: int = 20, dtype: torch.dtype = torch.float32,
                    device: str | torch.device | None = None) -> float:
    """Median seconds of one `all_reduce` of `n_elements` numbers across the process group."""
    x = torch.ones(n_elements, dtype=dtype, device=device or "cpu")
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _with(cfg: TrainConfig, **changes) -> TrainConfig:
    return dataclasses.replace(cfg, **changes)


def _counting_all_reduce(counts: list, bucket):
    """A DDP communication hook: DDP's own all-reduce of a bucket of gradients, after noting
    how many numbers the bucket holds."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    counts.append(bucket.buffer().numel())
    return allreduce_hook(None, bucket)


def data_parallel_worker(config: dict, state: dict, pairs, vocabs, cfg: TrainConfig, global_batch: int,
                         timing_steps: int = 0, timing_rounds: int = 2,
                         device: str | torch.device | None = None) -> dict:
    """Train the model `config` from the weights `state` in float64, wrapped in PyTorch's
    `DistributedDataParallel`, with `training.train` and `cfg`, each process reading its
    share of every global batch (`shard_loader`). The models are built on `device` (default the
    CPU; "cuda": GPU `LOCAL_RANK`, as NCCL needs); `train` moves the batches there.

    Returns {"state": the trained weights (on the CPU), "loss": this process's loss per step,
    "all_reduced": numbers all-reduced per step (counted by a DDP communication hook)}.

    With `timing_steps`, also measures, in float32 on the same batches, `timing_rounds` times
    in turn: seconds per step of one process alone on the whole global batch and on its own
    shard of it (rank 0, while the others wait: the second is the step time DDP would reach
    with free communication and free cores) and of all the processes with DDP; keeps the best
    of the rounds ("single_seconds_per_step", "shard_seconds_per_step", "seconds_per_step"),
    "all_reduce_seconds", one all-reduce of as many float32 numbers as the model has
    parameters, and "load", the machine's load averages over 1, 5 and 15 minutes at the end.
    """
    from torch.nn.parallel import DistributedDataParallel

    device = worker_device(device)
    loader = shard_loader(pairs, *vocabs, global_batch)
    model = DistributedDataParallel(build_model(config, state, torch.float64, device))
    counts: list[int] = []
    model.register_comm_hook(counts, _counting_all_reduce)
    history = train(model, loader, None, cfg)
    out = {"state": {k: v.cpu() for k, v in model.module.state_dict().items()}, "loss": history.loss,
           "all_reduced": sum(counts) / len(history.loss)}
    if timing_steps:
        whole = make_loader(pairs, *vocabs, batch_size=global_batch, shuffle=False)
        single, shard, together = [], [], []
        for _ in range(timing_rounds):
            if dist.get_rank() == 0:
                single.append(seconds_per_step(build_model(config, state, device=device), whole, cfg, timing_steps))
                shard.append(seconds_per_step(build_model(config, state, device=device), loader, cfg, timing_steps))
            dist.barrier()  # the other processes wait (without using the processor) meanwhile
            fast = DistributedDataParallel(build_model(config, state, device=device))
            together.append(seconds_per_step(fast, loader, cfg, timing_steps))
        out["single_seconds_per_step"] = min(single) if single else None
        out["shard_seconds_per_step"] = min(shard) if shard else None
        out["load"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
        out["seconds_per_step"] = min(together)
        out["all_reduce_seconds"] = time_all_reduce(sum(p.numel() for p in fast.parameters()), device=device)
    return out
