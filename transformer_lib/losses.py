"""The training loss of the paper: cross-entropy against a label-smoothed target (section 5.4)."""
from __future__ import annotations

import torch
from torch import nn

from ._checks import check_non_negative_int, check_probability, check_tensor

__all__ = ["LabelSmoothingLoss"]


class LabelSmoothingLoss(nn.Module):
    """Cross-entropy against a smoothed target (Szegedy et al. 2016; the paper uses eps = 0.1).

    The target distribution puts 1 - eps on the correct token and spreads eps uniformly over
    the V' = V - 1 tokens other than padding (the correct one included):

        q_k = (1 - eps) [k = y] + eps / V'          (k != pad; q_pad = 0)
        loss = - sum_k q_k log p_k  =  -(1 - eps) log p_y - (eps / V') sum_{k != pad} log p_k

    averaged over the positions whose target is not padding. It is computed from
    `log_softmax`, never from log(softmax) (whose zeros give log 0 = -inf, and 0 * -inf = NaN
    in a KL-divergence written out by hand), so it stays finite for any finite logits.
    With eps = 0 it is the ordinary cross-entropy.

    logits: (..., V); target: (...) token ids. Returns a scalar.
    """

    def __init__(self, smoothing: float = 0.1, pad_id: int | None = 0):
        super().__init__()
        check_probability("smoothing", smoothing)
        if pad_id is not None:
            check_non_negative_int("pad_id", pad_id)
        self.smoothing, self.pad_id = smoothing, pad_id

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        check_tensor("logits", logits, floating=True)
        check_tensor("target", target)
        if logits.shape[:-1] != target.shape:
            raise ValueError(f"logits (..., V) and target (...) disagree: "
                             f"{tuple(logits.shape)} vs {tuple(target.shape)}")
        vocab = logits.shape[-1]
        _check_target(target, vocab, self.pad_id)
        logp = logits.float().log_softmax(-1).reshape(-1, vocab)  # (N, V)
        target = target.reshape(-1)
        keep = torch.ones_like(target, dtype=torch.bool) if self.pad_id is None else target != self.pad_id
        nll = -logp.gather(1, target[:, None]).squeeze(1)  # (N,)
        if self.pad_id is None:
            n_classes, spread = vocab, -logp.sum(1)
        else:
            n_classes = vocab - 1
            spread = -(logp.sum(1) - logp[:, self.pad_id])
        loss = (1 - self.smoothing) * nll + (self.smoothing / n_classes) * spread
        return loss[keep].sum() / keep.sum().clamp_min(1)


def _check_target(target: torch.Tensor, vocab: int, pad_id: int | None) -> None:
    """target: integer ids in [0, vocab); pad_id (if any) must be one of them."""
    if target.is_floating_point() or target.dtype == torch.bool:
        raise TypeError(f"target must hold integer token ids, got dtype {target.dtype}")
    if pad_id is not None and pad_id >= vocab:
        raise ValueError(f"pad_id={pad_id} is not a token id of the {vocab} logits per position")
    if target.numel() and not target.is_meta and (int(target.min()) < 0 or int(target.max()) >= vocab):
        raise ValueError(f"target holds token ids in [{int(target.min())}, {int(target.max())}], but the logits "
                         f"score ids 0..{vocab - 1}")
