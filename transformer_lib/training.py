"""Training (section 5): teacher-forced batches and the book's one loop, `train`, with
validation, early stopping, checkpoints and weight averaging (section 6.1). `train` fits any
model with the Transformer's interface (`model(src, tgt_in, src_mask, tgt_mask) -> logits`:
the `Transformer`, `rnn.Seq2Seq`) and measures greedy exact match; another task passes its own
`loss_fn(model, batch, cfg)` and `eval_fn(model, batches, cfg) -> (accuracy, loss)` (`lm`).
`TrainConfig` chooses the loss (`losses`) and schedule (`schedules`); it is checked when made
and frozen (change a copy with `dataclasses.replace`). `recipes` holds the book's two recipes."""
from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Callable, Iterable

import torch
from torch import nn

from ._checks import (check_bool, check_choice, check_positive_int, check_positive_number, check_probability,
                      check_tensor)
from .checkpoints import save as save_checkpoint
from .losses import LabelSmoothingLoss
from .masks import padding_mask, target_mask
from .runtime import device_of, eval_mode
from .schedules import SCHEDULES, lr_schedule
from .special_tokens import NEVER_GENERATED, PAD_ID


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
    def from_ids(cls, src: torch.Tensor, tgt: torch.Tensor, pad_id: int = PAD_ID) -> "Batch":
        check_tensor("src", src, ndim=2)
        check_tensor("tgt", tgt, ndim=2)
        if tgt.shape[1] < 2:
            raise ValueError(f"tgt must hold at least <bos> and one more token per row, got shape {tuple(tgt.shape)}")
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"src and tgt must have the same batch size, got {src.shape[0]} and {tgt.shape[0]}")
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        return cls(src, tgt_in, tgt_out, padding_mask(src, pad_id), target_mask(tgt_in, pad_id))


