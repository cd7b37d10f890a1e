"""Planted bugs and the book's checks, for the bug hunt of chapter 15.

Each piece comes twice: a plain reference (the textbook form of equation 1, of the smoothed
loss, of the sinusoidal table, of the padding mask, of the shifted target, of greedy
decoding) and copies of it with one line changed, the way real implementations got it wrong
(each docstring cites the public report). A `Suspect` bundles the six swappable pieces of a
model and its training code; `plant` puts the model's pieces into a copy of a `Transformer`;
the checks take a `Suspect` and return True when it passes:

- `matches_torch`:   the stacks equal `torch.nn.Transformer` with the same weights (ch. 5-10)
- `is_causal`:       changing later target tokens leaves earlier logits unchanged (ch. 8)
- `loss_is_finite`:  loss and gradients stay finite, even for confident logits (ch. 11)
- `variance_is_one`: random unit-variance q, k give scores of variance about 1 (ch. 4)
- `rotation_holds`:  PE[pos + k] = T(k) PE[pos] for the book's rotation T(k) (ch. 6)
- `padding_is_invisible`: appending padding to a source changes no real output (ch. 8)
- `target_is_next_token`: no position is scored on the token it reads (ch. 11)
- `decodes_without_dropout`: decoding a model left in training mode gives what the model
  without dropout gives (ch. 12)

The checks that run attention (`matches_torch`, `is_causal`, `padding_is_invisible`) try it
at several scales of the scores by default (`SCALES`): the queries' projection W^Q is
multiplied by each scale, so the scores grow by the same factor. A property that holds for
scores of order 1 can fail for scores of order 10^4 (the -1e4 fill). `checks(scales=...)` gives the
same checks at other scales.

The checks use one small model: d_model = 32, n_heads = 4, so d_k = 8, two layers, and a
source as long as the decoder's input (S = T = 7), as code that pads every batch to one
length has.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import torch
from torch import nn

from ...attention import attention_modules, scaled_dot_product_attention, use_attention
from ...decoding import greedy_decode
from ...interop import from_torch
from ...lm import CausalLM, CausalLMConfig
from ...masks import causal_mask, padding_mask
from ...model import Transformer, TransformerConfig
from ...positional import PositionalEncoding, rotation_for_offset, sinusoidal_encoding
from ...losses import LabelSmoothingLoss
from ..._checks import check_positive_int
from ...data import make_reverse_pairs
from ...metrics import exact_match
from ...training import TrainConfig, evaluate, train
from ...vocab import Vocab, collate, make_loader

from .references import (  # noqa: F401  (the references and bugs are part of this module's face)
    D_MODEL, N_HEADS, D_FF, VOCAB, PAD, BOS, EOS, SCALES,
    softmax_and_average, plain_attention, plain_smoothed_loss, plain_encoding,
    plain_padding_mask, plain_shift, plain_greedy, greedy_steps,
    attention_scaled_by_d_model, attention_fill_tiny, attention_fill_1e4,
    smoothed_loss_log_of_softmax,
    encoding_frequency_per_channel, padding_mask_on_queries, target_not_shifted, greedy_dropout_on,
    attention_causal_flag, show_diff, library_shift, library_greedy,
)

# --- suspects and the model they are planted in -------------------------------------------

@dataclass
class Suspect:
    """The six swappable pieces of a model and its training code: the attention rule
    (signature of `scaled_dot_product_attention`), the positional table `(n_positions,
    d_model) -> table`, the loss `(logits, target) -> scalar`, the padding mask `(ids, pad_id)
    -> mask` (True = may attend), teacher forcing `tgt -> (decoder input, target)`, and
    greedy decoding `(model, src, max_len) -> tokens`. The defaults are the library's own."""

    name: str = "clean (the library)"
    attention_fn: Callable = scaled_dot_product_attention
    encoding_fn: Callable = sinusoidal_encoding
    loss: Callable = field(default_factory=lambda: LabelSmoothingLoss(0.1, pad_id=PAD))
    padding_mask_fn: Callable = padding_mask
    shift_fn: Callable = library_shift
    decode_fn: Callable = library_greedy

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a string, got {self.name!r}")
        for piece in ("attention_fn", "encoding_fn", "loss", "padding_mask_fn", "shift_fn",
                      "decode_fn"):
            if not callable(getattr(self, piece)):
                raise TypeError(f"{piece} must be a function, got {getattr(self, piece)!r}")


