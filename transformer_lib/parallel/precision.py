"""Mixed precision on the CPU: a model whose forward pass runs under `torch.autocast` (bfloat16
by default), and a record of the dtype each operation returns (chapter 17).

Autocast changes no weight: the parameters and Adam's state stay float32 (the "master copies"
of Micikevicius et al. 2018, arXiv:1710.03740), and autocast casts them to bfloat16 on the fly
for the operations on its lower-precision list (matrix products, PyTorch's fused attention);
other operations run in the dtype of their inputs, and a few (on the CPU, the losses such as
`cross_entropy` and `nll_loss`) are cast up to float32; `log_softmax` and `layer_norm` are on
CUDA's float32 list but not the CPU's. `op_dtypes` shows which is which.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from .._checks import check_choice

#: The dtypes autocast can compute in.
AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)


class Autocast(nn.Module):
    """`model` with its forward pass under `torch.autocast(device_type, dtype)`; the output is
    cast back to float32, so that the loss is computed in float32 outside. The parameters are
    `model`'s own (float32), held as `module` (as DistributedDataParallel holds its model), so
    `state_dict()` names them "module.". Train it with the
    book's loop, `training.train`, as the model itself."""

    def __init__(self, model: nn.Module, dtype: torch.dtype = torch.bfloat16, device_type: str = "cpu"):
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        check_choice("dtype", dtype, AUTOCAST_DTYPES)
        check_choice("device_type", device_type, ("cpu", "cuda"))
        floats = {p.dtype for p in model.parameters() if p.is_floating_point()}
        if floats - {torch.float32}:
            raise ValueError(f"model's parameters must be float32 (autocast keeps them as master copies), "
                             f"got {sorted(map(str, floats))}")
        self.module, self.dtype, self.device_type = model, dtype, device_type

    def forward(self, *args, **kwargs):
        with torch.autocast(self.device_type, dtype=self.dtype):
            out = self.module(*args, **kwargs)
        return out.float() if torch.is_tensor(out) and out.is_floating_point() else out


class _Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: dict[str, list[torch.dtype]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        if torch.is_tensor(first) and first.is_floating_point():
            dtypes = self.ops.setdefault(func.overloadpacket.__name__, [])
            if first.dtype not in dtypes:
                dtypes.append(first.dtype)
        return out


def op_dtypes(fn: Callable, *args, **kwargs) -> dict[str, list[torch.dtype]]:
    """Run `fn(*args, **kwargs)` and return, for every ATen operation it ran that returned a
    floating-point tensor, the dtypes of its (first) output, in the order the operations first
    ran. Operations are seen after autocast has cast their inputs, so under `torch.autocast`
    this is what each one computed in. Views and casts are included (`_to_copy` is a cast)."""
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__}")
    with _Record() as record:
        fn(*args, **kwargs)
    return record.ops