@dataclass(frozen=True)
class TrainConfig:
    """Settings for `train`.

    The optimiser is Adam with `betas` and `adam_eps` (the paper's 0.9, 0.98 and 1e-9 by
    default, section 5.3). `schedule` picks the learning rate at step s (counting from 1):

    * "warmup": equation (3), `noam_lr(s, d_model, warmup, factor)` with the model's own
      `config.d_model` (`factor` 1.0 = the paper's); or, with `peak_lr`, the factor that makes
      it peak at `peak_lr` (at step `warmup`) whatever the model's width;
    * "constant": `lr` at every step;
    * "linear_warmup": `lr * min(1, s / warmup)`: a linear ramp over `warmup` steps, then `lr`;
    * "linear_decay": `lr` for the first half of `max_steps`, then falling linearly to 0 (the
      schedule of the recurrent checkpoints).

    Every field is checked here, when the config is made (ValueError or TypeError naming it).
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
    schedule: str = "warmup"
    peak_lr: float | None = None  # for "warmup": its peak, instead of a factor
    lr: float = 1e-3  # for "constant", "linear_warmup" and "linear_decay"
    betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9

    def __post_init__(self) -> None:
        for name in ("max_steps", "warmup", "eval_every"):
            check_positive_int(name, getattr(self, name))
        check_positive_number("factor", self.factor)
        check_probability("label_smoothing", self.label_smoothing)
        for name in ("clip_norm", "max_seconds", "peak_lr"):
            if getattr(self, name) is not None:
                check_positive_number(name, getattr(self, name))
        if self.peak_lr is not None and (self.schedule != "warmup" or self.factor != 1.0):
            raise ValueError(f"peak_lr sets the peak of the 'warmup' schedule instead of factor: give one of "
                             f"them, with schedule='warmup' (got schedule={self.schedule!r}, factor={self.factor})")
        if self.patience is not None:
            check_positive_int("patience", self.patience)
        if self.target_accuracy is not None and not (
                isinstance(self.target_accuracy, (int, float)) and not isinstance(self.target_accuracy, bool)
                and 0 < self.target_accuracy <= 1):
            raise ValueError(f"target_accuracy must be a number in (0, 1], got {self.target_accuracy!r}")
        if self.checkpoint is not None and not isinstance(self.checkpoint, (str, PathLike)):
            raise TypeError(f"checkpoint must be a path (str or Path) or None, got {type(self.checkpoint).__name__}")
        check_bool("progress", self.progress)
        check_choice("schedule", self.schedule, SCHEDULES)
        check_positive_number("lr", self.lr)
        if not (isinstance(self.betas, (tuple, list)) and len(self.betas) == 2
                and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in self.betas)):
            raise ValueError(f"betas must be two numbers in [0, 1) (Adam's beta_1, beta_2), got {self.betas!r}")
        check_positive_number("adam_eps", self.adam_eps)


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


def seq2seq_loss(model: nn.Module, batch, cfg: TrainConfig) -> torch.Tensor:
    """The label-smoothed loss of one teacher-forced batch (src, tgt) of ids: the default
    `loss_fn` of `train` (section 5.4, label smoothing cfg.label_smoothing)."""
    src, tgt = batch
    b = Batch.from_ids(src, tgt)
    logits = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask)  # (B, T, V)
    return LabelSmoothingLoss(cfg.label_smoothing)(logits, b.tgt_out)


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable, cfg: TrainConfig | None = None) -> tuple[float, float]:
    """(exact-match accuracy, mean label-smoothed loss) over `batches` of (src, tgt) ids, from
    one teacher-forced pass per batch: the default `eval_fn` of `train`.

    A target counts as correct when, reading the correct prefix, the model's most likely next
    token (never <bos> or <pad>, which decoding cannot produce) is right at every position up
    to and including <eos>. That is exactly when greedy decoding outputs it: if every such
    argmax is right, greedy decoding reads the same prefixes and so makes the same choices,
    step by step; at the first wrong one, greedy decoding goes wrong too. One parallel pass
    replaces a decoder pass per output token (tests/test_training.py compares the two on the
    shipped models; in floating point they could differ only at an exact tie). The loss has
    the label smoothing of `cfg` (default: `TrainConfig()`'s)."""
    loss_fn = LabelSmoothingLoss((cfg or TrainConfig()).label_smoothing)
    correct = total = 0
    losses = []
    device = device_of(model)
    with eval_mode(model):
        for src, tgt in batches:
            b = Batch.from_ids(src.to(device), tgt.to(device))
            logits = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask)        # (B, T, V)
            losses.append(loss_fn(logits, b.tgt_out).item())
            logits[..., list(NEVER_GENERATED)] = float("-inf")             # as in greedy decoding
            right = (logits.argmax(-1) == b.tgt_out) | (b.tgt_out == PAD_ID)
            correct += int(right.all(-1).sum())
            total += len(b.src)
    return correct / max(total, 1), sum(losses) / max(len(losses), 1)