def small_model(seed: int = 0, dropout: float = 0.0, vocab: int = VOCAB) -> Transformer:
    """The checks' model: d_model 32, 4 heads, d_ff 64, 2 layers, vocabulary 20 (or `vocab`),
    no dropout unless asked; in eval mode."""
    torch.manual_seed(seed)
    config = TransformerConfig(vocab, vocab, d_model=D_MODEL, n_heads=N_HEADS, d_ff=D_FF,
                               n_layers=2, dropout=dropout, max_len=64)
    return Transformer(config).eval()


def plant(model: Transformer, suspect: Suspect) -> Transformer:
    """A copy of `model` computing attention with `suspect.attention_fn` and adding the table
    of `suspect.encoding_fn`; the weights are the same, and `model` is left as it was."""
    planted = use_attention(copy.deepcopy(model), suspect.attention_fn)
    c = model.config
    table = PositionalEncoding(c.d_model, c.max_len, encoding_fn=suspect.encoding_fn)
    planted.src_embed.pos = planted.tgt_embed.pos = table  # both ends read the suspect's table
    return planted


def scale_queries(model: nn.Module, scale: float) -> nn.Module:
    """Multiply W^Q (weight and bias) of every attention module of `model` by `scale`, in
    place: every score q . k / sqrt(d_k) is multiplied by `scale`. Returns `model`."""
    with torch.no_grad():
        for attn in attention_modules(model).values():
            attn.w_q.weight.mul_(scale)
            if attn.w_q.bias is not None:
                attn.w_q.bias.mul_(scale)
    return model


def run(model: Transformer, suspect: Suspect, src, tgt_in):
    """The model's logits (B, T, V) with its masks built by `suspect.padding_mask_fn`: the
    source mask for the encoder and the cross-attention, and the target mask AND the causal
    mask for the decoder's self-attention."""
    src_mask = suspect.padding_mask_fn(src, PAD)
    tgt_mask = suspect.padding_mask_fn(tgt_in, PAD) & causal_mask(tgt_in.shape[1])
    return model(src, tgt_in, src_mask, tgt_mask)


def _check_scales(scales) -> tuple[float, ...]:
    scales = tuple(scales)
    if not scales or not all(isinstance(s, (int, float)) and s > 0 for s in scales):
        raise ValueError(f"scales must be a non-empty sequence of positive numbers, got {scales!r}")
    return scales


# --- the checks ---------------------------------------------------------------------------

