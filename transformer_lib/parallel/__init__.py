"""One model, several processes: data, tensor and sequence parallelism and sharded state with
`torch.distributed` (chapter 17). Needs torch >= 2.10 (`MIN_TORCH`): importing it on an older
release raises `runtime.TorchTooOld`, an ImportError that says so; the rest of transformer_lib
does not need it.

Everything here runs in processes that `launch` starts on this machine, one thread each, joined
through a file store (no port to listen on); gloo's connections stay on 127.0.0.1. The workers
read their rank and the world size from the process group, as they would under `torchrun` on a
cluster, and take a `device` ("cuda": GPU `LOCAL_RANK`, as NCCL wants, with
`launch(..., backend="nccl")`); ring attention computes on the device of its inputs.

- `launch(worker, *args, world_size=2, timeout=...)`: start the processes, join them into one
  process group, run `worker(*args)` in each and return every rank's result; bounded in time,
  and every process is stopped even when a worker fails or hangs, or the caller is killed.
- Data parallel (Li et al. 2020, arXiv:2006.15704): `shard_loader` gives each process its part
  of every global batch; `data_parallel_worker` trains the date model wrapped in PyTorch's
  `DistributedDataParallel` with the book's one loop, `training.train`.
- Tensor parallel (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053): the conjugate
  operators f (`copy_to_parallel`) and g (`reduce_from_parallel`), `ColumnParallelLinear`,
  `RowParallelLinear`, `ParallelAttention` (a `MultiHeadAttention` of this process's heads),
  `ParallelFeedForward` (the hidden units split) and `tensor_parallel` (a layer with both);
  `tensor_parallel_worker`.
- Sequence parallel, ring attention (Liu et al. 2023, arXiv:2310.01889): `ring_attention`
  (forward only), folding blocks with chapter 13's `efficient.online_softmax_fold` (handed on
  here); `ring_attention_worker`.
- Sharded state (ZeRO, Rajbhandari et al. 2020, arXiv:1910.02054; PyTorch FSDP, Zhao et al.
  2023, arXiv:2304.11277): `shard_model` (FSDP2's `fully_shard`), `state_bytes`,
  `sharded_worker`.
- Mixed precision (Micikevicius et al. 2018, arXiv:1710.03740): `Autocast` (a model whose
  forward pass runs under `torch.autocast`, bfloat16 on the CPU) and `op_dtypes` (the dtype
  each operation computed in).
- Pipeline parallel (GPipe, Huang et al. 2019, arXiv:1811.06965; 1F1B, Narayanan et al. 2021):
  `LMStage`, `stage_layers`, `pipeline_worker` and `pipeline_schedules_worker` (PyTorch's
  `torch.distributed.pipelining`),
  `simulate_schedule`, `idle_fraction` and `bubble_formula` (the bubble, in time slots).
- Two kinds at once (Narayanan et al. 2021): `mesh_step_worker`, a (dp, tp) `DeviceMesh` with
  tensor parallelism inside each row and data parallelism down each column, and
  `one_process_step`, the same step in one process.
- `communication_per_step`: what each kind of parallelism sends per training step, computed
  from the model's sizes.

One module per kind: `launch`, `data`, `tensor`, `ring`, `sharded`, `precision`, `pipeline`,
`mesh` and `costs`; this package
hands their names on.
"""

from ._requires import MIN_TORCH  # first: raises on a torch older than MIN_TORCH
from ..efficient import online_softmax_fold
from .costs import communication_per_step
from .data import (
                     build_model,
                     data_parallel_worker,
                     seconds_per_step,
                     shard_loader,
                     time_all_reduce,
)
from .launch import HOST, WorkerError, WorkerTimeout, all_reduce_worker, launch, worker_device
from .mesh import mesh_step_worker, one_process_step
from .pipeline import (
                     SCHEDULES,
                     LMStage,
                     bubble_formula,
                     idle_fraction,
                     pipeline_schedules_worker,
                     pipeline_worker,
                     simulate_schedule,
                     stage_layers,
)
from .precision import Autocast, op_dtypes
from .ring import ring_attention, ring_attention_worker, sequence_block
from .sharded import shard_model, sharded_worker, state_bytes
from .tensor import (
                     ColumnParallelLinear,
                     ParallelAttention,
                     ParallelFeedForward,
                     RowParallelLinear,
                     copy_to_parallel,
                     count_all_reduces,
                     reduce_from_parallel,
                     shard_like,
                     tensor_parallel,
                     tensor_parallel_worker,
)

__all__ = [
    "MIN_TORCH", "HOST", "launch", "worker_device", "WorkerError", "WorkerTimeout", "build_model",
    "shard_loader", "seconds_per_step", "time_all_reduce", "data_parallel_worker", "copy_to_parallel",
    "reduce_from_parallel", "ColumnParallelLinear", "RowParallelLinear", "ParallelAttention", "ParallelFeedForward",
    "tensor_parallel", "shard_like", "tensor_parallel_worker", "count_all_reduces", "online_softmax_fold",
    "ring_attention", "ring_attention_worker", "sequence_block", "shard_model",
    "state_bytes", "sharded_worker", "communication_per_step", "all_reduce_worker",
    "Autocast", "op_dtypes", "LMStage", "stage_layers", "pipeline_worker", "simulate_schedule",
    "idle_fraction", "bubble_formula", "SCHEDULES", "pipeline_schedules_worker",
    "mesh_step_worker", "one_process_step",
]