def _to(batch, device):
    """A batch (a tensor, or a tuple or list of them) on `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    return type(batch)(_to(item, device) for item in batch)


def train(model: nn.Module, train_loader: Iterable, val_batches: Iterable | None = None,
          cfg: TrainConfig | None = None, on_eval: Callable[[int, float], bool | None] | None = None,
          vocabs: tuple | None = None, loss_fn: Callable | None = None, eval_fn: Callable | None = None) -> History:
    """Train `model` on the batches of `train_loader`: the book's one training loop.

    Each step: loss = `loss_fn(model, batch, cfg)`, backward, clip the gradient norm at
    `cfg.clip_norm`, an Adam step at the learning rate of `cfg.schedule`. By default a batch is
    (src, tgt) ids and the loss is the teacher-forced, label-smoothed `seq2seq_loss`, which fits
    a `Transformer` or an `rnn.Seq2Seq`; a language model passes `lm.lm_loss`.

    Every `eval_every` steps (and at the last), `eval_fn(model, val_batches, cfg)` gives
    (accuracy, loss) on `val_batches` (default `evaluate`: greedy exact match), after which
    `on_eval(step, accuracy)` is called; if it returns True, training stops there. The best
    model so far is saved to `cfg.checkpoint` if given (`checkpoints.save`, with `vocabs` =
    (src_vocab, tgt_vocab), which it then needs, and the record {"step", "accuracy"}). Stops at
    `max_steps`, at `max_seconds`, when accuracy reaches `target_accuracy`, after `patience`
    evaluations without improvement, or when `on_eval` says so. Batches are moved to the
    model's device. `train_loader` (best: `vocab.make_loader`) is read again at every epoch, so
    it must be re-iterable (a list, a DataLoader, a `vocab.PairLoader`): a one-shot iterator or
    generator raises TypeError before any step. The check reads nothing from the loader, so
    `train` reads exactly the batches a `for` loop over the same fresh loader would. The model
    is given back in the train/eval mode it came in. Returns a `History` (its `eval_seconds`
    is the evaluation part of `seconds`).
    """
    cfg = cfg or TrainConfig()
    _check_train_args(model, train_loader, cfg, vocabs, loss_fn, eval_fn, on_eval)
    loss_fn = loss_fn or seq2seq_loss
    eval_fn = eval_fn or evaluate
    lr_at = lr_schedule(cfg, model)
    # foreach: one multi-tensor update, bit for bit the per-parameter loop PyTorch picks on a CPU
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=tuple(cfg.betas), eps=cfg.adam_eps, foreach=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: lr_at(i + 1))  # lr = 1.0 * lr_at(step)
    device = device_of(model)
    hist = History()
    val_batches = list(val_batches) if val_batches is not None else None
    bad_evals, start = 0, time.perf_counter()
    bar = _progress(cfg)
    was_training = model.training
    model.train()
    for step, batch in enumerate(_forever(train_loader), start=1):
        loss = loss_fn(model, _to(batch, device), cfg)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.clip_norm is not None:
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
            acc, val_loss = eval_fn(model, val_batches, cfg)
            model.train()
            hist.eval_seconds += time.perf_counter() - began
            hist.eval_step.append(step)
            hist.eval_accuracy.append(acc)
            hist.eval_loss.append(val_loss)
            asked_to_stop = on_eval is not None and on_eval(step, acc) is True
            if acc > hist.best_accuracy:
                hist.best_accuracy, hist.best_step, bad_evals = acc, step, 0
                if cfg.checkpoint:
                    save_checkpoint(cfg.checkpoint, model, *vocabs, record={"step": step, "accuracy": acc})
            else:
                bad_evals += 1
            if asked_to_stop:
                hist.stopped = f"on_eval stopped training at step {step}"
            elif cfg.target_accuracy is not None and acc >= cfg.target_accuracy:
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
    model.train(was_training)
    return hist


def _check_train_args(model, train_loader, cfg, vocabs, loss_fn, eval_fn, on_eval) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    if isinstance(train_loader, Iterator) or not isinstance(train_loader, Iterable):  # reads nothing from it
        raise TypeError("train_loader must be re-iterable (a list, a DataLoader, vocab.make_loader), not a one-shot "
                        f"iterator or generator: train() starts a new pass over it at every epoch; got "
                        f"{type(train_loader).__name__}")
    if cfg.checkpoint and (vocabs is None or len(vocabs) != 2):
        raise ValueError("vocabs: TrainConfig.checkpoint is set, so train() needs vocabs=(src_vocab, tgt_vocab) "
                         "to store in the checkpoint")
    for name, fn in (("loss_fn", loss_fn), ("eval_fn", eval_fn), ("on_eval", on_eval)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be a function or None, got {type(fn).__name__}")


def _progress(cfg: TrainConfig):
    if not cfg.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=cfg.max_steps, desc="training", unit="step")


def average_weights(snapshots: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Checkpoint averaging: the element-wise mean of several snapshots of one model's weights
    (`state_dict()`s taken at different steps of one run). The paper's base models average the
    last 5 checkpoints, written at 10-minute intervals (section 6.1): late in training the
    weights wander around a good region, and their mean sits nearer its middle than any one of
    them. Floating-point tensors are averaged (in their own dtype); any other tensor (an integer
    buffer) is taken from the last snapshot. Returns a new state dict; the snapshots are not
    changed."""
    if isinstance(snapshots, Mapping) or not isinstance(snapshots, Sequence) or len(snapshots) == 0:
        raise ValueError("snapshots: expected a non-empty list of state dicts (model.state_dict() at several steps), "
                         f"got {type(snapshots).__name__}")
    for i, snap in enumerate(snapshots):
        if not isinstance(snap, Mapping):
            raise TypeError(f"snapshots[{i}]: expected a state dict, got {type(snap).__name__}")
    keys = list(snapshots[-1].keys())
    for i, snap in enumerate(snapshots):
        if list(snap.keys()) != keys:
            raise ValueError(f"snapshots[{i}] holds other weights than the last snapshot (keys differ): "
                             "average snapshots of one model only")
        for key in keys:
            if snap[key].shape != snapshots[-1][key].shape:
                raise ValueError(f"snapshots[{i}][{key!r}] has shape {tuple(snap[key].shape)}, the last snapshot "
                                 f"{tuple(snapshots[-1][key].shape)}: average snapshots of one model only")
    out = {}
    for key in keys:
        last = snapshots[-1][key]
        if last.is_floating_point():
            out[key] = torch.stack([snap[key].to(last.device) for snap in snapshots]).mean(0)
        else:
            out[key] = last.clone()
    return out


