"""The PyTorch release `transformer_lib.parallel` needs, checked before anything of it is imported."""
from ..runtime import require_torch

#: The oldest PyTorch chapter 17's code runs on: FSDP2's `fully_shard` runs on the CPU from 2.7
#: (2.6's CPU stream has no `record_event`: pytorch/pytorch#145935), and on 2.8 and 2.9 a float64
#: model sharded by FSDP2 clips its gradients with about float32 precision, so FSDP no longer
#: matches one process to 1e-9. The rest of transformer_lib needs no more than chapters 1-16 use.
MIN_TORCH = (2, 10)

require_torch(MIN_TORCH, "transformer_lib.parallel (chapter 17)",
              "FSDP2 on the CPU, clipping float64 gradients in float64; the chapter's stored outputs show the run")
