"""Chapter 18's tools: what trained heads compute, measured from their weights and attention.

An induction head (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits";
Olsson et al. 2022, "In-context Learning and Induction Heads") completes a pattern seen
earlier in the context: having read ... A B ... A, it predicts B. It needs two heads in two
layers: a previous-token head writes "the token before me was A" into the position of B, and
the induction head, at the second A, attends to the position whose previous token is A (its
keys read what the first head wrote: K-composition) and copies the token it finds there.

- `repeated_sequences`: random tokens whose second half repeats the first (the test set);
- `induction_windows`: a re-iterable loader of text windows mixed with repeated segments of
  random lengths (the training set);
- `previous_token_score`, `induction_score`: per head, the attention on the previous position
  and on the token after the earlier copy of the current token (prefix matching);
- `copying_score`: per head, how far its OV circuit maps each token to itself;
- `half_losses`, `in_context_score`, `in_context_shift`: the losses the phase change shows in;
  `held_out_sets` and `measure`: the yardsticks every run is measured on, and one evaluation;
- `stream_into`, `attention_weights`: a layer's attention with its queries and its keys read
  from different residual streams (how K-composition is shown);
- `ablate_heads`: a context manager that zeroes the output of chosen heads;
- `draw_circuit`: the picture of the two heads at work; `plot_phase_change` and `plot_scores`:
  the chapter's figures of the training curves and of every head's scores;
- `model_config`, `train_config`: chapter 18's recipe (an attention-only `CausalLM`), shared
  with `benchmarks/induction.py`, which trains it over seeds.

Every function takes a `lm.CausalLM` (or its recorded attention weights); none changes the
model's weights.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch
import torch.nn.functional as F

from ..lm import CausalLM, CausalLMConfig
from ..runtime import eval_mode
from ..training import TrainConfig
from .induction_figures import draw_circuit, phase_change_step, plot_phase_change, plot_scores

__all__ = ["LENGTH", "EARLY", "LATE", "MIN_REPEAT", "held_out_sets", "measure", "draw_circuit",
           "plot_phase_change", "plot_scores", "phase_change_step", "model_config", "train_config",
           "repeated_sequences", "induction_windows", "previous_token_score", "induction_score",
           "copying_score", "half_losses", "in_context_score", "in_context_shift", "stream_into",
           "attention_weights", "ablate_heads"]


#: The context length of chapter 18's models (the test sequences repeat a period of LENGTH // 2).
LENGTH = 64
#: The in-context score's early and late positions [start, stop) in a window of LENGTH tokens.
EARLY, LATE = (8, 16), (48, 63)
#: The shortest repeated segment in chapter 18's training rows (the longest is LENGTH // 2).
MIN_REPEAT = 8


def model_config(vocab_size: int, n_layers: int = 2) -> CausalLMConfig:
    """Chapter 18's model: attention only (no feed-forward sub-layers), 4 heads of width 16,
    learned positions added to unscaled embeddings."""
    return CausalLMConfig(vocab_size=vocab_size, d_model=64, n_heads=4, n_layers=n_layers, ffn="none",
                          positions="learned", scale_embeddings=False, max_len=LENGTH)


def train_config(max_steps: int = 3000, eval_every: int = 100) -> TrainConfig:
    """Chapter 18's training: Adam at a constant 3e-3 (after no warm-up), plain cross-entropy."""
    return TrainConfig(max_steps=max_steps, schedule="constant", lr=3e-3, label_smoothing=0.0, clip_norm=1.0,
                       eval_every=eval_every, progress=False)


