"""Training: teacher-forced batches, label smoothing, the warm-up schedule, and one small
training loop with validation, early stopping and checkpoints (section 5).

`train` trains any model with the Transformer's interface (`model(src, tgt_in, src_mask,
tgt_mask) -> logits`, plus `encode`/`decode` for greedy evaluation): the `Transformer` and the
recurrent `rnn.Seq2Seq`. What differs between them is chosen in `TrainConfig`: the learning-rate
schedule (`"warmup"`, the paper's equation 3, or `"constant"` / `"linear_decay"`), Adam's
betas and epsilon, and label smoothing (0 gives plain cross-entropy). `recipe_config` and
`rnn_config` are the two recipes the book uses."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
from torch import nn

from ._checks import check_positive_int, check_probability, check_tensor
from .masks import padding_mask, target_mask
from .utils import device_of, eval_mode


@dataclass
class Batch:
    """One teacher-forced batch (section 5.1 feeds the target shifted right).

    From `tgt` = [<bos>, y_1, ..., y_n, <eos>, <pad>...] the decoder reads `tgt_in` =
    tgt[:, :-1] and learns to predict `tgt_out` = tgt[:, 1:], so position t sees y_<t only
    (the causal mask sees to that) and is scored on y_t.

    src (B, S), tgt_in and tgt_out (B, T), src_mask (B, 1, 1, S), tgt_mask (B, 1, T, T).
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    src_mask: torch.Tensor
    tgt_mask: torch.Tensor

    @classmethod
    def from_ids(cls, src: torch.Tensor, tgt: torch.Tensor, pad_id: int = 0) -> "Batch":
        check_tensor("src", src, ndim=2)
        check_tensor("tgt", tgt, ndim=2)
        if tgt.shape[1] < 2:
            raise ValueError(f"tgt must hold at least <bos> and one more token per row, got shape {tuple(tgt.shape)}")
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"src and tgt must have the same batch size, got {src.shape[0]} and {tgt.shape[0]}")
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        return cls(src, tgt_in, tgt_out, padding_mask(src, pad_id), target_mask(tgt_in, pad_id))


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
        self.smoothing, self.pad_id = smoothing, pad_id

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        check_tensor("logits", logits, floating=True)
        check_tensor("target", target)
        if logits.shape[:-1] != target.shape:
            raise ValueError(f"logits (..., V) and target (...) disagree: {tuple(logits.shape)} vs {tuple(target.shape)}")
        vocab = logits.shape[-1]
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


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)   (paper, equation 3)

    It rises linearly for `warmup` steps (4000 in the paper), peaks at
    factor / sqrt(d_model * warmup), then decays like 1 / sqrt(step). Steps count from 1:
    step 0 (where step^-0.5 is infinite) or a negative step raises ValueError.
    """
    check_positive_int("step", step)
    check_positive_int("d_model", d_model)
    check_positive_int("warmup", warmup)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def factor_for_peak(peak_lr: float, d_model: int, warmup: int) -> float:
    """The `factor` that makes equation (3) peak at `peak_lr` (at step `warmup`):
    factor = peak_lr * sqrt(d_model * warmup)."""
    if not (isinstance(peak_lr, (int, float)) and peak_lr > 0):
        raise ValueError(f"peak_lr must be a positive number, got {peak_lr!r}")
    check_positive_int("d_model", d_model)
    check_positive_int("warmup", warmup)
    return peak_lr * (d_model * warmup) ** 0.5


#: The learning-rate schedules `TrainConfig.schedule` can name.
SCHEDULES = ("warmup", "constant", "linear_decay")


@dataclass
class TrainConfig:
    """Settings for `train`.

    The optimiser is Adam with `betas` and `adam_eps` (the paper's 0.9, 0.98 and 1e-9 by
    default, section 5.3). `schedule` picks the learning rate at step s (counting from 1):

    * "warmup": equation (3), `noam_lr(s, d_model, warmup, factor)` (`factor` 1.0 = the
      paper's); `d_model` defaults to `model.config.d_model`;
    * "constant": `lr` at every step;
    * "linear_decay": `lr` for the first half of `max_steps`, then falling linearly to 0 (the
      schedule of the recurrent checkpoints).
    """

    max_steps: int = 2000
    warmup: int = 200
    factor: float = 1.0
    label_smoothing: float = 0.1
    clip_norm: float | None = 1.0
    eval_every: int = 200
    patience: int | None = None  # stop after this many evaluations without a better accuracy
    target_accuracy: float | None = None  # stop as soon as validation exact match reaches it
    max_seconds: float | None = None
    checkpoint: str | None = None  # where to save the best model (by validation accuracy)
    progress: bool = True
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    schedule: str = "warmup"
    d_model: int | None = None  # for "warmup"; None: the model's config.d_model
    lr: float = 1e-3  # for "constant" and "linear_decay"
    betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        check_positive_int("max_steps", self.max_steps)


def lr_schedule(cfg: TrainConfig, model: nn.Module) -> Callable[[int], float]:
    """The learning rate at step s = 1, 2, ... that `cfg.schedule` names (see `TrainConfig`)."""
    if cfg.schedule == "warmup":
        d_model = cfg.d_model if cfg.d_model is not None else getattr(getattr(model, "config", None), "d_model", None)
        if d_model is None:
            raise ValueError(f"TrainConfig.d_model: the warm-up schedule needs d_model, and a "
                             f"{type(model).__name__} has no config.d_model; set it, or pick another schedule")
        return lambda s: noam_lr(s, d_model, cfg.warmup, cfg.factor)
    if not (isinstance(cfg.lr, (int, float)) and cfg.lr > 0):
        raise ValueError(f"TrainConfig.lr must be a positive number, got {cfg.lr!r}")
    if cfg.schedule == "constant":
        return lambda s: cfg.lr
    return lambda s: cfg.lr * min(1.0, 2.0 * (1.0 - (s - 1) / cfg.max_steps))


@dataclass
class History:
    """What happened during `train`: per-step loss and learning rate, per-evaluation accuracy."""

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    best_accuracy: float = 0.0
    best_step: int = 0
    seconds: float = 0.0  # the whole run, evaluations included
    eval_seconds: float = 0.0  # the part of `seconds` spent evaluating
    stopped: str = ""


def _forever(loader: Iterable) -> Iterable:
    while True:
        empty = True
        for item in loader:
            empty = False
            yield item
        if empty:
            raise ValueError("train_loader yielded no batches")


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable, cfg: TrainConfig) -> tuple[float, float]:
    """(exact-match accuracy, mean label-smoothed loss) over `batches` of (src, tgt) ids, from
    one teacher-forced pass per batch.

    A target counts as correct when, reading the correct prefix, the model's most likely next
    token (never <bos> or <pad>, which decoding cannot produce) is right at every position up
    to and including <eos>. That is exactly when greedy decoding outputs it: if every such
    argmax is right, greedy decoding reads the same prefixes and so makes the same choices,
    step by step; at the first wrong one, greedy decoding goes wrong too. One parallel pass
    replaces a decoder pass per output token (tests/test_training.py compares the two on the
    shipped models; in floating point they could differ only at an exact tie)."""
    loss_fn = LabelSmoothingLoss(cfg.label_smoothing, cfg.pad_id)
    correct = total = 0
    losses = []
    device = device_of(model)
    with eval_mode(model):
        for src, tgt in batches:
            b = Batch.from_ids(src.to(device), tgt.to(device), cfg.pad_id)
            logits = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask)        # (B, T, V)
            losses.append(loss_fn(logits, b.tgt_out).item())
            logits[..., [cfg.bos_id, cfg.pad_id]] = float("-inf")          # as in greedy decoding
            right = (logits.argmax(-1) == b.tgt_out) | (b.tgt_out == cfg.pad_id)
            correct += int(right.all(-1).sum())
            total += len(b.src)
    return correct / max(total, 1), sum(losses) / max(len(losses), 1)


def train(model: nn.Module, train_loader: Iterable, val_batches: Iterable | None = None,
          cfg: TrainConfig | None = None, on_eval: Callable[[int, float], None] | None = None,
          vocabs: tuple | None = None) -> History:
    """Train `model` (a `Transformer` or an `rnn.Seq2Seq`) on batches of (src, tgt) token ids.

    Adam with the schedule `cfg.schedule`, label smoothing, gradient clipping; every
    `eval_every` steps, greedy exact-match accuracy on `val_batches` (a list of (src, tgt)
    batches), after which `on_eval(step, accuracy)` is called. The best model so far is saved
    to `cfg.checkpoint` if given (`checkpoints.save`, with `vocabs` = (src_vocab, tgt_vocab),
    which it then needs, and the record {"step", "accuracy"}). Stops at `max_steps`, at
    `max_seconds`, when accuracy reaches `target_accuracy`, or after `patience` evaluations
    without improvement. Batches are moved to the model's device. `train_loader` (best:
    `vocab.make_loader`) is read again at every epoch, so it must be re-iterable (a list or a
    DataLoader): a one-shot iterator or generator raises TypeError before any step. Returns a
    `History` (its `eval_seconds` is the evaluation part of `seconds`).
    """
    cfg = cfg or TrainConfig()
    if iter(train_loader) is train_loader:
        raise TypeError("train_loader must be re-iterable (a list or a DataLoader), not a one-shot iterator or "
                        "generator: train() starts a new pass over it at every epoch")
    if cfg.checkpoint and (vocabs is None or len(vocabs) != 2):
        raise ValueError("vocabs: TrainConfig.checkpoint is set, so train() needs vocabs=(src_vocab, tgt_vocab) "
                         "to store in the checkpoint")
    lr_at = lr_schedule(cfg, model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=tuple(cfg.betas), eps=cfg.adam_eps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: lr_at(i + 1))  # lr = 1.0 * lr_at(step)
    loss_fn = LabelSmoothingLoss(cfg.label_smoothing, cfg.pad_id)
    device = device_of(model)
    hist = History()
    val_batches = list(val_batches) if val_batches is not None else None
    bad_evals, start = 0, time.perf_counter()
    bar = _progress(cfg)
    model.train()
    for step, (src, tgt) in enumerate(_forever(train_loader), start=1):
        b = Batch.from_ids(src.to(device), tgt.to(device), cfg.pad_id)
        loss = loss_fn(model(b.src, b.tgt_in, b.src_mask, b.tgt_mask), b.tgt_out)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.clip_norm:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
        hist.lr.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
        hist.step.append(step)
        hist.loss.append(loss.item())
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", best=f"{hist.best_accuracy:.3f}")
        if val_batches is not None and (step % cfg.eval_every == 0 or step == cfg.max_steps):
            began = time.perf_counter()
            acc, val_loss = evaluate(model, val_batches, cfg)
            hist.eval_seconds += time.perf_counter() - began
            hist.eval_step.append(step)
            hist.eval_accuracy.append(acc)
            hist.eval_loss.append(val_loss)
            if on_eval is not None:
                on_eval(step, acc)
            if acc > hist.best_accuracy:
                hist.best_accuracy, hist.best_step, bad_evals = acc, step, 0
                if cfg.checkpoint:
                    from .checkpoints import save

                    save(cfg.checkpoint, model, *vocabs, record={"step": step, "accuracy": acc})
            else:
                bad_evals += 1
            if cfg.target_accuracy is not None and acc >= cfg.target_accuracy:
                hist.stopped = f"validation accuracy {acc:.4f} reached the target {cfg.target_accuracy}"
            elif cfg.patience is not None and bad_evals >= cfg.patience:
                hist.stopped = f"no better accuracy in {cfg.patience} evaluations"
        if not hist.stopped and step >= cfg.max_steps:
            hist.stopped = f"max_steps={cfg.max_steps} reached"
        if not hist.stopped and cfg.max_seconds is not None and time.perf_counter() - start > cfg.max_seconds:
            hist.stopped = f"max_seconds={cfg.max_seconds} reached"
        if hist.stopped:
            break
    if bar is not None:
        bar.close()
    hist.seconds = time.perf_counter() - start
    model.eval()
    return hist


def _progress(cfg: TrainConfig):
    if not cfg.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=cfg.max_steps, desc="training", unit="step")