class AverageAndStop:
    """An `on_eval` hook for `train`: checkpoint averaging, and a stopping rule that judges the
    averaged weights (the recipe of chapter 11 and of the shipped date model).

    At every evaluation it takes a snapshot of the model's weights, keeps the last `keep` of
    them, and counts the exact match (`evaluate`) of their average (`average_weights`) on the
    `quick` batches. When that reaches `target`, it confirms on the `confirm` batches (other
    dates than the quick check's, so that a lucky quick check cannot confirm itself) and, if
    they reach `confirm_target` as well, returns True, which stops `train`. `log` keeps, per
    evaluation, the step, the raw weights' accuracy that `train` measured, the average's, and
    the confirmation (None where none ran); `report`, if given, is called with one line of text
    per evaluation (`print` shows the run as it goes). After training, `load_average(model)`
    puts the average that stopped the run (or the last one, if the step cap came first) into
    the model."""

    def __init__(self, model: nn.Module, quick: Iterable, confirm: Iterable, target: float, confirm_target: float,
                 keep: int = 5, report: Callable[[str], None] | None = None):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        check_positive_int("keep", keep)
        for name, value in (("target", target), ("confirm_target", confirm_target)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"{name} must be an accuracy in (0, 1], got {value!r}")
        if report is not None and not callable(report):
            raise TypeError(f"report must be a function (such as print) or None, got {type(report).__name__}")
        self.model, self.keep, self.report = model, keep, report
        self.quick, self.confirm = list(quick), list(confirm)
        self.target, self.confirm_target = target, confirm_target
        self.snapshots: list[dict[str, torch.Tensor]] = []
        self.average: dict[str, torch.Tensor] | None = None
        self.log: dict[str, list] = {"step": [], "raw": [], "averaged": [], "confirmed": []}
        self.stopped_at: int | None = None
        self._shadow = None

    def __call__(self, step: int, accuracy: float) -> bool:
        self.snapshots.append({k: t.detach().clone() for k, t in self.model.state_dict().items()})
        del self.snapshots[: -self.keep]
        self.average = average_weights(self.snapshots)
        if self._shadow is None:
            self._shadow = copy.deepcopy(self.model)
        self._shadow.load_state_dict(self.average)
        averaged, _ = evaluate(self._shadow, self.quick, TrainConfig(progress=False))
        confirmed = None
        if averaged >= self.target:
            confirmed, _ = evaluate(self._shadow, self.confirm, TrainConfig(progress=False))
        for key, value in zip(self.log, (step, accuracy, averaged, confirmed)):
            self.log[key].append(value)
        if confirmed is not None and confirmed >= self.confirm_target:
            self.stopped_at = step
        if self.report is not None:
            line = f"step {step:5,}: quick check {accuracy:.3f} raw, {averaged:.3f} averaged"
            if confirmed is not None:
                line += f"; confirmation {confirmed:.4f}" + (", stop" if self.stopped_at else ", go on")
            self.report(line)
        return self.stopped_at is not None

    def load_average(self, model: nn.Module) -> nn.Module:
        """Load the last average (the one that stopped the run, if one did) into `model`."""
        if self.average is None:
            raise ValueError("no evaluation has run yet, so there is no average to load: train with val_batches")
        model.load_state_dict(self.average)
        return model