def _check_int(name: str, value, least: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")


def _check_model(model) -> None:
    if not isinstance(model, CausalLM):
        raise TypeError(f"model must be a transformer_lib.lm.CausalLM, got {type(model).__name__}")


def _check_alphabet(alphabet) -> torch.Tensor:
    if not isinstance(alphabet, torch.Tensor) or alphabet.ndim != 1 or alphabet.dtype != torch.long:
        raise ValueError("alphabet must be a 1-D tensor of token ids (torch.long)")
    if len(alphabet) < 2:
        raise ValueError(f"alphabet must hold at least 2 tokens, got {len(alphabet)}")
    return alphabet


def repeated_sequences(alphabet: torch.Tensor, n: int, period: int, seed: int = 0) -> torch.Tensor:
    """n sequences of 2 * period tokens: `period` tokens drawn uniformly from `alphabet`
    (a 1-D tensor of ids), then the same tokens again. Returns (n, 2 * period) ids.

    The first half is unpredictable (about log |alphabet| nats a token for any model); the
    second half is predictable only by looking back at the first."""
    _check_alphabet(alphabet)
    _check_int("n", n)
    _check_int("period", period, 2)
    generator = torch.Generator().manual_seed(seed)
    half = alphabet[torch.randint(0, len(alphabet), (n, period), generator=generator)]
    return torch.cat([half, half], dim=1)


class induction_windows:
    """A re-iterable loader of `steps` batches (x, y) of shape (batch_size, length): windows of
    `ids` (N,) with their targets shifted by one, where each row, with probability `p_repeat`,
    starts instead with a segment of r random tokens from `alphabet` followed by its repeat
    (r uniform in [min_repeat, length // 2]), the rest of the row being the text window.
    Repeat lengths vary so that no fixed offset predicts the repeat: only looking up the
    earlier copy does. Every pass draws the same batches (a generator seeded with `seed`)."""

    def __init__(self, ids: torch.Tensor, alphabet: torch.Tensor, batch_size: int, length: int, steps: int,
                 p_repeat: float = 0.9, min_repeat: int = MIN_REPEAT, seed: int = 0):
        if not isinstance(ids, torch.Tensor) or ids.ndim != 1:
            raise ValueError("ids must be a 1-D tensor of token ids")
        _check_alphabet(alphabet)
        for name, value in (("batch_size", batch_size), ("length", length), ("steps", steps)):
            _check_int(name, value)
        _check_int("min_repeat", min_repeat, 2)
        if 2 * min_repeat > length:
            raise ValueError(f"min_repeat={min_repeat} must be at most length // 2 = {length // 2}")
        if isinstance(p_repeat, bool) or not isinstance(p_repeat, (int, float)) or not 0 <= p_repeat <= 1:
            raise ValueError(f"p_repeat must be a probability in [0, 1], got {p_repeat!r}")
        if len(ids) < length + 2:
            raise ValueError(f"ids holds {len(ids)} tokens, too few for windows of length {length}")
        self.ids, self.alphabet = ids, alphabet
        self.batch_size, self.length, self.steps = batch_size, length, steps
        self.p_repeat, self.min_repeat, self.seed = float(p_repeat), min_repeat, seed

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        B, T, half = self.batch_size, self.length, self.length // 2
        pos = torch.arange(T + 1)[None]  # (1, T + 1)
        for _ in range(self.steps):
            starts = torch.randint(0, len(self.ids) - T - 1, (B, 1), generator=g)
            window = self.ids[starts + pos]  # (B, T + 1): text
            segment = self.alphabet[torch.randint(0, len(self.alphabet), (B, half), generator=g)]
            r = torch.randint(self.min_repeat, half + 1, (B, 1), generator=g)  # repeat length per row
            repeated = segment.gather(1, (pos % r).clamp(max=half - 1))  # (B, T + 1): s s s ...
            rows = torch.rand(B, 1, generator=g) < self.p_repeat
            window = torch.where(rows & (pos < 2 * r), repeated, window)  # s s, then text
            yield window[:, :-1], window[:, 1:]


def _check_weights(weights: torch.Tensor) -> torch.Tensor:
    """(..., n_heads, T, T) -> (n_heads, T, T), averaged over the leading (batch) dimensions."""
    if not isinstance(weights, torch.Tensor) or weights.ndim < 3 or weights.shape[-1] != weights.shape[-2]:
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"weights must have shape (..., n_heads, T, T) (self-attention), got {shape}")
    return weights.reshape(-1, *weights.shape[-3:]).float().mean(0)


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Per head, the mean attention from position i on position i - 1 (i = 1 .. T - 1).

    weights: (..., n_heads, T, T) attention weights (rows = queries); returns (n_heads,), each
    in [0, 1]: 1 for a head that always looks exactly one token back."""
    w = _check_weights(weights)
    if w.shape[-1] < 2:
        raise ValueError("weights must span at least 2 positions")
    return w.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


def induction_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """Per head, the prefix-matching score on sequences that repeat with `period`:
    the mean attention from position i (i = period .. 2 period - 1, the repeat) on position
    i - period + 1, the token that followed the earlier copy of token i (Olsson et al. 2022).

    weights: (..., n_heads, T, T) with T >= 2 * period; returns (n_heads,), each in [0, 1]."""
    w = _check_weights(weights)
    _check_int("period", period, 2)
    if w.shape[-1] < 2 * period:
        raise ValueError(f"weights span {w.shape[-1]} positions, fewer than 2 * period = {2 * period}")
    return w[:, period:2 * period].diagonal(offset=1, dim1=-2, dim2=-1).mean(-1)


@torch.no_grad()
def copying_score(model: CausalLM, layer: int, tokens: torch.Tensor | None = None) -> torch.Tensor:
    """Per head of `layer`, the copying score of its OV circuit (Elhage et al. 2021):

        M_h = E_ln W_V^h W_O^h E_out^T      (tokens x tokens; how reading token a raises the
                                             logit of token b, through head h alone)
        score_h = sum(eigenvalues of M_h) / sum(|eigenvalues of M_h|)   in [-1, 1]

    E_ln is the embedding scaled by the layer's norm gain, E_out the output matrix scaled by
    the final norm gain (the norms' centring and division are left out: an approximation).
    A head that copies what it attends to has mostly positive eigenvalues (score near 1).
    `tokens` (1-D ids) restricts M to those rows and columns (default: every token).
    Returns (n_heads,)."""
    _check_model(model)
    n_layers = len(model.layers)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layers:
        raise ValueError(f"layer must be an integer in [0, {n_layers - 1}], got {layer!r}")
    block = model.layers[layer]
    attn = block.self_attn
    if attn.n_kv_heads != attn.n_heads:
        raise ValueError("copying_score reads one value head per query head: n_kv_heads must equal n_heads")
    E = model.embed.weight.double() * getattr(model.embed, "scale", 1.0)  # (V, d_model)
    U = model.out.weight.double()  # (V, d_model)
    if tokens is not None:
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 1:
            raise ValueError("tokens must be a 1-D tensor of token ids")
        E, U = E[tokens], U[tokens]
    gain = getattr(block.norm1, "weight", None)
    if gain is not None and block.norm_first:
        E = E * gain.double()
    final = getattr(model.norm, "weight", None)
    if final is not None:
        U = U * final.double()
    scores = []
    for h in range(attn.n_heads):
        rows = slice(h * attn.d_k, (h + 1) * attn.d_k)
        W_v = attn.w_v.weight[rows].double().T  # (d_model, d_k)
        W_o = attn.w_o.weight[:, rows].double().T  # (d_k, d_model)
        eig = torch.linalg.eigvals(E @ W_v @ W_o @ U.T)  # (V,) complex
        scores.append(eig.real.sum() / eig.abs().sum())
    return torch.stack(scores).float()


def _per_position_loss(model: CausalLM, ids: torch.Tensor) -> torch.Tensor:
    """ids (n, T) -> (T - 1,): the mean next-token loss at each position 0 .. T - 2."""
    with eval_mode(model), torch.no_grad():
        logits = model(ids[:, :-1])  # (n, T - 1, V)
        return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(0)


def half_losses(model: CausalLM, sequences: torch.Tensor) -> tuple[float, float]:
    """(loss on the first half, loss on the repeated half) of `sequences` (n, 2 * period) from
    `repeated_sequences`, in nats per token: the first half's predictions are those of
    positions 0 .. period - 2 (whose targets lie in the first half), the repeat's those of
    positions period .. 2 period - 2 (targets in the second half, after its first token)."""
    _check_model(model)
    if not isinstance(sequences, torch.Tensor) or sequences.ndim != 2 or sequences.shape[1] % 2:
        raise ValueError("sequences must be (n, 2 * period) token ids from repeated_sequences")
    period = sequences.shape[1] // 2
    loss = _per_position_loss(model, sequences)
    return loss[:period - 1].mean().item(), loss[period:].mean().item()


def in_context_score(model: CausalLM, windows: torch.Tensor, early: tuple[int, int],
                     late: tuple[int, int]) -> float:
    """The in-context learning score of Olsson et al. 2022 on a short context: the mean loss
    at the `late` positions [start, stop) minus that at the `early` ones, over `windows`
    (n, T) of ordinary text. Negative: the model predicts better with more context."""
    _check_model(model)
    if not isinstance(windows, torch.Tensor) or windows.ndim != 2:
        raise ValueError("windows must be (n, T) token ids")
    T = windows.shape[1] - 1
    for name, (start, stop) in (("early", early), ("late", late)):
        if not 0 <= start < stop <= T:
            raise ValueError(f"{name} must be (start, stop) with 0 <= start < stop <= {T}, got {(start, stop)}")
    loss = _per_position_loss(model, windows)
    return (loss[late[0]:late[1]].mean() - loss[early[0]:early[1]].mean()).item()


def held_out_sets(alphabet: torch.Tensor, held_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Chapter 18's two yardsticks, the same for every run (fixed seeds): 256 sequences of
    LENGTH // 2 random tokens of `alphabet` repeated, (256, LENGTH), and 512 windows of LENGTH + 1
    tokens of the held-out text `held_ids` (N,), (512, LENGTH + 1)."""
    _check_alphabet(alphabet)
    if not isinstance(held_ids, torch.Tensor) or held_ids.ndim != 1 or len(held_ids) < LENGTH + 2:
        raise ValueError(f"held_ids must be a 1-D tensor of at least {LENGTH + 2} token ids")
    test = repeated_sequences(alphabet, 256, LENGTH // 2, seed=1000)
    g = torch.Generator().manual_seed(1001)
    starts = torch.randint(0, len(held_ids) - LENGTH - 1, (512, 1), generator=g)
    return test, held_ids[starts + torch.arange(LENGTH + 1)]


def measure(model: CausalLM, curve: dict, step: int, test: torch.Tensor, windows: torch.Tensor) -> None:
    """One evaluation: append `step`, the losses on the first and the repeated half of `test`
    and the in-context score on `windows` (EARLY against LATE) to the lists "step", "first",
    "repeat" and "icl" of `curve`."""
    first, repeat = half_losses(model, test)
    curve["step"].append(step)
    curve["first"].append(first)
    curve["repeat"].append(repeat)
    curve["icl"].append(in_context_score(model, windows, EARLY, LATE))


def in_context_shift(curve: dict, step: int, k: int = 5) -> float:
    """The mean in-context score of the k evaluations of `curve` from `step` on, minus that of
    the k evaluations before it (`curve` holds lists "step" and "icl"). Negative: the score
    fell (the model got better with context) across `step`."""
    if step not in curve["step"]:
        raise ValueError(f"step {step} is not one of the curve's evaluation steps")
    i = curve["step"].index(step)
    if i < k or i + k > len(curve["step"]):
        raise ValueError(f"the curve needs {k} evaluations before step {step} and {k} from it on")
    after, before = curve["icl"][i:i + k], curve["icl"][i - k:i]
    return sum(after) / k - sum(before) / k


@torch.no_grad()
def stream_into(model: CausalLM, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """The residual stream entering `layer` when `model` reads `ids` (B, T): (B, T, d_model).
    Any heads switched off by an enclosing `ablate_heads` stay off."""
    _check_model(model)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(model.layers):
        raise ValueError(f"layer must be an integer in [0, {len(model.layers) - 1}], got {layer!r}")
    seen = {}
    handle = model.layers[layer].register_forward_pre_hook(lambda module, args: seen.setdefault("x", args[0]))
    try:
        with eval_mode(model):
            model(ids)
    finally:
        handle.remove()
    return seen["x"]


@torch.no_grad()
def attention_weights(model: CausalLM, layer: int, queries_from: torch.Tensor,
                      keys_from: torch.Tensor) -> torch.Tensor:
    """The attention weights of `layer`, (B, n_heads, T, T), with its queries computed from the
    stream `queries_from` and its keys from `keys_from` (both (B, T, d_model), as `stream_into`
    gives them): softmax(LN(x_q) W_Q (LN(x_k) W_K)^T / sqrt(d_k)) under the causal mask, for a
    pre-norm layer without rotary positions. With one stream for both it is the layer's own
    attention; keys from a stream where an earlier head was switched off show whether the
    layer's keys read that head (K-composition, Elhage et al. 2021)."""
    _check_model(model)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(model.layers):
        raise ValueError(f"layer must be an integer in [0, {len(model.layers) - 1}], got {layer!r}")
    block = model.layers[layer]
    attn = block.self_attn
    if not block.norm_first or attn.rotary is not None or attn.n_kv_heads != attn.n_heads:
        raise ValueError("attention_weights needs a pre-norm layer without rotary positions or grouped keys")
    if queries_from.shape != keys_from.shape or queries_from.ndim != 3:
        raise ValueError(f"queries_from and keys_from must both be (B, T, d_model), got "
                         f"{tuple(queries_from.shape)} and {tuple(keys_from.shape)}")
    q = attn.split_heads(attn.w_q(block.norm1(queries_from)))  # (B, h, T, d_k)
    k = attn.split_heads(attn.w_k(block.norm1(keys_from)))  # (B, h, T, d_k)
    scores = q @ k.transpose(-2, -1) / attn.d_k ** 0.5  # (B, h, T, T)
    T = scores.shape[-1]
    causal = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1)


@contextlib.contextmanager
def ablate_heads(model: CausalLM, heads: Iterable[tuple[int, int]]):
    """Within the block, the heads named by (layer, head) pairs contribute nothing: their
    outputs are zeroed before W_O (a forward pre-hook on each layer's output projection).
    The weights are untouched; the hooks are removed on leaving the block, even on error."""
    _check_model(model)
    by_layer: dict[int, list[int]] = {}
    for pair in heads:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise ValueError(f"heads must be (layer, head) pairs, got {pair!r}")
        layer, head = pair
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(model.layers):
            raise ValueError(f"layer must be an integer in [0, {len(model.layers) - 1}], got {layer!r}")
        n_heads = model.layers[layer].self_attn.n_heads
        if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < n_heads:
            raise ValueError(f"head must be an integer in [0, {n_heads - 1}], got {head!r}")
        by_layer.setdefault(layer, []).append(head)
    handles = []
    for layer, chosen in by_layer.items():
        attn = model.layers[layer].self_attn

        def zero(module, inputs, attn=attn, chosen=tuple(chosen)):
            (x,) = inputs  # (B, T, n_heads * d_k): the heads' outputs side by side (Concat)
            x = x.clone()
            for h in chosen:
                x[..., h * attn.d_k:(h + 1) * attn.d_k] = 0
            return (x,)

        handles.append(attn.w_o.register_forward_pre_hook(zero))
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()