def matches_torch(suspect: Suspect, scales=SCALES, atol: float = 1e-4) -> bool:
    """Chapters 5-10: copy a random `torch.nn.Transformer` into `EncoderDecoder`
    (`interop.from_torch`), swap in the suspect's attention, and compare the decoder outputs
    (a padded source, a causal target, S = T = 7), with W^Q scaled by each of `scales` in
    both. Our masks come from the suspect's padding mask; PyTorch's from the ids."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 7), generator=g)
    ids[1, 5:] = PAD  # two padding tokens in the second source
    src, tgt = torch.randn(2, 7, D_MODEL, generator=g), torch.randn(2, 7, D_MODEL, generator=g)
    ours_mask = suspect.padding_mask_fn(ids, PAD)
    for scale in _check_scales(scales):
        torch.manual_seed(1)
        theirs = nn.Transformer(D_MODEL, N_HEADS, 2, 2, D_FF, dropout=0.0, batch_first=True)
        with torch.no_grad():
            for m in theirs.modules():
                if isinstance(m, nn.MultiheadAttention):  # W^Q: the first d_model rows
                    m.in_proj_weight[:D_MODEL].mul_(scale)
                    m.in_proj_bias[:D_MODEL].mul_(scale)
        ours = use_attention(from_torch(theirs), suspect.attention_fn)
        with torch.no_grad():
            expected = theirs(src, tgt, tgt_mask=~causal_mask(7), src_key_padding_mask=ids == PAD,
                              memory_key_padding_mask=ids == PAD)
            got = ours(src, tgt, ours_mask, causal_mask(7), ours_mask)
        if not (got - expected).abs().max() < atol:
            return False
    return True


def is_causal(suspect: Suspect, scales=SCALES, t: int = 4) -> bool:
    """Chapter 8: target tokens from position t on are changed; the logits of positions
    before t must not move (to 1e-6), with W^Q scaled by each of `scales`."""
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.randint(3, VOCAB, (3, 7), generator=g), torch.randint(3, VOCAB, (3, 7), generator=g)
    changed = tgt.clone()
    changed[:, t:] = torch.randint(3, VOCAB, (3, 7 - t), generator=g)
    for scale in _check_scales(scales):
        model = scale_queries(plant(small_model(), suspect), scale)
        with torch.no_grad():
            before, after = run(model, suspect, src, tgt)[:, :t], run(model, suspect, src, changed)[:, :t]
        if not (before - after).abs().max() < 1e-6:
            return False
    return True


def padding_is_invisible(suspect: Suspect, scales=SCALES, extra: int = 3) -> bool:
    """Chapter 8: appending `extra` padding tokens to every source (and as many to every
    decoder input, so that S = T still) leaves the logits at the real positions unchanged (to
    1e-4: longer tensors may round differently), with W^Q scaled by each of `scales`."""
    g = torch.Generator().manual_seed(6)
    src, tgt = torch.randint(3, VOCAB, (3, 7), generator=g), torch.randint(3, VOCAB, (3, 7), generator=g)
    src[0, 5:] = PAD  # one source is padded already
    pad = torch.full((3, extra), PAD)
    for scale in _check_scales(scales):
        model = scale_queries(plant(small_model(), suspect), scale)
        with torch.no_grad():
            short = run(model, suspect, src, tgt)
            long = run(model, suspect, torch.cat([src, pad], 1), torch.cat([tgt, pad], 1))[:, :7]
        if not torch.allclose(short, long, rtol=1e-4, atol=1e-4):
            return False
    return True


def loss_is_finite(suspect: Suspect) -> bool:
    """Chapter 11: the loss and its gradients are finite on the model's own logits (a batch
    with padding) and on confident logits (+-100, as a trained model may give)."""
    model = plant(small_model(), suspect).train()
    g = torch.Generator().manual_seed(3)
    src, tgt = torch.randint(3, VOCAB, (3, 7), generator=g), torch.randint(3, VOCAB, (3, 8), generator=g)
    tgt[0, 6:] = PAD
    tgt_in, tgt_out = suspect.shift_fn(tgt)
    loss = suspect.loss(run(model, suspect, src, tgt_in), tgt_out)
    loss.backward()
    grads_ok = all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    target = torch.randint(3, VOCAB, (6,), generator=g)
    confident = torch.full((6, VOCAB), -100.0).scatter(-1, target[:, None], 100.0).requires_grad_()
    extreme = suspect.loss(confident, target)
    extreme.backward()
    return bool(torch.isfinite(loss) and grads_ok and torch.isfinite(extreme)
                and torch.isfinite(confident.grad).all())


def score_variance(suspect: Suspect) -> float:
    """Chapter 4: the variance of the scores in a row, for q, k with N(0, 1) entries and
    d_k = 8; read back from the weights (log w = score - logsumexp, a per-row shift)."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(64, N_HEADS, 16, D_MODEL // N_HEADS, generator=g) for _ in range(3))
    _, weights = suspect.attention_fn(q, k, v, None, None)
    if weights is None:
        raise ValueError(f"{suspect.name}: its attention_fn returned no weights (None), and "
                         "the variance check reads the scores back from the weights")
    return weights.log().var(dim=-1).mean().item()


