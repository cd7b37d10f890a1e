"""Decoder-only language models: the Transformer's blocks without the encoder (chapters 14, 16).

A causal language model reads tokens x_1..x_T and predicts, at every position t, the next token
x_{t+1} from x_1..x_t alone (Radford et al. 2018, 2019; GPT). It is a stack of the encoder
layers of `layers.py` with the causal mask of `masks.py` in their self-attention: no encoder,
no cross-attention. This module adds what generation needs:

- `CausalLMConfig` and `CausalLM`: embedding * sqrt(d_model) + sinusoidal positions, n_layers
  `EncoderLayer`s under a causal mask, a final norm (pre-norm, as in GPT-2) and an output layer
  tied to the embedding; the config's later fields switch on today's variants one at a time
  (RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases, untied output,
  QK-norm; chapter 16);
- the key/value cache: `model.new_cache(batch_size)` gives one `attention.KVCache` per layer,
  and `model(ids, cache=cache)` runs only the new tokens through the same layers, which read
  and extend the cache in place;
- `generate`: greedy decoding, or sampling with a temperature and top-k filtering, with or
  without the cache (both give the same tokens);
- `lm_loss`, `lm_evaluate` and `random_windows`: next-token training through the book's one
  loop, `training.train`;
- `load_corpus`: the book's own prose (CC BY 4.0), shipped as package data.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (check_bool, check_choice, check_config, check_positive_int, check_positive_number,
                      check_probability, check_tensor, check_token_ids, entry_point)
from .kv_cache import KVCache, check_layer_caches
from .layers import FFNS, EncoderLayer
from .masks import causal_mask
from .model import POSITIONS, Embeddings, init_weights
from .positional import RotaryEmbedding, check_rope_scaling
from .residual import NORMS, make_norm
from .runtime import device_of, eval_mode

__all__ = ["CORPORA", "load_corpus", "CausalLMConfig", "CausalLM", "layer_parameters", "match_d_ff", "top_k_filter",
           "check_sampling", "next_token", "generate", "lm_loss", "lm_evaluate", "random_windows"]

#: The corpora shipped with the package (package data, so Colab and Binder get them too).
CORPORA = Path(__file__).resolve().parent / "corpora"


def load_corpus(name: str = "book_prose") -> str:
    """The text of `corpora/<name>.txt` without its first line (a comment naming source and licence)."""
    path = CORPORA / f"{name}.txt"
    if not isinstance(name, str) or not path.is_file():
        known = sorted(p.stem for p in CORPORA.glob("*.txt"))
        raise ValueError(f"name must be one of the corpora {known}, got {name!r}")
    return path.read_text(encoding="utf-8").split("\n", 1)[1]


@dataclass(frozen=True)
class CausalLMConfig:
    """The sizes of a `CausalLM`, named as in the paper, and its variant parts.

    The defaults are chapter 14's model: the 2017 block in GPT-2's pre-norm arrangement.
    Chapter 16 changes the last fields one at a time:

    - norm: "layer" (LayerNorm) or "rms" (RMSNorm, Zhang and Sennrich 2019);
    - positions: "sinusoidal" (the paper's, added to the embeddings), "learned", "rope"
      (rotary, Su et al. 2021, applied to queries and keys) or "none";
    - ffn: "relu" (the paper's) or "swiglu" (Shazeer 2020; give it 2/3 of the d_ff to keep
      the parameter count), or "none": no feed-forward sub-layer, an attention-only model
      (chapter 18; d_ff is then unused);
    - n_kv_heads: key/value heads; None means n_heads, fewer is grouped-query attention
      (Ainslie et al. 2023), 1 is multi-query attention (Shazeer 2019);
    - bias: biases in every linear layer and norm (False: none anywhere, as in Llama);
    - tie_output: the output layer reuses the embedding matrix (Press and Wolf 2017);
    - scale_embeddings: multiply the embeddings by sqrt(d_model) (the paper, section 3.4);
    - rope_scaling, rope_factor, rope_trained_length: context extension of rotary positions
      (None, or "pi", "ntk", "yarn"; the factor s = new length / trained length; the trained
      length, for "yarn" only): `positional.RotaryEmbedding`'s scaling, factor and
      trained_length. They change no weight, so a trained model's state dict loads into a
      model built with them (chapter 16).
    - qk_norm: QK-norm, each head's queries and keys normalised over their d_k channels by a
      norm of the kind `norm` before the rotary positions and the dot product (Dehghani et al.
      2023, arXiv:2302.05442, with LayerNorm; Gemma 3 per head with RMSNorm).
    """

    vocab_size: int
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 256
    n_layers: int = 2
    max_len: int = 512  # the longest sequence (prompt and generated tokens) the model accepts
    dropout: float = 0.0
    norm_first: bool = True  # pre-norm layers and a final norm (GPT-2); False: the paper's post-norm
    norm: str = "layer"
    positions: str = "sinusoidal"
    ffn: str = "relu"
    n_kv_heads: int | None = None
    bias: bool = True
    tie_output: bool = True
    scale_embeddings: bool = True
    rope_scaling: str | None = None
    rope_factor: float = 1.0
    rope_trained_length: int | None = None
    qk_norm: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "n_layers", "max_len"):
            check_positive_int(name, getattr(self, name))
        check_probability("dropout", self.dropout)
        for name in ("norm_first", "bias", "tie_output", "scale_embeddings", "qk_norm"):
            check_bool(name, getattr(self, name))
        check_choice("norm", self.norm, NORMS)
        check_choice("positions", self.positions, POSITIONS)
        check_choice("ffn", self.ffn, FFNS)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.n_kv_heads is not None:
            check_positive_int("n_kv_heads", self.n_kv_heads)
            if self.n_heads % self.n_kv_heads:
                raise ValueError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
        if self.positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(f"positions='rope' turns pairs of channels: d_k = d_model / n_heads = "
                             f"{self.d_model // self.n_heads} must be even")
        check_rope_scaling(self.rope_scaling, self.rope_factor, self.rope_trained_length, prefix="rope_")
        if self.rope_scaling is not None and self.positions != "rope":
            raise ValueError(f"rope_scaling={self.rope_scaling!r} stretches rotary positions: it needs "
                             f"positions='rope', got positions={self.positions!r}")


class CausalLM(nn.Module):
    """A decoder-only Transformer language model: logits for the next token at every position.

    ids (batch, T) -> logits (batch, T, vocab_size), where position t sees ids[:, :t+1] only:

        h_0 = E[x] * sqrt(d_model) + PE            (sections 3.4 and 3.5 of Vaswani et al. 2017)
        h_l = EncoderLayer_l(h_{l-1}, causal mask)  (l = 1..n_layers)
        logits = Norm(h_L) E^T + b                  (output tied to the embedding E)

    (with `config.norm_first=False`, the paper's post-norm layers and no final norm).

    Generation: `cache = model.new_cache(batch)`, then `model(ids, cache=cache)` with the
    prompt, then with each new token. The layers compute queries, keys and values for the new
    positions only, append the keys and values to the cache, and attend over everything cached:
    the logits equal those of `model(all tokens so far)` at the new positions (up to rounding).
    """

    def __init__(self, config: CausalLMConfig):
        super().__init__()
        check_config(config, CausalLMConfig)
        self.config = c = config
        self.embed = Embeddings(c.vocab_size, c.d_model, c.max_len, c.dropout, c.positions, c.scale_embeddings)
        d_k = c.d_model // c.n_heads
        rotary = (RotaryEmbedding(d_k, scaling=c.rope_scaling, factor=c.rope_factor,
                                  trained_length=c.rope_trained_length)
                  if c.positions == "rope" else None)  # no parameters: shared by the layers
        self.layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first, bias=c.bias, norm=c.norm,
                         ffn=c.ffn, n_kv_heads=c.n_kv_heads, rotary=rotary, qk_norm=c.qk_norm)
            for _ in range(c.n_layers))
        self.norm = make_norm(c.norm, c.d_model, bias=c.bias) if c.norm_first else nn.Identity()
        self.out = nn.Linear(c.d_model, c.vocab_size, bias=c.bias)
        init_weights(self)
        if c.tie_output:
            self.out.weight = self.embed.weight

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def d_model(self) -> int:
        return self.config.d_model

    @property
    def max_len(self) -> int:
        return self.config.max_len

    def _check(self, ids: torch.Tensor, cache: list[KVCache] | None = None) -> None:
        """Check ids (and the cache) once per call (`_checks.entry_point`)."""
        check_token_ids("ids", ids, self.config.vocab_size)
        if ids.shape[1] == 0:
            raise ValueError("ids must hold at least one position, got shape (batch, 0)")
        start = 0
        if cache is not None:
            start = check_layer_caches(cache, len(self.layers), KVCache, ids.shape[0], ids.shape[1], "ids")
        if start + ids.shape[1] > self.config.max_len:
            raise ValueError(f"positions {start}..{start + ids.shape[1] - 1} go past max_len={self.config.max_len} "
                             "of the model: give a shorter sequence or build the model with a larger max_len")

    @entry_point(_check)
    def forward(self, ids: torch.Tensor, cache: list[KVCache] | None = None) -> torch.Tensor:
        """ids (batch, T) -> logits (batch, T, vocab_size); position t sees positions <= t.

        With `cache` (from `new_cache`), ids are the tokens at positions cache.length ..
        cache.length + T - 1, after the cached ones, and the cache is extended by them."""
        start = 0 if cache is None else cache[0].length
        h = self.embed(ids, start)  # (B, T, d_model): positions start .. start + T - 1
        T = ids.shape[1]
        mask = None if T == 1 else causal_mask(T, device=ids.device, k_len=start + T)  # (T, start + T)
        for i, layer in enumerate(self.layers):
            h = layer(h, mask, None if cache is None else cache[i])
        return self.out(self.norm(h))  # (B, T, vocab_size)

    def new_cache(self, batch_size: int, max_len: int | None = None) -> list[KVCache]:
        """An empty key/value cache for `batch_size` sequences of up to `max_len` (default: the
        model's) positions: one `KVCache` per layer, allocated once."""
        max_len = self.config.max_len if max_len is None else max_len
        check_positive_int("max_len", max_len)
        if max_len > self.config.max_len:
            raise ValueError(f"max_len={max_len} is longer than the model's max_len={self.config.max_len}")
        return [layer.self_attn.new_cache(batch_size, max_len) for layer in self.layers]

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in asdict(self.config).items())


def layer_parameters(model: CausalLM) -> int:
    """The parameters of the model's layers and final norm: everything but the embedding, the
    positional table and the output layer, which the variants of chapter 16 share (or, for an
    untied output or learned positions, add on top)."""
    if not isinstance(model, CausalLM):
        raise TypeError(f"model must be a transformer_lib.lm.CausalLM, got {type(model).__name__}")
    return sum(p.numel() for part in (model.layers, model.norm) for p in part.parameters())


def match_d_ff(config: CausalLMConfig, n_parameters: int) -> CausalLMConfig:
    """A copy of `config` whose d_ff brings `layer_parameters` nearest to `n_parameters`.

    How chapter 16 gives every variant the 2017 block's budget: d_ff is the one width that
    moves. The count is linear in d_ff (each hidden unit adds 2 d_model weights and a bias to
    a ReLU network, 3 d_model weights (and 2 biases) to SwiGLU, in every layer), so two counts
    fix the line and the nearest d_ff is rounded from it. Against a ReLU network of the same
    d_model, SwiGLU gets about 2/3 of its d_ff (Shazeer 2020). The models are built on the
    "meta" device: no memory is used.
    """
    check_config(config, CausalLMConfig)
    check_positive_int("n_parameters", n_parameters)
    if config.ffn == "none":
        raise ValueError("match_d_ff moves d_ff, which an attention-only model (ffn='none') does not use")

    def count(d_ff: int) -> int:
        with torch.device("meta"):
            return layer_parameters(CausalLM(replace(config, d_ff=d_ff)))

    at_one, per_unit = count(1), count(2) - count(1)
    return replace(config, d_ff=max(1, 1 + round((n_parameters - at_one) / per_unit)))


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits of each row (last dimension) and set the others to -inf.

    logits (..., V) -> (..., V). Exactly k survive per row, so softmax then puts all the
    probability on the k most likely tokens (Fan et al. 2018, arXiv:1805.04833).
    """
    check_tensor("logits", logits, floating=True)
    check_positive_int("top_k", k)
    if k > logits.shape[-1]:
        raise ValueError(f"top_k={k} is larger than the vocabulary ({logits.shape[-1]} logits per row)")
    values, indices = logits.topk(k, dim=-1)
    return torch.full_like(logits, float("-inf")).scatter(-1, indices, values)


def check_sampling(vocab_size: int, sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
                   generator: torch.Generator | None = None) -> None:
    """Raise unless the choice settings fit together and a vocabulary of `vocab_size`: greedy
    decoding takes none of temperature, top_k and generator; top_k is at most vocab_size."""
    check_bool("sample", sample)
    check_positive_number("temperature", temperature)
    if top_k is not None:
        check_positive_int("top_k", top_k)
        if top_k > vocab_size:
            raise ValueError(f"top_k={top_k} is larger than the vocabulary ({vocab_size} tokens)")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if not sample and (top_k is not None or temperature != 1.0 or generator is not None):
        raise ValueError("top_k, temperature and generator shape sampling: pass sample=True, or leave them "
                         "at their defaults for greedy decoding")


def next_token(logits: torch.Tensor, *, sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Choose the next token of each row from its logits (batch, V); returns ids (batch, 1).

    Greedy (sample=False): the argmax. Sampling: draw from softmax(filtered logits / temperature),
    where a temperature below 1 sharpens the distribution and above 1 flattens it, and top_k
    first keeps only the k most likely tokens. `generator` fixes the random draws.
    """
    check_tensor("logits", logits, ndim=2, floating=True)
    check_sampling(logits.shape[-1], sample, temperature, top_k, generator)
    if not sample:
        return logits.argmax(dim=-1, keepdim=True)
    scaled = logits / temperature
    if top_k is not None:
        scaled = top_k_filter(scaled, top_k)
    return torch.multinomial(scaled.softmax(dim=-1), 1, generator=generator)


def _check_generate(model: CausalLM, prompt: torch.Tensor, max_new_tokens: int, *, sample: bool = False,
                    temperature: float = 1.0, top_k: int | None = None, generator: torch.Generator | None = None,
                    use_cache: bool = True) -> None:
    if not isinstance(model, CausalLM):
        raise TypeError(f"model must be a transformer_lib.lm.CausalLM, got {type(model).__name__}")
    check_token_ids("prompt", prompt, model.vocab_size)
    if prompt.shape[1] == 0:
        raise ValueError("prompt must hold at least one token per row, got shape (batch, 0)")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    if prompt.shape[1] + max_new_tokens > model.max_len:
        raise ValueError(f"prompt length {prompt.shape[1]} + max_new_tokens {max_new_tokens} exceeds the model's "
                         f"max_len={model.max_len}")
    check_bool("use_cache", use_cache)
    check_sampling(model.vocab_size, sample, temperature, top_k, generator)


@entry_point(_check_generate)
def generate(model: CausalLM, prompt: torch.Tensor, max_new_tokens: int, *, sample: bool = False,
             temperature: float = 1.0, top_k: int | None = None, generator: torch.Generator | None = None,
             use_cache: bool = True) -> torch.Tensor:
    """Extend `prompt` (batch, T) by `max_new_tokens` tokens; returns (batch, T + max_new_tokens).

    Each new token is chosen by `next_token` (greedy by default; see there for sampling) from
    the logits at the last position. With `use_cache` the prompt runs once through the model
    with a fresh cache and every later step feeds only the new token; without it every step
    runs the model on the whole sequence so far. Both give the same tokens (greedy) and the
    same draws (sampling with the same generator), the first much faster on long outputs.
    Runs in eval mode without gradients and restores the model's mode. The arguments are
    checked once, before the first step.
    """
    choose = dict(sample=sample, temperature=temperature, top_k=top_k, generator=generator)
    with eval_mode(model), torch.no_grad():
        ids = prompt
        cache = model.new_cache(prompt.shape[0], prompt.shape[1] + max_new_tokens) if use_cache else None
        new = prompt  # what the model has not read yet
        for _ in range(max_new_tokens):
            if use_cache:
                logits = model(new, cache=cache)[:, -1]  # only the new positions, attending to the cache
            else:
                logits = model(ids)[:, -1]  # the whole prefix again: O(t) positions at step t
            new = next_token(logits, **choose)  # (B, 1)
            ids = torch.cat([ids, new], dim=1)
    return ids


# ----- training through training.train: the next-token task -----

def lm_loss(model: CausalLM, batch, cfg=None) -> torch.Tensor:
    """Mean next-token cross-entropy of a batch (x, y) of token ids (B, T), y = x shifted by one:
    the `loss_fn` that `training.train` takes for a language model. The label smoothing of
    `cfg` (a `TrainConfig`) applies; without one, none (the plain cross-entropy)."""
    x, y = batch
    logits = model(x)  # (B, T, V)
    smoothing = 0.0 if cfg is None else cfg.label_smoothing
    return F.cross_entropy(logits.flatten(0, 1), y.flatten(), label_smoothing=smoothing)


@torch.no_grad()
def lm_evaluate(model: CausalLM, batches, cfg=None) -> tuple[float, float]:
    """(next-token accuracy, mean cross-entropy in nats per token) over `batches` of (x, y):
    the `eval_fn` that `training.train` takes for a language model (it reads nothing of `cfg`,
    which `train` passes to every `eval_fn`). Every token counts the same; the loss has no
    label smoothing (it is the held-out measure). Batches are moved to the model's device."""
    correct = total = 0
    loss_sum = 0.0
    device = device_of(model)
    with eval_mode(model):
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss_sum += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
            correct += int((logits.argmax(-1) == y).sum())
            total += y.numel()
    return correct / max(total, 1), loss_sum / max(total, 1)


class random_windows:
    """A re-iterable loader of `steps` batches of `batch_size` random windows of `length` tokens
    from `ids` (N,), each with its target shifted by one: (x, y), both (batch_size, length).
    Every pass draws the same windows (a generator seeded with `seed`), so runs repeat."""

    def __init__(self, ids: torch.Tensor, batch_size: int, length: int, steps: int, seed: int = 0):
        check_tensor("ids", ids, ndim=1)
        for name, value in (("batch_size", batch_size), ("length", length), ("steps", steps)):
            check_positive_int(name, value)
        if len(ids) < length + 2:
            raise ValueError(f"ids holds {len(ids)} tokens, too few for windows of length {length}")
        self.ids, self.batch_size, self.length, self.steps, self.seed = ids, batch_size, length, steps, seed

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        generator = torch.Generator(device="cpu").manual_seed(self.seed)
        offsets = torch.arange(self.length + 1, device="cpu")
        for _ in range(self.steps):  # indices drawn on the CPU (the generator's device), whatever the book's device
            starts = torch.randint(0, len(self.ids) - self.length - 1, (self.batch_size, 1), generator=generator,
                                   device="cpu")
            window = self.ids[starts + offsets]  # (B, length + 1)
            yield window[:, :-1], window[:, 1:]
