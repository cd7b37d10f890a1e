"""Sharded state: parameters, gradients and optimizer state split across processes with FSDP2's
fully_shard (ZeRO, Rajbhandari et al. 2020, arXiv:1910.02054; PyTorch FSDP, Zhao et al. 2023,
arXiv:2304.11277).
"""
from __future__ import annotations

import warnings

import torch
from torch import nn

from ..training import TrainConfig, seq2seq_loss, train
from .data import build_model, seconds_per_step, shard_loader
from .launch import worker_device


def shard_model(model: nn.Module) -> nn.Module:
    """Shard `model`'s parameters, gradients and optimizer state over the processes with
    PyTorch's FSDP2 (`fully_shard`): each layer of the stacks' `layers` lists (the encoder's
    and the decoder's, or a language model's) its own unit (its weights are gathered just
    before it runs and freed after), then the rest of the model one more unit. Changes and
    returns `model`; its parameters become DTensors, each process holding about 1/P of every
    one."""
    from torch.distributed.fsdp import fully_shard

    stacks = [m for name, m in model.named_modules() if name.split(".")[-1] == "layers" and isinstance(m, nn.ModuleList)]
    for stack in stacks:
        for layer in stack:
            fully_shard(layer)
    fully_shard(model)
    return model


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes of the parameters, gradients and optimizer state held by this process (for a
    sharded model, its shards)."""
    nbytes = lambda t: _local(t).numel() * _local(t).element_size()  # noqa: E731
    params = list(model.parameters())
    state = [v for s in (optimizer.state.values() if optimizer else []) for v in s.values() if torch.is_tensor(v)]
    return {"parameters": sum(nbytes(p) for p in params),
            "gradients": sum(nbytes(p.grad) for p in params if p.grad is not None),
            "optimizer": sum(nbytes(v) for v in state)}


def _one_adam_step(model: nn.Module, batch, cfg: TrainConfig) -> torch.optim.Optimizer:
    """One step of Adam on `batch` with `train`'s loss; returns the optimizer, whose state now exists."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=tuple(cfg.betas), eps=cfg.adam_eps)
    seq2seq_loss(model, batch, cfg).backward()
    optimizer.step()
    return optimizer


def sharded_worker(config: dict, state: dict, pairs, vocabs, cfg: TrainConfig, global_batch: int,
                   timing_steps: int = 0, device: str | torch.device | None = None) -> dict:
    """Train the model `config` from `state` in float64 with its state sharded by FSDP2
    (`shard_model`), with `training.train`, `cfg` and `shard_loader`, as
    `data_parallel_worker` does with DDP, on `device` (default the CPU; "cuda": GPU
    `LOCAL_RANK`).

    Returns {"state": the trained weights, gathered whole ("full_tensor"), "loss": per step,
    "bytes": {"sharded": ..., "replicated": ...}: `state_bytes` after one Adam step on the
    first batch, for a fresh sharded copy and for a fresh DDP copy (what data parallelism
    holds)}; with `timing_steps`, also "seconds_per_step" of a sharded float32 copy (a
    measurement).
    """
    from torch.nn.parallel import DistributedDataParallel

    warnings.filterwarnings("ignore", message=".*returned a view tensor.*")  # train() never writes into it
    device = worker_device(device)
    loader = shard_loader(pairs, *vocabs, global_batch)
    model = shard_model(build_model(config, state, torch.float64, device))
    history = train(model, loader, None, cfg)
    full = {name: (t.full_tensor() if hasattr(t, "full_tensor") else t).cpu() for name, t in model.state_dict().items()}
    first = [t.to(device) for t in next(iter(loader))]
    sharded = shard_model(build_model(config, state, torch.float64, device))
    replicated = DistributedDataParallel(build_model(config, state, torch.float64, device))
    out = {"state": full, "loss": history.loss,
           "bytes": {"sharded": state_bytes(sharded, _one_adam_step(sharded, first, cfg)),
                     "replicated": state_bytes(replicated, _one_adam_step(replicated, first, cfg))}}
    if timing_steps:
        out["seconds_per_step"] = seconds_per_step(shard_model(build_model(config, state, device=device)), loader, cfg,
                                                   timing_steps)
    return out