def variance_is_one(suspect: Suspect) -> bool:
    """Chapter 4: the scaled scores have variance about 1 (between 0.6 and 1.6 here)."""
    return 0.6 < score_variance(suspect) < 1.6


def rotation_holds(suspect: Suspect, n_positions: int = 50) -> bool:
    """Chapter 6: every row of the table is the row k before it turned by the book's
    rotation T(k), for k = 1 and 7."""
    table = suspect.encoding_fn(n_positions, D_MODEL).double()
    return all(torch.allclose(table[k:], table[:-k] @ rotation_for_offset(k, D_MODEL, torch.float64).T,
                              atol=1e-5) for k in (1, 7))


def copies_input_accuracy(suspect: Suspect) -> float:
    """The accuracy of a model that predicts, at every position, the token it reads there,
    on the suspect's (decoder input, target) of random sequences: about 1 / 17 when the
    target is the next token, 1 when each position is scored on its own input."""
    g = torch.Generator().manual_seed(7)
    tgt = torch.randint(3, VOCAB, (16, 12), generator=g)
    tgt[:, 0] = BOS
    tgt_in, tgt_out = suspect.shift_fn(tgt)
    return (tgt_in == tgt_out).float().mean().item()


def target_is_next_token(suspect: Suspect) -> bool:
    """Chapter 11: no position is scored on the token it reads: a model that copies its input
    does no better than chance (accuracy below 0.5)."""
    return copies_input_accuracy(suspect) < 0.5


def decodes_without_dropout(suspect: Suspect) -> bool:
    """Chapter 12: a model with dropout 0.3, left in training mode (as a training loop leaves
    it when it evaluates between steps), is decoded by the suspect's decoder; the tokens must
    equal those of the same model in eval mode (no dropout), twice in a row."""
    model = plant(small_model(dropout=0.3), suspect)
    g = torch.Generator().manual_seed(8)
    src = torch.randint(3, VOCAB, (4, 7), generator=g)
    reference = suspect.decode_fn(copy.deepcopy(model).eval(), src, 6)
    torch.manual_seed(8)  # the dropout masks, if any are drawn
    for _ in range(2):
        model.train()
        if not torch.equal(suspect.decode_fn(model, src, 6), reference):
            return False
    return True


def train_briefly(suspect: Suspect, steps: int = 200, seed: int = 0) -> dict[str, float]:
    """Train a small model (d_model 32, 2 layers, the suspect's attention and table) to
    reverse strings of 3 to 8 letters over "abcdefgh", for `steps` Adam steps of 64 pairs
    (constant learning rate 3e-3, plain cross-entropy, the library's training loop), then
    measure it on 300 held-out strings. Returns {"train loss": mean of the last 20 training
    losses, "teacher-forced": exact match when every position reads the correct prefix
    (`training.evaluate`), "greedy": exact match of greedy decoding (`decoding.greedy_decode`),
    the output a user gets}. Bug 2's cheat sheet shows as a training loss as low as the clean
    model's (lower for most seeds) and a high teacher-forced score with a greedy one near 0."""
    check_positive_int("steps", steps)
    alphabet = "abcdefgh"
    vocab = Vocab(alphabet)
    train_pairs = make_reverse_pairs(4000, 3, 8, alphabet, seed=seed + 1)
    test_pairs = make_reverse_pairs(300, 3, 8, alphabet, seed=seed + 2)
    model = plant(small_model(seed, vocab=len(vocab)), suspect)
    config = TrainConfig(max_steps=steps, schedule="constant", lr=3e-3, label_smoothing=0.0,
                         progress=False)
    loader = make_loader(train_pairs, vocab, vocab, batch_size=64, seed=seed)
    history = train(model, loader, None, config)
    src, tgt = collate(test_pairs, vocab, vocab)
    teacher_forced, _ = evaluate(model, [(src, tgt)], config)
    tokens = greedy_decode(model, src, max_len=10).tokens
    greedy = exact_match([vocab.decode(row) for row in tokens], [t for _, t in test_pairs])
    return {"train loss": sum(history.loss[-20:]) / 20, "teacher-forced": teacher_forced,
            "greedy": greedy}


