"""Recurrent encoder-decoders, with and without attention (Part I of the book).

* :class:`GRUEncoder`: embeddings and a (by default bidirectional) GRU; returns one feature
  vector per input position, ``a_t'`` of shape (batch, T_x, feature_size), the summary
  vector ``c`` (the last forward and first backward states, concatenated) and the padding mask.
* :class:`AdditiveAttention` (Bahdanau et al. 2015): ``e = v^T tanh(W s + U a)``.
* :class:`DotProductAttention` (Luong et al. 2015): ``e = s^T W a`` ("general"), or ``s^T a``.
* :class:`GRUDecoder`: a GRU decoder in the style of Bahdanau et al.: at output step t it scores
  the encoder features against the previous state ``s_{t-1}``, forms the context ``c_t``, and
  updates its state from ``[y_{t-1}; c_t]``. Without attention the context is the fixed
  summary ``c`` at every step (Cho et al. 2014): the whole input must pass through one vector.
* :class:`Seq2Seq`: the two together, with teacher-forced ``forward`` and ``greedy`` decoding.

Masks follow the package's convention: boolean, ``True`` where attention is allowed. Padded
input positions get exactly zero weight. Inputs are right-padded with ``pad_id`` (0).

Helpers at the end train and evaluate these models: :func:`seq2seq_loss`, :func:`train_seq2seq`,
:func:`translate`, :func:`exact_match`, :func:`accuracy_by_length`, and
:func:`save_checkpoint` / :func:`load_checkpoint` (``torch.load(..., weights_only=True)``).
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ._checks import check_positive_int
from .masks import masked_softmax
from .vocab import BOS_ID, EOS_ID, PAD_ID, Vocab, collate

__all__ = [
    "GRUEncoder", "AdditiveAttention", "DotProductAttention", "GRUDecoder",
    "Seq2Seq", "ATTENTION_KINDS", "seq2seq_loss", "train_seq2seq", "greedy_decode", "translate",
    "exact_match", "accuracy_by_length", "save_checkpoint", "load_checkpoint", "draw_seq2seq",
]

ATTENTION_KINDS = (None, "additive", "dot")


class GRUEncoder(nn.Module):
    """Character embeddings and a GRU over the input.

    ``forward(src_ids)`` with ``src_ids`` (batch, T_x) right-padded with ``pad_id`` returns

    * ``features`` (batch, T_x, feature_size): the states ``a_t'`` (forward and backward
      concatenated when bidirectional), zero at padded positions;
    * ``summary`` (batch, feature_size): the last forward state (at each sequence's true end)
      and, if bidirectional, the backward state at position 0;
    * ``mask`` (batch, T_x): True at real (non-padded) positions.
    """

    def __init__(self, vocab_size: int, emb_dim: int = 64, hidden_size: int = 128,
                 bidirectional: bool = True, pad_id: int = PAD_ID):
        super().__init__()
        for name, v in (("vocab_size", vocab_size), ("emb_dim", emb_dim), ("hidden_size", hidden_size)):
            check_positive_int(name, v)
        self.pad_id = pad_id
        self.hidden_size = hidden_size
        self.bidirectional = bool(bidirectional)
        self.feature_size = hidden_size * (2 if bidirectional else 1)
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.gru = nn.GRU(emb_dim, hidden_size, batch_first=True, bidirectional=self.bidirectional)

    def forward(self, src_ids: torch.Tensor):
        if src_ids.dim() != 2 or src_ids.dtype != torch.long:
            raise ValueError(f"src_ids: expected a (batch, T_x) LongTensor, got {src_ids.dtype} of shape {tuple(src_ids.shape)}")
        mask = src_ids != self.pad_id
        lengths = mask.sum(dim=1)
        if (lengths == 0).any():
            raise ValueError("src_ids: a sequence is all padding")
        emb = self.embedding(src_ids)
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.gru(packed)
        features, _ = pad_packed_sequence(out, batch_first=True, total_length=src_ids.size(1))
        summary = torch.cat(list(h_n), dim=-1)  # (dirs, B, H) -> (B, dirs * H)
        return features, summary, mask


class AdditiveAttention(nn.Module):
    """Bahdanau et al. (2015) attention: ``e[t'] = v^T tanh(W_q q + W_k a_t')``.

    ``forward(query, keys, mask)`` with ``query`` (batch, query_size), ``keys`` (batch, T_x,
    key_size) and ``mask`` (batch, T_x) (True = allowed) returns the context (batch, key_size)
    and the weights (batch, T_x), which sum to 1 over the allowed positions.
    ``project_keys(keys)`` computes ``W_k a`` once per sequence; pass it as ``projected``.
    """

    def __init__(self, query_size: int, key_size: int, attn_size: int = 128):
        super().__init__()
        for name, v in (("query_size", query_size), ("key_size", key_size), ("attn_size", attn_size)):
            check_positive_int(name, v)
        self.W_q = nn.Linear(query_size, attn_size, bias=False)
        self.W_k = nn.Linear(key_size, attn_size, bias=False)
        self.v = nn.Linear(attn_size, 1, bias=False)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.W_k(keys)

    def scores(self, query: torch.Tensor, keys: torch.Tensor, projected: torch.Tensor | None = None) -> torch.Tensor:
        if projected is None:
            projected = self.project_keys(keys)
        return self.v(torch.tanh(self.W_q(query).unsqueeze(1) + projected)).squeeze(-1)

    def forward(self, query, keys, mask=None, projected=None):
        weights = masked_softmax(self.scores(query, keys, projected), mask)
        context = torch.bmm(weights.unsqueeze(1), keys).squeeze(1)
        return context, weights


class DotProductAttention(nn.Module):
    """Luong et al. (2015) multiplicative attention: ``e[t'] = q^T W a_t'`` ("general").

    With ``general=False`` and ``query_size == key_size`` the score is the plain dot product
    ``q^T a_t'`` ("dot"), with no parameters. Same call as :class:`AdditiveAttention`.
    """

    def __init__(self, query_size: int, key_size: int, general: bool = True):
        super().__init__()
        check_positive_int("query_size", query_size)
        check_positive_int("key_size", key_size)
        if not general and query_size != key_size:
            raise ValueError(f"general: the plain dot product needs query_size == key_size, got {query_size} and {key_size}")
        self.W = nn.Linear(key_size, query_size, bias=False) if general else None

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return keys if self.W is None else self.W(keys)

    def scores(self, query, keys, projected=None):
        if projected is None:
            projected = self.project_keys(keys)
        return torch.bmm(projected, query.unsqueeze(-1)).squeeze(-1)

    def forward(self, query, keys, mask=None, projected=None):
        weights = masked_softmax(self.scores(query, keys, projected), mask)
        context = torch.bmm(weights.unsqueeze(1), keys).squeeze(1)
        return context, weights


class GRUDecoder(nn.Module):
    """A GRU decoder, with ``attention`` in ``(None, "additive", "dot")``.

    One step (producing output t from the previous token ``y_{t-1}`` and state ``s_{t-1}``)::

        c_t   = attention(s_{t-1}, a)        or the fixed summary c without attention
        s_t   = GRU([emb(y_{t-1}); c_t], s_{t-1})
        logit = Linear([s_t; c_t; emb(y_{t-1})])

    and ``s_0 = tanh(W_init c)``. ``forward`` runs it over a whole (teacher-forced) target.
    """

    def __init__(self, vocab_size: int, feature_size: int, emb_dim: int = 64, hidden_size: int = 128,
                 attention: str | None = "additive", attn_size: int = 128, pad_id: int = PAD_ID):
        super().__init__()
        for name, v in (("vocab_size", vocab_size), ("feature_size", feature_size), ("emb_dim", emb_dim),
                        ("hidden_size", hidden_size)):
            check_positive_int(name, v)
        if attention not in ATTENTION_KINDS:
            raise ValueError(f"attention: expected one of {ATTENTION_KINDS!r}, got {attention!r}")
        self.attention_kind = attention
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.init_state = nn.Linear(feature_size, hidden_size)
        # an nn.GRU (not a GRUCell) so that without attention, where every step's input is
        # known in advance under teacher forcing, the whole target runs in one fused call
        self.rnn = nn.GRU(emb_dim + feature_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size + feature_size + emb_dim, vocab_size)
        if attention == "additive":
            self.attention = AdditiveAttention(hidden_size, feature_size, attn_size)
        elif attention == "dot":
            self.attention = DotProductAttention(hidden_size, feature_size)
        else:
            self.attention = None

    def start(self, features, summary, mask):
        """The initial state ``s_0`` and a cache of the projected keys."""
        s0 = torch.tanh(self.init_state(summary))
        projected = self.attention.project_keys(features) if self.attention is not None else None
        return s0, projected

    def step(self, y_prev, state, features, summary, mask, projected=None):
        """One decoder step. ``y_prev`` (batch,) -> logits (batch, V), new state, weights (batch, T_x) or None."""
        emb = self.embedding(y_prev)
        if self.attention is None:
            context, weights = summary, None
        else:
            context, weights = self.attention(state, features, mask, projected)
        state = self.rnn(torch.cat([emb, context], dim=-1).unsqueeze(1), state.unsqueeze(0))[1].squeeze(0)
        logits = self.out(torch.cat([state, context, emb], dim=-1))
        return logits, state, weights

    def forward(self, tgt_in, features, summary, mask):
        """Teacher forcing: ``tgt_in`` (batch, T_y) starts with ``<bos>``. Returns logits
        (batch, T_y, V) and the alignment weights (batch, T_y, T_x), or None without attention."""
        state, projected = self.start(features, summary, mask)
        if self.attention is None:  # the context is the same at every step: one call over time
            emb = self.embedding(tgt_in)
            context = summary.unsqueeze(1).expand(-1, tgt_in.size(1), -1)
            states, _ = self.rnn(torch.cat([emb, context], dim=-1), state.unsqueeze(0))
            return self.out(torch.cat([states, context, emb], dim=-1)), None
        all_logits, all_weights = [], []
        for t in range(tgt_in.size(1)):
            logits, state, weights = self.step(tgt_in[:, t], state, features, summary, mask, projected)
            all_logits.append(logits)
            all_weights.append(weights)
        weights = None if self.attention is None else torch.stack(all_weights, dim=1)
        return torch.stack(all_logits, dim=1), weights


class Seq2Seq(nn.Module):
    """A GRU encoder-decoder: ``Seq2Seq(src_vocab_size, tgt_vocab_size, attention="additive")``.

    ``forward(src_ids, tgt_in)`` -> ``(logits (batch, T_y, V_tgt), weights (batch, T_y, T_x) or None)``.
    ``greedy(src_ids, max_len)`` -> ``(ids (batch, <= max_len), weights or None)``.
    ``config`` holds the constructor arguments (saved in checkpoints).
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, emb_dim: int = 64, hidden_size: int = 128,
                 attention: str | None = "additive", bidirectional: bool = True, attn_size: int = 128,
                 pad_id: int = PAD_ID):
        super().__init__()
        self.config = dict(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, emb_dim=emb_dim,
                           hidden_size=hidden_size, attention=attention, bidirectional=bidirectional,
                           attn_size=attn_size, pad_id=pad_id)
        self.encoder = GRUEncoder(src_vocab_size, emb_dim, hidden_size, bidirectional, pad_id)
        self.decoder = GRUDecoder(tgt_vocab_size, self.encoder.feature_size, emb_dim, hidden_size,
                                  attention, attn_size, pad_id)

    def forward(self, src_ids: torch.Tensor, tgt_in: torch.Tensor):
        if tgt_in.dim() != 2 or tgt_in.size(0) != src_ids.size(0):
            raise ValueError(f"tgt_in: expected (batch, T_y) with batch {src_ids.size(0)}, got shape {tuple(tgt_in.shape)}")
        features, summary, mask = self.encoder(src_ids)
        return self.decoder(tgt_in, features, summary, mask)

    @torch.no_grad()
    def greedy(self, src_ids: torch.Tensor, max_len: int, bos_id: int = BOS_ID, eos_id: int = EOS_ID):
        """Greedy decoding: feed back the most likely token until every row has produced
        ``<eos>`` or ``max_len`` tokens. Returns the ids (without ``<bos>``; positions after a
        row's ``<eos>`` are ``<pad>``) and the weights (batch, steps, T_x) or None."""
        check_positive_int("max_len", max_len)
        features, summary, mask = self.encoder(src_ids)
        dec = self.decoder
        state, projected = dec.start(features, summary, mask)
        y = torch.full((src_ids.size(0),), bos_id, dtype=torch.long, device=src_ids.device)
        done = torch.zeros_like(y, dtype=torch.bool)
        ids, weights = [], []
        for _ in range(max_len):
            logits, state, w = dec.step(y, state, features, summary, mask, projected)
            y = logits.argmax(dim=-1)
            ids.append(y.masked_fill(done, PAD_ID))
            weights.append(w)
            done = done | (y == eos_id)
            if bool(done.all()):
                break
        w = None if dec.attention is None else torch.stack(weights, dim=1)
        return torch.stack(ids, dim=1), w


# --------------------------------------------------------------------------------------
# Training and evaluation helpers
# --------------------------------------------------------------------------------------

def seq2seq_loss(model: Seq2Seq, src_ids: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
    """Teacher-forced cross-entropy: feed ``tgt_ids[:, :-1]`` (``<bos>`` ...), predict
    ``tgt_ids[:, 1:]`` (... ``<eos>``); padded positions are ignored."""
    logits, _ = model(src_ids, tgt_ids[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_ids[:, 1:].reshape(-1), ignore_index=PAD_ID)


def train_seq2seq(model: Seq2Seq, pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab,
                  steps: int = 1000, batch_size: int = 64, lr: float = 1e-3, seed: int = 0, clip: float = 1.0,
                  max_seconds: float | None = None, log_every: int = 0,
                  callback: Callable[[int, float], None] | None = None,
                  optimizer: torch.optim.Optimizer | None = None) -> list[float]:
    """Train ``model`` with Adam and teacher forcing on batches drawn at random from ``pairs``.

    Batches depend only on ``seed``; with a fixed thread count the losses are reproducible.
    Stops after ``steps`` steps or ``max_seconds`` seconds (whichever is first; a time limit
    makes the result depend on the machine). Prints the mean loss every ``log_every`` steps
    (rounded to 4 decimals) and calls ``callback(step, loss)`` after each step.
    Returns the loss of every step.
    """
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    if len(pairs) == 0:
        raise ValueError("pairs: expected at least one training pair")
    gen = torch.Generator().manual_seed(seed)
    opt = optimizer if optimizer is not None else torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses: list[float] = []
    start = time.perf_counter()
    for step in range(1, steps + 1):
        idx = torch.randint(len(pairs), (batch_size,), generator=gen).tolist()
        src, tgt = collate([pairs[i] for i in idx], src_vocab, tgt_vocab)
        loss = seq2seq_loss(model, src, tgt)
        opt.zero_grad()
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
        if callback is not None:
            callback(step, losses[-1])
        if log_every and step % log_every == 0:
            recent = losses[-log_every:]
            print(f"step {step:5d}  loss {sum(recent) / len(recent):.4f}")
        if max_seconds is not None and time.perf_counter() - start > max_seconds:
            break
    model.eval()
    return losses


def greedy_decode(model: Seq2Seq, sources: Sequence[str], src_vocab: Vocab, tgt_vocab: Vocab,
                  max_len: int = 40, batch_size: int = 512, return_weights: bool = False):
    """Greedy outputs of ``model`` for the strings ``sources``.

    Returns a list of strings; with ``return_weights`` also a list of the alignment matrices
    (each (output length incl. ``<eos>``, input length), or None without attention)."""
    if isinstance(sources, str):
        raise TypeError("sources: expected a list of strings, not a single string")
    model.eval()
    outputs, all_weights = [], []
    for start in range(0, len(sources), batch_size):
        chunk = list(sources[start: start + batch_size])
        src, _ = collate([(s, "") for s in chunk], src_vocab, tgt_vocab)
        ids, weights = model.greedy(src, max_len)
        for i, s in enumerate(chunk):
            out = tgt_vocab.decode(ids[i])
            outputs.append(out)
            if return_weights:
                n_out = min(len(out) + 1, ids.size(1))
                all_weights.append(None if weights is None else weights[i, :n_out, : len(s)].clone())
    return (outputs, all_weights) if return_weights else outputs


def translate(model: Seq2Seq, sources: Sequence[str], src_vocab: Vocab, tgt_vocab: Vocab,
              max_len: int = 40) -> list[str]:
    """Greedy outputs of ``model`` for ``sources`` (a shorthand for :func:`greedy_decode`)."""
    return greedy_decode(model, sources, src_vocab, tgt_vocab, max_len=max_len)


def exact_match(model: Seq2Seq, pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab,
                max_len: int | None = None) -> float:
    """Fraction of ``pairs`` whose greedy output equals the target exactly."""
    if len(pairs) == 0:
        raise ValueError("pairs: expected at least one pair")
    if max_len is None:
        max_len = max(len(t) for _, t in pairs) + 1
    outs = greedy_decode(model, [s for s, _ in pairs], src_vocab, tgt_vocab, max_len=max_len)
    return sum(o == t for o, (_, t) in zip(outs, pairs)) / len(pairs)


def accuracy_by_length(model: Seq2Seq, pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab,
                       max_len: int | None = None) -> dict[int, float]:
    """Exact match grouped by source length: ``{length: accuracy}``, sorted by length."""
    if len(pairs) == 0:
        raise ValueError("pairs: expected at least one pair")
    if max_len is None:
        max_len = max(len(t) for _, t in pairs) + 1
    outs = greedy_decode(model, [s for s, _ in pairs], src_vocab, tgt_vocab, max_len=max_len)
    hits: dict[int, list[int]] = {}
    for o, (s, t) in zip(outs, pairs):
        hits.setdefault(len(s), []).append(o == t)
    return {n: sum(h) / len(h) for n, h in sorted(hits.items())}


def _plain(value, where: str = "meta"):
    """``value`` as plain Python types (what ``weights_only=True`` loading accepts)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return str(value)  # also turns str subclasses such as torch.__version__ into str
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, where) for k, v in value.items()}
    raise TypeError(f"{where}: expected numbers, strings, lists and dicts, got {type(value).__name__}")


def save_checkpoint(path, model: Seq2Seq, src_vocab: Vocab, tgt_vocab: Vocab, meta: dict | None = None) -> None:
    """Save weights, constructor arguments, vocabularies and ``meta`` (numbers, strings, lists
    and dicts only) to ``path`` in a form that ``torch.load(path, weights_only=True)`` reads."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save({"config": _plain(dict(model.config), "config"), "state_dict": state,
                "src_tokens": list(src_vocab.tokens), "tgt_tokens": list(tgt_vocab.tokens),
                "meta": _plain(dict(meta or {}))}, path)


def load_checkpoint(path) -> tuple[Seq2Seq, Vocab, Vocab, dict]:
    """Load a :func:`save_checkpoint` file (with ``weights_only=True``): ``(model in eval mode,
    src_vocab, tgt_vocab, meta)``."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model = Seq2Seq(**ckpt["config"])
    model.load_state_dict(ckpt["state_dict"])
    model.eval()
    return model, Vocab.from_tokens(ckpt["src_tokens"]), Vocab.from_tokens(ckpt["tgt_tokens"]), ckpt["meta"]


# --------------------------------------------------------------------------------------
# A picture of the two designs
# --------------------------------------------------------------------------------------

def draw_seq2seq(src_tokens: Sequence[str], tgt_tokens: Sequence[str], weights=None, step: int | None = None,
                 ax=None, title: str | None = None):
    """Draw a recurrent encoder-decoder as boxes and arrows.

    Without ``weights``: the encoder's last state becomes one vector ``c`` that every decoder
    step receives (the bottleneck). With ``weights`` (T_y, T_x) and an output ``step``: lines
    from every encoder state to decoder step ``step``, as thick and dark as the weight
    alpha[step, t'] (attention). Returns the matplotlib Axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    src_tokens, tgt_tokens = list(src_tokens), list(tgt_tokens)
    if not src_tokens or not tgt_tokens:
        raise ValueError("src_tokens, tgt_tokens: expected at least one token each")
    n_x, n_y = len(src_tokens), len(tgt_tokens)
    if weights is not None:
        w = torch.as_tensor(weights, dtype=torch.float64)
        if w.shape != (n_y, n_x):
            raise ValueError(f"weights: expected shape (T_y, T_x) = ({n_y}, {n_x}), got {tuple(w.shape)}")
        if step is None or not 0 <= step < n_y:
            raise ValueError(f"step: expected an output step in [0, {n_y}), got {step!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.5 * max(n_x, n_y) + 2.5, 3.0))
    width = max(n_x, n_y) - 1.0
    enc_x = [i * width / max(n_x - 1, 1) for i in range(n_x)]
    dec_x = [i * width / max(n_y - 1, 1) for i in range(n_y)]
    enc_y, dec_y, c_y = 0.0, 2.4, 1.2

    def box(x, y, color, label=None):
        ax.add_patch(FancyBboxPatch((x - 0.3, y - 0.25), 0.6, 0.5, boxstyle="round,pad=0.02",
                                    facecolor=color, edgecolor="black", linewidth=0.8, zorder=3))
        if label is not None:
            ax.text(x, y, label, ha="center", va="center", fontsize=8, zorder=4)

    def arrow(x0, y0, x1, y1, lw=0.8, alpha=1.0, color="black"):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), zorder=2,
                    arrowprops=dict(arrowstyle="-|>", lw=lw, color=color, alpha=alpha, shrinkA=9, shrinkB=9))

    for i, (x, tok) in enumerate(zip(enc_x, src_tokens)):
        box(x, enc_y, "#56B4E9")
        ax.text(x, enc_y - 0.55, tok.replace(" ", "\u2423"), ha="center", va="top", fontsize=9)
        if i:
            arrow(enc_x[i - 1], enc_y, x, enc_y)
    for i, (x, tok) in enumerate(zip(dec_x, tgt_tokens)):
        box(x, dec_y, "#E69F00")
        ax.text(x, dec_y + 0.5, tok, ha="center", va="bottom", fontsize=9)
        if i:
            arrow(dec_x[i - 1], dec_y, x, dec_y)
    if weights is None:
        cx = width + 1.2
        box(cx, c_y, "#CC79A7", "c")
        arrow(enc_x[-1], enc_y, cx, c_y, lw=1.2)
        for x in dec_x:
            arrow(cx, c_y, x, dec_y, lw=0.7, alpha=0.6)
    else:
        row = w[step] / max(float(w[step].max()), 1e-12)
        for x, a in zip(enc_x, row.tolist()):
            if a > 0.02:
                arrow(x, enc_y, dec_x[step], dec_y, lw=0.4 + 2.6 * a, alpha=0.15 + 0.85 * a, color="#0072B2")
    ax.text(-0.6, enc_y, "encoder", ha="right", va="center", fontsize=9)
    ax.text(-0.6, dec_y, "decoder", ha="right", va="center", fontsize=9)
    ax.set_xlim(-2.4, width + 2.0)
    ax.set_ylim(-1.1, 3.4)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return ax
