"""Two kinds at once: a grid of processes (PyTorch's `DeviceMesh`) with tensor parallelism
inside each row and data parallelism down each column (Narayanan et al. 2021,
arXiv:2104.04473, combine them, with pipelines, as "PTD-P").

With dp x tp processes, ranks r = d * tp + t: the processes d * tp .. d * tp + tp - 1 split one
replica of the layer with `tensor_parallel` (the chapter's Megatron-LM layers, talking over the
mesh's "tp" group), and the processes t, tp + t, 2 tp + t, ... hold the same slice of it and
average their gradients over the "dp" group, each reading its share of the batch.
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch import nn

from .._checks import check_positive_int, check_positive_number
from .tensor import tensor_parallel


def mesh_step_worker(layer: nn.Module, x: torch.Tensor, lr: float, dp: int = 2, tp: int = 2) -> dict:
    """One training step of `layer` (an `EncoderLayer`, float64) on a (dp, tp) `DeviceMesh` of
    the launched processes (`init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))`).

    The loss is `0.5 * mean(layer(x) ** 2)` over the batch x (B, T, d_model), B divisible by dp:
    each dp rank reads its B / dp sequences, runs its tensor-parallel slice of the layer, and
    after the backward pass all-reduces its gradients over the "dp" group and divides by dp;
    then one plain gradient step, `p -= lr * grad`. Returns {"rank", "dp_rank", "tp_rank",
    "tp_group" and "dp_group" (the global ranks in this process's groups), "loss" (the whole
    batch's, averaged over dp), "own_loss" (the loss on this process's B / dp sequences),
    "state" (this process's updated parameters, by name)}."""
    from torch.distributed.device_mesh import init_device_mesh

    check_positive_int("dp", dp)
    check_positive_int("tp", tp)
    check_positive_number("lr", lr)
    if dist.get_world_size() != dp * tp:
        raise ValueError(f"a ({dp}, {tp}) mesh needs dp * tp = {dp * tp} processes, got {dist.get_world_size()}")
    if x.dim() != 3 or x.shape[0] % dp:
        raise ValueError(f"x must be (batch, T, d_model) with a batch divisible by dp={dp}, got {tuple(x.shape)}")
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    dp_rank, tp_rank = mesh.get_local_rank("dp"), mesh.get_local_rank("tp")
    tp_group, dp_group = mesh["tp"].get_group(), mesh["dp"].get_group()
    split = tensor_parallel(copy.deepcopy(layer), tp_rank, tp, tp_group)
    mine = x.chunk(dp)[dp_rank]
    loss = 0.5 * split(mine, None).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in split.parameters():
            dist.all_reduce(p.grad, group=dp_group)
            p -= lr * p.grad / dp
        total = loss.detach().clone()
        dist.all_reduce(total, group=dp_group)
    return {"rank": dist.get_rank(), "dp_rank": dp_rank, "tp_rank": tp_rank,
            "tp_group": dist.get_process_group_ranks(tp_group), "dp_group": dist.get_process_group_ranks(dp_group),
            "loss": total / dp, "own_loss": loss.detach(),
            "state": {n: p.detach().clone() for n, p in split.named_parameters()}}


def one_process_step(layer: nn.Module, x: torch.Tensor, lr: float) -> tuple[nn.Module, torch.Tensor]:
    """The same step as `mesh_step_worker` in one process: a copy of `layer` after one step of
    `p -= lr * grad` on the loss `0.5 * mean(layer(x) ** 2)`, and the loss."""
    check_positive_number("lr", lr)
    layer = copy.deepcopy(layer)
    loss = 0.5 * layer(x, None).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in layer.parameters():
            p -= lr * p.grad
    return layer, loss.detach()
