"""Tensor parallelism: the heads of attention and the hidden units of the feed-forward split
across processes, with Megatron-LM's conjugate operators f and g (Shoeybi et al. 2019,
arXiv:1909.08053).
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .._checks import check_positive_int
from .launch import worker_device
from ..attention import MultiHeadAttention
from ..layers import FeedForward

#: All-reduces made by f and g since the last `count_all_reduces()` began, by pass.
_ALL_REDUCES = {"forward": 0, "backward": 0}


class count_all_reduces:
    """Context manager: the all-reduces that f and g make inside the block, by pass.

    >>> with parallel.count_all_reduces() as counts:
    ...     layer(x).backward(grad)
    >>> counts   # {"forward": 2, "backward": 2} for an encoder layer
    """

    def __enter__(self) -> dict[str, int]:
        _ALL_REDUCES.update(forward=0, backward=0)
        self.counts: dict[str, int] = {}
        return self.counts

    def __exit__(self, *exc) -> None:
        self.counts.update(_ALL_REDUCES)


class _CopyToParallel(torch.autograd.Function):
    """Megatron's f: the identity going forward; going back, the all-reduce (sum) of the
    gradients, because every process's part of the layer used the same input."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(grad, group=ctx.group)
        _ALL_REDUCES["backward"] += 1
        return grad, None


class _ReduceFromParallel(torch.autograd.Function):
    """Megatron's g: the all-reduce (sum) of the processes' partial outputs going forward; the
    identity going back, because the sum passes its gradient unchanged to every term."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(x, group=group)
        _ALL_REDUCES["forward"] += 1
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_parallel(x: torch.Tensor, group=None) -> torch.Tensor:
    """f (Shoeybi et al. 2019, section 3): x going forward, all-reduced gradients going back."""
    return _CopyToParallel.apply(x, group)


def reduce_from_parallel(x: torch.Tensor, group=None) -> torch.Tensor:
    """g (Shoeybi et al. 2019, section 3): the sum over processes going forward, the identity back."""
    return _ReduceFromParallel.apply(x, group)


def _rank_and_size(rank: int | None, world_size: int | None, group=None) -> tuple[int, int]:
    rank = dist.get_rank(group) if rank is None else rank
    world_size = dist.get_world_size(group) if world_size is None else world_size
    check_positive_int("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an integer in [0, world_size={world_size}), got {rank!r}")
    return rank, world_size


def _part(n: int, what: str, world_size: int) -> int:
    if n % world_size:
        raise ValueError(f"{what}={n} must be divisible by the number of processes {world_size}")
    return n // world_size


class ColumnParallelLinear(nn.Module):
    """Y_r = X A_r + b_r: process r's block of the columns of a linear layer's matrix A
    (d_in x d_out), so d_out / P output features (Shoeybi et al. 2019, equation 3).

    Built from a full `nn.Linear` by copying rank r's slice (PyTorch stores A transposed, as a
    (d_out, d_in) weight: its rows r d_out/P ... (r + 1) d_out/P). x (..., d_in) -> (..., d_out/P).
    """

    def __init__(self, linear: nn.Linear, rank: int | None = None, world_size: int | None = None):
        super().__init__()
        self.rank, self.world_size = _rank_and_size(rank, world_size)
        self.part = _part(linear.out_features, "out_features", self.world_size)
        self.weight = nn.Parameter(self.split(linear.weight).clone())
        self.bias = None if linear.bias is None else nn.Parameter(self.split(linear.bias).clone())

    def split(self, full: torch.Tensor) -> torch.Tensor:
        """This process's slice of a full weight (d_out, d_in) or bias (d_out,): its rows."""
        return full.detach()[self.rank * self.part:(self.rank + 1) * self.part]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Y = sum_r X_r B_r + b: process r holds the block B_r of the rows of B (d_in x d_out) and
    reads the matching d_in / P features X_r; g sums the partial products over the processes,
    and the bias, held by every process, is added once, after the sum.

    x (..., d_in/P) -> (..., d_out), equal on every process.
    """

    def __init__(self, linear: nn.Linear, rank: int | None = None, world_size: int | None = None, group=None):
        super().__init__()
        self.rank, self.world_size = _rank_and_size(rank, world_size)
        self.part, self.group = _part(linear.in_features, "in_features", self.world_size), group
        self.weight = nn.Parameter(self.split(linear.weight).clone())
        self.bias = None if linear.bias is None else nn.Parameter(self.split(linear.bias).clone())

    def split(self, full: torch.Tensor) -> torch.Tensor:
        """This process's slice of a full weight (d_out, d_in): its columns; a bias is whole."""
        full = full.detach()
        return full if full.dim() == 1 else full[:, self.rank * self.part:(self.rank + 1) * self.part]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = reduce_from_parallel(F.linear(x, self.weight), self.group)  # (..., d_out): the one all-reduce
        return y if self.bias is None else y + self.bias


