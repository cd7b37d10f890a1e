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
* :class:`Seq2Seq`: the two together, with the Transformer's interface (``forward``,
  ``encode``, ``decode``, ``new_cache``: :class:`GRUDecoderCache`), so that ``training.train``,
  ``decoding`` and ``checkpoints`` serve both; ``alignment`` gives the attention weights of a teacher-forced pass.

Masks follow the package's convention: boolean, ``True`` where attention is allowed. Padded
input positions get exactly zero weight. Inputs are right-padded with ``<pad>``
(``special_tokens.PAD_ID``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ._checks import check_bool, check_choice, check_config, check_positive_int, check_tensor, check_token_ids
from .masks import masked_softmax
from .special_tokens import PAD_ID

__all__ = ["GRUEncoder", "AdditiveAttention", "DotProductAttention", "GRUDecoder", "GRUDecoderCache", "Seq2Seq",
           "Seq2SeqConfig", "ATTENTION_KINDS"]

ATTENTION_KINDS = (None, "additive", "dot")


class GRUEncoder(nn.Module):
    """Character embeddings and a GRU over the input.

    ``forward(src_ids)`` with ``src_ids`` (batch, T_x) right-padded with ``<pad>`` returns

    * ``features`` (batch, T_x, feature_size): the states ``a_t'`` (forward and backward
      concatenated when bidirectional), zero at padded positions;
    * ``summary`` (batch, feature_size): the last forward state (at each sequence's true end)
      and, if bidirectional, the backward state at position 0;
    * ``mask`` (batch, T_x): True at real (non-padded) positions.
    """

    def __init__(self, vocab_size: int, emb_dim: int = 64, hidden_size: int = 128,
                 bidirectional: bool = True):
        super().__init__()
        for name, v in (("vocab_size", vocab_size), ("emb_dim", emb_dim), ("hidden_size", hidden_size)):
            check_positive_int(name, v)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.bidirectional = bool(bidirectional)
        self.feature_size = hidden_size * (2 if bidirectional else 1)
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.gru = nn.GRU(emb_dim, hidden_size, batch_first=True, bidirectional=self.bidirectional)

    def forward(self, src_ids: torch.Tensor):
        check_token_ids("src_ids", src_ids, self.vocab_size)
        if src_ids.shape[1] == 0:
            raise ValueError("src_ids must hold at least one position, got shape (batch, 0)")
        mask = src_ids != PAD_ID
        lengths = mask.sum(dim=1)
        if (lengths == 0).any():
            raise ValueError("src_ids: a sequence is all padding")
        emb = self.embedding(src_ids)
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.gru(packed)
        features, _ = pad_packed_sequence(out, batch_first=True, total_length=src_ids.size(1))
        summary = torch.cat(list(h_n), dim=-1)  # (dirs, B, H) -> (B, dirs * H)
        return features, summary, mask

    def summary_of(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The summary ``c`` read back from ``features`` (batch, T_x, feature_size) and ``mask``
        (batch, T_x): the forward state at each sequence's last real position and, if
        bidirectional, the backward state at position 0. Equals the ``summary`` of ``forward``."""
        last = (mask.sum(dim=1) - 1).clamp_min(0)  # (B,) index of the last real position
        fwd = features[torch.arange(features.size(0), device=features.device), last, : self.hidden_size]
        if not self.bidirectional:
            return fwd
        return torch.cat([fwd, features[:, 0, self.hidden_size:]], dim=-1)


class _RNNAttention(nn.Module):
    """What the two scores share: weights = softmax over the allowed positions of
    `scores(query, keys)`, and the context = sum over t' of weights[t'] keys[t']."""

    def forward(self, query, keys, mask=None, projected=None):
        weights = masked_softmax(self.scores(query, keys, projected), mask)  # (B, T_x)
        context = torch.bmm(weights.unsqueeze(1), keys).squeeze(1)  # (B, key_size)
        return context, weights


class AdditiveAttention(_RNNAttention):
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


class DotProductAttention(_RNNAttention):
    """Luong et al. (2015) multiplicative attention: ``e[t'] = q^T W a_t'`` ("general").

    With ``general=False`` and ``query_size == key_size`` the score is the plain dot product
    ``q^T a_t'`` ("dot"), with no parameters. Same call as :class:`AdditiveAttention`.
    """

    def __init__(self, query_size: int, key_size: int, general: bool = True):
        super().__init__()
        check_positive_int("query_size", query_size)
        check_positive_int("key_size", key_size)
        if not general and query_size != key_size:
            raise ValueError(f"general: the plain dot product needs query_size == key_size, "
                             f"got {query_size} and {key_size}")
        self.W = nn.Linear(key_size, query_size, bias=False) if general else None

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return keys if self.W is None else self.W(keys)

    def scores(self, query, keys, projected=None):
        if projected is None:
            projected = self.project_keys(keys)
        return torch.bmm(projected, query.unsqueeze(-1)).squeeze(-1)


class GRUDecoder(nn.Module):
    """A GRU decoder, with ``attention`` in ``(None, "additive", "dot")``.

    One step (producing output t from the previous token ``y_{t-1}`` and state ``s_{t-1}``)::

        c_t   = attention(s_{t-1}, a)        or the fixed summary c without attention
        s_t   = GRU([emb(y_{t-1}); c_t], s_{t-1})
        logit = Linear([s_t; c_t; emb(y_{t-1})])

    and ``s_0 = tanh(W_init c)``. ``forward`` runs it over a whole (teacher-forced) target.
    """

    def __init__(self, vocab_size: int, feature_size: int, emb_dim: int = 64, hidden_size: int = 128,
                 attention: str | None = "additive", attn_size: int = 128):
        super().__init__()
        for name, v in (("vocab_size", vocab_size), ("feature_size", feature_size), ("emb_dim", emb_dim),
                        ("hidden_size", hidden_size)):
            check_positive_int(name, v)
        if attention not in ATTENTION_KINDS:
            raise ValueError(f"attention: expected one of {ATTENTION_KINDS!r}, got {attention!r}")
        self.attention_kind = attention
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
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


class GRUDecoderCache:
    """What a GRU decoder carries from one generated token to the next, so that each step reads
    only the newest token: its state ``s_t`` (batch, hidden_size), and what the source fixes
    at the first step (the memory it read, the summary ``c``, the mask, the projected keys). It
    plays the part of the Transformer's key/value cache (`Seq2Seq.new_cache` makes one for
    `batch_size` sequences; `decoding` uses both alike). `length` counts the target tokens read."""

    def __init__(self, batch_size: int):
        check_positive_int("batch_size", batch_size)
        self.batch_size, self.length = batch_size, 0
        self.state = self.memory = self.summary = self.mask = self.projected = None

    def reorder(self, rows: torch.Tensor) -> None:
        """Make sequence i what sequence ``rows[i]`` was (rows: (batch,) indices): its state. The
        source's parts stay as they are: `rows` must keep every sequence among the rows of its
        own source (as beam search does), whose memory, summary, mask and keys are the same."""
        check_tensor("rows", rows, ndim=1)
        if rows.shape[0] != self.batch_size:
            raise ValueError(f"rows must give one source row per sequence ({self.batch_size}), got {rows.shape[0]}")
        if self.state is None:
            raise ValueError("reorder: the cache is empty (decode reads a first token into it)")
        self.state = self.state[rows]

    def __repr__(self) -> str:
        return f"GRUDecoderCache(batch {self.batch_size}, {self.length} tokens read)"


@dataclass(frozen=True)
class Seq2SeqConfig:
    """The constructor arguments of :class:`Seq2Seq` (named like ``TransformerConfig``'s
    ``src_vocab`` and ``tgt_vocab``; stored in checkpoints). Padding is ``<pad>``, the id of
    ``special_tokens.PAD_ID`` in every vocabulary."""

    src_vocab: int
    tgt_vocab: int
    emb_dim: int = 64
    hidden_size: int = 128
    attention: str | None = "additive"
    bidirectional: bool = True
    attn_size: int = 128

    def __post_init__(self) -> None:
        for name in ("src_vocab", "tgt_vocab", "emb_dim", "hidden_size", "attn_size"):
            check_positive_int(name, getattr(self, name))
        check_choice("attention", self.attention, ATTENTION_KINDS)
        check_bool("bidirectional", self.bidirectional)


class Seq2Seq(nn.Module):
    """A GRU encoder-decoder: ``Seq2Seq(Seq2SeqConfig(src_vocab, tgt_vocab, attention="additive"))``.

    It has the Transformer's interface, so one training loop and one decoder serve both:

    * ``forward(src, tgt_in)`` -> logits (batch, T_y, tgt_vocab) (teacher forcing);
    * ``encode(src)`` -> memory: the encoder features ``a`` (batch, T_x, feature_size);
    * ``decode(tgt, memory, src_mask)`` -> logits (batch, T, tgt_vocab) for a prefix ``tgt``
      that starts with ``<bos>``: the decoder GRU runs over the whole prefix, as in ``forward``.
      With ``cache=new_cache(...)`` (generation) it reads only the tokens after those the cache
      has seen, carrying the state from the last call, as the Transformer's key/value cache does;
    * ``alignment(src, tgt_in)`` -> the attention weights (batch, T_y, T_x) of the same pass.

    The masks are derived from ``<pad>`` (``PAD_ID``); ``src_mask`` and ``tgt_mask`` are accepted so that
    the calls match the Transformer's (a GRU reads its target in order: no causal mask needed).
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        check_config(config, Seq2SeqConfig)
        self.config = c = config
        self.encoder = GRUEncoder(c.src_vocab, c.emb_dim, c.hidden_size, c.bidirectional)
        self.decoder = GRUDecoder(c.tgt_vocab, self.encoder.feature_size, c.emb_dim, c.hidden_size,
                                  c.attention, c.attn_size)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, T_x) source ids -> memory: the features ``a`` (batch, T_x, feature_size).

        The GRU reads its padding from the ``<pad>`` ids; ``src_mask`` is accepted so that the call
        matches the Transformer's, and must then be that padding mask, (batch, T_x) or
        (batch, 1, 1, T_x)."""
        features, _, mask = self.encoder(src)
        if src_mask is not None and not torch.equal(self._mask_of(src_mask, *src.shape), mask):
            raise ValueError("src_mask must be the padding mask of src (True at ids != PAD_ID): the GRU "
                             "encoder reads every real position in order and cannot skip others")
        return features

    @staticmethod
    def _mask_of(src_mask: torch.Tensor, batch: int, length: int) -> torch.Tensor:
        """src_mask (batch, T_x) or (batch, 1, 1, T_x), boolean -> (batch, T_x)."""
        check_tensor("src_mask", src_mask)
        if src_mask.dtype != torch.bool or tuple(src_mask.shape) not in ((batch, length), (batch, 1, 1, length)):
            raise ValueError(f"src_mask must be a boolean (batch, T_x) = {(batch, length)} or "
                             f"(batch, 1, 1, T_x) mask, got {src_mask.dtype} of shape {tuple(src_mask.shape)}")
        return src_mask.reshape(batch, length)

    def _check_decode(self, tgt: torch.Tensor, memory: torch.Tensor) -> None:
        check_tensor("memory", memory, ndim=3, floating=True)
        if memory.size(-1) != self.encoder.feature_size:
            raise ValueError(f"memory: expected (batch, T_x, {self.encoder.feature_size}), got {tuple(memory.shape)}")
        check_token_ids("tgt", tgt, self.config.tgt_vocab)
        if tgt.size(0) != memory.size(0) or tgt.size(1) == 0:
            raise ValueError(f"tgt: expected (batch, T_y) with batch {memory.size(0)} and T_y >= 1 (it starts "
                             f"with <bos>), got shape {tuple(tgt.shape)}")

    def _source_mask(self, src_mask: torch.Tensor | None, memory: torch.Tensor) -> torch.Tensor:
        """(batch, T_x), True at real source positions (all of them without `src_mask`)."""
        if src_mask is None:
            return torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device)
        return self._mask_of(src_mask, memory.size(0), memory.size(1))

    def _run(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None):
        self._check_decode(tgt, memory)
        mask = self._source_mask(src_mask, memory)
        summary = self.encoder.summary_of(memory, mask)
        return self.decoder(tgt, memory, summary, mask)  # logits (B, T, V), weights (B, T, T_x) or None

    def new_cache(self, batch_size: int, src_len: int, max_len: int | None = None) -> list[GRUDecoderCache]:
        """An empty decoder cache for generating from `batch_size` sources (a list of one
        `GRUDecoderCache`, as the Transformer has one cache per layer). A GRU carries a fixed-size
        state, so `src_len` and `max_len` (taken for the Transformer's signature) size nothing."""
        check_positive_int("src_len", src_len)
        if max_len is not None:
            check_positive_int("max_len", max_len)
        return [GRUDecoderCache(batch_size)]

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None = None,
               tgt_mask: torch.Tensor | None = None, cache: list[GRUDecoderCache] | None = None) -> torch.Tensor:
        """Prefix ``tgt`` (batch, T) and memory (batch, T_x, feature_size) -> logits (batch, T, V).
        ``src_mask`` (batch, T_x) or (batch, 1, 1, T_x), True at real positions, is needed
        whenever the source batch holds padding.

        With `cache` (from `new_cache`: generation), ``tgt`` holds only the tokens after the
        `cache.length` already read (the first call: the prefix from ``<bos>``); the decoder steps
        from the state it left, one token at a time, and the logits are those of the whole
        prefix at the new positions. Every call must pass the memory of the first."""
        if cache is None:
            return self._run(tgt, memory, src_mask)[0]
        if not (isinstance(cache, list) and len(cache) == 1 and isinstance(cache[0], GRUDecoderCache)):
            raise TypeError(f"cache must be the model's new_cache(...): a list of one GRUDecoderCache, "
                            f"got {type(cache).__name__}")
        c = cache[0]
        self._check_decode(tgt, memory)
        if tgt.shape[0] != c.batch_size:
            raise ValueError(f"cache holds {c.batch_size} sequences but tgt has {tgt.shape[0]}")
        if c.length == 0:  # the first call: what the source fixes, and s_0
            c.memory, c.mask = memory, self._source_mask(src_mask, memory)
            c.summary = self.encoder.summary_of(memory, c.mask)
            c.state, c.projected = self.decoder.start(memory, c.summary, c.mask)
        elif memory is not c.memory and not (memory.shape == c.memory.shape and torch.equal(memory, c.memory)):
            raise ValueError("memory must be the memory of the cache's first call (the cache holds what it fixed)")
        logits = []
        for t in range(tgt.shape[1]):
            step, c.state, _ = self.decoder.step(tgt[:, t], c.state, memory, c.summary, c.mask, c.projected)
            logits.append(step)
        c.length += tgt.shape[1]
        return torch.stack(logits, dim=1)  # (batch, T, V)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, src_mask: torch.Tensor | None = None,
                tgt_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src (batch, T_x), tgt_in (batch, T_y) starting with ``<bos>`` -> logits (batch, T_y, V)."""
        check_token_ids("src", src, self.config.src_vocab)
        check_token_ids("tgt_in", tgt_in, self.config.tgt_vocab)
        return self.decode(tgt_in, self.encode(src), src != PAD_ID)

    def alignment(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """The attention weights alpha (batch, T_y, T_x) of a teacher-forced pass: row t is where
        the decoder looked to write token t + 1 of ``tgt_in``. Zero on padded inputs."""
        if self.decoder.attention is None:
            raise ValueError("alignment: this model has no attention (attention=None), so no weights")
        check_token_ids("src", src, self.config.src_vocab)
        check_token_ids("tgt_in", tgt_in, self.config.tgt_vocab)
        return self._run(tgt_in, self.encode(src), src != PAD_ID)[1]

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in asdict(self.config).items())