def small_lm(seed: int = 0) -> CausalLM:
    """Chapter 14's kind of model, small: a `lm.CausalLM` with vocabulary 20, d_model 32,
    4 heads, d_ff 64, 2 layers, max_len 32; in eval mode."""
    torch.manual_seed(seed)
    config = CausalLMConfig(vocab_size=VOCAB, d_model=D_MODEL, n_heads=N_HEADS, d_ff=D_FF,
                            n_layers=2, max_len=32)
    return CausalLM(config).eval()


def checks(scales=SCALES) -> dict[str, Callable[[Suspect], bool]]:
    """The book's checks by name, the attention checks trying the scores at `scales`."""
    scales = _check_scales(scales)
    return {
        "torch.nn": partial(matches_torch, scales=scales),
        "causal": partial(is_causal, scales=scales),
        "finite loss": loss_is_finite,
        "variance": variance_is_one,
        "rotation": rotation_holds,
        "padding": partial(padding_is_invisible, scales=scales),
        "next token": target_is_next_token,
        "eval mode": decodes_without_dropout,
    }


CHECKS: dict[str, Callable[[Suspect], bool]] = checks()


def caught_by(suspects: list[Suspect], checks: dict[str, Callable[[Suspect], bool]]
              ) -> dict[str, dict[str, str]]:
    """{suspect name: {check name: verdict}}: "caught" when the check fails on the suspect,
    "error" when it raises ValueError or TypeError (the library refused the suspect's piece,
    or the check could not read what it needs from it, as the variance check from an
    attention that returns no weights), "." when it passes."""
    table = {}
    for s in suspects:
        row = {}
        for name, check in checks.items():
            try:
                row[name] = "." if check(s) else "caught"
            except (ValueError, TypeError):
                row[name] = "error"
        table[s.name] = row
    return table


def _label(name: str) -> str:
    first = name.split()[0] if name.split() else name
    return first if first.isdigit() else "clean" if name.startswith("clean") else name


def format_table(caught: dict[str, dict[str, str]], width: int = 88) -> str:
    """A text table of the verdicts of `caught_by`, at most `width` characters wide: one row
    per check, one column per suspect (labelled by its number, or "clean"), "X" where the
    check fails (the suspect is caught), "." where it passes, "E" where it raised; then a
    legend naming the suspects."""
    import textwrap

    suspects = list(caught)
    checks = list(next(iter(caught.values())))
    labels = [_label(name) for name in suspects]
    mark = {"caught": "X", ".": ".", "error": "E"}
    first = max(len(c) for c in checks + ["check"]) + 2
    col = max(max(len(label) for label in labels) + 2, 4)
    lines = ["check".ljust(first) + "".join(label.rjust(col) for label in labels)]
    for check in checks:
        lines.append(check.ljust(first) + "".join(
            mark.get(caught[name][check], caught[name][check]).rjust(col) for name in suspects))
    named = [f"{label} = {name.split(' ', 1)[1]}" for label, name in zip(labels, suspects)
             if label.isdigit() and " " in name]
    lines.append(textwrap.fill("X: the check fails, the suspect is caught; .: it passes; "
                               "E: it raised", width))
    legend = ""
    for entry in named:  # pack whole entries into lines, never splitting one
        if legend and len(legend) + 2 + len(entry) > width:
            lines.append(legend + ";")
            legend = entry
        else:
            legend = f"{legend}; {entry}" if legend else entry
    if legend:
        lines.append(legend)
    text = "\n".join(lines)
    too_wide = [line for line in text.splitlines() if len(line) > width]
    if too_wide:
        raise ValueError(f"the table is wider than width={width}: {too_wide[0]!r}")
    return text