class ParallelAttention(MultiHeadAttention):
    """Multi-head attention with its heads split over the processes (Shoeybi et al. 2019,
    section 3, Figure 3b): a `MultiHeadAttention` of h / P heads, whose projections are this
    process's slices of the full layer's.

    Process r holds h / P heads: the matching columns of W^Q, W^K, W^V (column-parallel) and
    rows of W^O (row-parallel); with grouped-query attention, h_kv / P key/value heads, those
    its query heads read. `MultiHeadAttention.forward` computes its heads' attention as for
    any layer (rotary positions, the key/value cache and the fused kernel included), and the
    one all-reduce, inside W^O, adds the processes' parts of the output. Going back, f
    all-reduces the gradient of each distinct input once. Built from a `MultiHeadAttention`;
    same call and shapes: (query, key, value, mask) -> (B, T_q, d_model).
    """

    def __init__(self, attn: MultiHeadAttention, rank: int | None = None, world_size: int | None = None, group=None):
        if not isinstance(attn, MultiHeadAttention):
            raise TypeError(f"attn must be a MultiHeadAttention, got {type(attn).__name__}")
        rank, world_size = _rank_and_size(rank, world_size)
        n_heads = _part(attn.n_heads, "n_heads", world_size)  # query heads on this process
        n_kv_heads = _part(attn.n_kv_heads, "n_kv_heads", world_size)
        with torch.device("meta"):  # shapes only: the projections are replaced by this process's slices below
            super().__init__(attn.d_model, n_heads, attn.dropout.p, fused=attn.fused, attention_fn=attn.attention_fn,
                             n_kv_heads=n_kv_heads, rotary=attn.rotary, d_k=attn.d_k)
        self.w_q, self.w_k, self.w_v = (ColumnParallelLinear(w, rank, world_size) for w in (attn.w_q, attn.w_k, attn.w_v))
        self.w_o = RowParallelLinear(attn.w_o, rank, world_size, group)
        self.first_head, self.group = rank * n_heads, group

    def forward(self, query, key, value, mask=None, cache=None) -> torch.Tensor:
        # f once per distinct input: self-attention reads one tensor three times, so one all-reduce back.
        x_q = copy_to_parallel(query, self.group)
        x_k = x_q if key is query else copy_to_parallel(key, self.group)
        x_v = x_q if value is query else x_k if value is key else copy_to_parallel(value, self.group)
        if mask is not None and mask.dim() == 4 and mask.shape[1] > 1:  # a mask per head: keep ours
            mask = mask[:, self.first_head:self.first_head + self.n_heads]
        return super().forward(x_q, x_k, x_v, mask, cache)  # (B, T_q, d_model), summed over processes


class ParallelFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 with its d_ff hidden units split over the
    processes: W_1 column-parallel, W_2 row-parallel (Shoeybi et al. 2019, Figure 3a). The
    ReLU acts on each hidden unit alone, so no communication is needed between the two."""

    def __init__(self, ff: nn.Module, rank: int | None = None, world_size: int | None = None, group=None):
        super().__init__()
        rank, world_size = _rank_and_size(rank, world_size)
        self.group = group
        self.w_1 = ColumnParallelLinear(ff.w_1, rank, world_size)
        self.w_2 = RowParallelLinear(ff.w_2, rank, world_size, group)
        self.dropout = copy.deepcopy(ff.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.w_1(copy_to_parallel(x, self.group)))  # (B, T, d_ff / P)
        return self.w_2(self.dropout(h))  # (B, T, d_model)


def tensor_parallel(layer: nn.Module, rank: int | None = None, world_size: int | None = None,
                    group=None) -> nn.Module:
    """A copy of an `EncoderLayer` or `DecoderLayer` whose attention modules (`self_attn`,
    `cross_attn`) are `ParallelAttention` and whose feed-forward (`ff`) is
    `ParallelFeedForward`, holding process `rank`'s share; the norms are copied whole. Rank and
    world size default to the process group's. Same call and output as `layer`."""
    if not isinstance(getattr(layer, "ff", None), FeedForward):
        raise TypeError(f"layer must be an EncoderLayer or DecoderLayer (with .ff and .self_attn), "
                        f"got {type(layer).__name__}")
    rank, world_size = _rank_and_size(rank, world_size)
    out = copy.deepcopy(layer)
    for name in ("self_attn", "cross_attn"):
        if isinstance(getattr(layer, name, None), MultiHeadAttention):
            setattr(out, name, ParallelAttention(getattr(layer, name), rank, world_size, group))
    out.ff = ParallelFeedForward(layer.ff, rank, world_size, group)
    out.zero_grad(set_to_none=True)  # gradients the copied norms may have carried over
    return out


