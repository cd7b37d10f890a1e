"""Peak tensor memory of a computation, counted the same way on every machine (chapter 13).

`peak_tensor_memory` watches every PyTorch operation through a dispatch mode. The hook it
needs, `TorchDispatchMode`, lives in a private PyTorch module (`torch.utils._python_dispatch`),
as do `tree_flatten` (`torch.utils._pytree`); private modules may move between releases. So
`import transformer_lib` does not import this module: `efficient.peak_tensor_memory` imports
it on first use, and if this PyTorch lacks what it needs, the ImportError names the version.
"""
from __future__ import annotations

import torch

try:
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
except ImportError as err:  # pragma: no cover - depends on the installed PyTorch
    raise ImportError(
        "transformer_lib.memory.peak_tensor_memory needs PyTorch's TorchDispatchMode "
        "(torch.utils._python_dispatch), tree_flatten (torch.utils._pytree) and "
        f"StorageWeakRef, which torch {torch.__version__} does not provide ({err}). "
        "The book pins torch 2.13.0 (requirements.txt)."
    ) from err

__all__ = ["peak_tensor_memory"]


class peak_tensor_memory(TorchDispatchMode):
    """Context manager: the peak number of bytes held by tensors created inside the block.

    Every PyTorch operation passes through `__torch_dispatch__`. An operation that creates
    tensors (its schema declares no alias on its returns) has each returned storage recorded,
    once, with a weak reference; an operation that returns a view or writes in place (a
    return with an alias annotation: slicing, transposing, `view`, `add_`) creates no
    storage and records nothing, so a view of a tensor made before the block costs nothing
    and a view of one made inside is not counted twice. After every operation the bytes of
    the recorded storages still alive are summed; `peak` is the largest sum, `current` the
    last. Tensors that existed before the block are not counted, and scratch buffers that a
    fused kernel allocates and frees inside one operation are invisible. The count depends
    only on which operations run, so it is the same on every machine that runs the same
    operations: the same PyTorch version on the same kind of device (another version may
    decompose an operation differently, and a GPU may pick another kernel for it).

    >>> with peak_tensor_memory() as mem:
    ...     out = blockwise_attention(q, k, v)
    >>> mem.peak   # bytes
    """

    def __init__(self):
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak = self.current = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._live = {k: v for k, v in self._live.items() if not v[0].expired()}
        creates = not any(r.alias_info is not None for r in func._schema.returns)
        for t in tree_flatten(out)[0] if creates else ():
            if isinstance(t, torch.Tensor):
                ref = StorageWeakRef(t.untyped_storage())
                self._live.setdefault(ref.cdata, (ref, t.untyped_storage().nbytes()))
        self.current = sum(n for _, n in self._live.values())
        self.peak = max(self.peak, self.current)
        return out