def shard_like(split: nn.Module, full: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What the process of `split` (a `tensor_parallel` layer) holds of each full tensor in
    `full` (a layer's weights or gradients by parameter name): its slice of a split linear's
    weight and bias, the whole of everything else."""
    splitters = {name: m.split for name, m in split.named_modules()
                 if isinstance(m, (ColumnParallelLinear, RowParallelLinear))}
    out = {}
    for name, tensor in full.items():
        owner, _, _ = name.rpartition(".")
        out[name] = splitters[owner](tensor) if owner in splitters else tensor.detach()
    return out


def tensor_parallel_worker(layers: dict, inputs: dict, device: str | torch.device | None = None) -> dict:
    """Run each layer of `layers` (name -> `EncoderLayer` / `DecoderLayer`, in float64) split
    over the processes with `tensor_parallel`, forward and backward, on `device` (default the
    CPU; "cuda": GPU `LOCAL_RANK`); the results come back on the CPU.

    `inputs[name]` is the tuple of the layer's positional arguments (tensors; floating ones get
    gradients) followed by `grad_output`, the gradient the output is given: the backward pass
    computes d(sum(output * grad_output)). Returns, per layer: "output", "input_grads" (one per
    floating input), "grads" (this process's parameter gradients, by name), and the number of
    all-reduces in the forward and in the backward pass ("forward_all_reduces",
    "backward_all_reduces", as f and g count them: `count_all_reduces`). Also "pytorch_ff": the
    first layer's feed-forward split by PyTorch's own `parallelize_module` with `ColwiseParallel`
    and `RowwiseParallel`, its output, input gradient and all-reduces (counted by PyTorch's
    `CommDebugMode`).
    """
    device = worker_device(device)
    results = {}
    for name, layer in layers.items():
        *args, grad_output = (a.to(device) if torch.is_tensor(a) else a for a in inputs[name])
        args = [a.detach().clone().requires_grad_(a.is_floating_point()) if torch.is_tensor(a) else a for a in args]
        split = tensor_parallel(layer.to(device))
        with count_all_reduces() as counts:
            out = split(*args)
            out.backward(grad_output)
        results[name] = {
            "output": out.detach().cpu(),
            "input_grads": [a.grad.cpu() for a in args if torch.is_tensor(a) and a.is_floating_point()],
            "grads": {n: p.grad.cpu() for n, p in split.named_parameters()},
            "forward_all_reduces": counts["forward"], "backward_all_reduces": counts["backward"],
        }
    first = next(iter(layers))
    results["pytorch_ff"] = _pytorch_feed_forward(layers[first].ff.to(device), inputs[first][0].to(device))
    return results


def _count_all_reduces(comms) -> int:
    return sum(n for op, n in comms.get_comm_counts().items() if "all_reduce" in str(op) or "allreduce" in str(op))


def _pytorch_feed_forward(ff: nn.Module, x: torch.Tensor) -> dict:
    """The feed-forward split by PyTorch's tensor-parallel API: W_1 `ColwiseParallel`, W_2
    `RowwiseParallel` (DTensor does the slicing and the all-reduce)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh(x.device.type, (dist.get_world_size(),))
    ff = parallelize_module(copy.deepcopy(ff), mesh, {"w_1": ColwiseParallel(), "w_2": RowwiseParallel()})
    x = x.detach().clone().requires_grad_()
    with CommDebugMode() as forward_comms:
        out = ff(x)
    with CommDebugMode() as backward_comms:
        out.sum().backward()
    if hasattr(out, "wait"):  # an AsyncCollectiveTensor: the all-reduce's result, once it has arrived
        out = out.wait()
    return {"output": out.detach().cpu(), "input_grad": x.grad.cpu(), "forward_all_reduces": _count_all_reduces(forward_comms),
            "backward_all_reduces": _count_all_reduces(backward_comms)}
