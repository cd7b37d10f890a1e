"""Positional encodings: sinusoidal (paper, section 3.5), learned absolute positions, and rotary
position embeddings (RoPE, Su et al. 2021), which rotate queries and keys instead of adding to
the embeddings.

The additive encodings take `start`, the position of the first row of x (0 for a whole
sequence, the cache's length when generation feeds new tokens after cached ones)."""
from __future__ import annotations

import torch
from torch import nn

import math

from ._checks import (check_choice, check_finite, check_last_dim, check_non_negative_int, check_positive_int,
                      check_probability, check_tensor, entry_point)
from .runtime import book_device


def frequencies(d: int, base: float = 10000.0, dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """theta_i = base^(-2i / d) for i = 0 .. d/2 - 1, shape (d / 2,): the angle per position of
    channel pair i, the one frequency ladder of the paper's sinusoids (section 3.5, where
    d = d_model), their rotation (`rotation_for_offset`) and rotary positions (where d = d_k).
    Wavelengths 2 pi / theta_i run from 2 pi to base * 2 pi. Computed in `dtype` (float64 by
    default) on the CPU unless `device` says otherwise."""
    check_positive_int("d", d)
    if d % 2:
        raise ValueError(f"d must be even: the frequencies turn pairs of channels, got {d}")
    two_i = torch.arange(0, d, 2, dtype=dtype, device=device or "cpu")  # (d / 2,)
    return base ** (-two_i / d)


#: Ways to stretch rotary positions past the trained length (`RotaryEmbedding(scaling=...)`).
ROPE_SCALINGS = (None, "pi", "ntk", "yarn")
#: YaRN's ramp (Peng et al. 2023, section 3.2, the values they use for Llama): pairs that turn
#: fewer than ALPHA times over the trained length are interpolated, more than BETA times kept.
YARN_ALPHA, YARN_BETA = 1.0, 32.0


def check_rope_scaling(scaling, factor, trained_length, prefix: str = "") -> None:
    """Raise ValueError naming the argument unless (scaling, factor, trained_length) is a valid
    choice for `RotaryEmbedding`: scaling one of ROPE_SCALINGS; factor a number >= 1, and 1
    when scaling is None; trained_length a positive int for "yarn" (its ramp counts turns over
    the trained length) and None otherwise."""
    check_choice(f"{prefix}scaling", scaling, ROPE_SCALINGS)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor < 1:
        raise ValueError(f"{prefix}factor must be a number >= 1 (new length / trained length), got {factor!r}")
    if scaling is None and factor != 1:
        raise ValueError(f"{prefix}factor={factor!r} needs a {prefix}scaling ('pi', 'ntk' or 'yarn'); "
                         "plain RoPE has factor 1")
    if scaling == "yarn":
        if isinstance(trained_length, bool) or not isinstance(trained_length, int) or trained_length < 1:
            raise ValueError(f"{prefix}trained_length must be a positive int with {prefix}scaling='yarn' (its ramp "
                             f"counts each pair's turns over the trained length), got {trained_length!r}")
    elif trained_length is not None:
        raise ValueError(f"{prefix}trained_length is used by 'yarn' only; got {trained_length!r} "
                         f"with {prefix}scaling={scaling!r}")


def _check_rows(module, x: torch.Tensor, start: int = 0) -> None:
    """x (batch, length, d_model) must fit positions start .. start + length - 1 of the
    module's table of max_len rows."""
    check_tensor("x", x, ndim=3, floating=True)
    check_last_dim("x", x, module.d_model)
    check_finite("x", x)
    check_non_negative_int("start", start)
    if start + x.shape[1] > module.max_len:
        raise ValueError(f"positions {start}..{start + x.shape[1] - 1} go past max_len={module.max_len} "
                         + ("of the positional table" if isinstance(module, PositionalEncoding)
                            else "(learned positions cannot extrapolate)"))


def sinusoidal_encoding(n_positions: int, d_model: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The paper's table of positional encodings, shape (n_positions, d_model):

        PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
        PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

    Even channels hold sines and odd channels cosines (the interleaved layout of the paper).
    Channel pair i turns at frequency 1 / 10000^(2i/d_model): wavelengths run from 2 pi to
    10000 * 2 pi. Computed in float64 on the CPU, returned in `dtype` (default: torch's default
    dtype) on the default device (the book's device, or that of a `with torch.device(...)` block).
    """
    check_positive_int("n_positions", n_positions)
    check_positive_int("d_model", d_model)
    if d_model % 2:
        raise ValueError(f"d_model must be even for sine/cosine pairs, got {d_model}")
    pos = torch.arange(n_positions, dtype=torch.float64, device="cpu")[:, None]  # (n_positions, 1)
    angle = pos * frequencies(d_model)  # (n_positions, d_model / 2): pos / 10000^(2i / d_model)
    pe = torch.empty(n_positions, d_model, dtype=torch.float64, device="cpu")
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(device=book_device(), dtype=dtype or torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    """Add the sinusoidal encoding to a batch of embeddings, then dropout (paper, section 3.5).

    x: (batch, length, d_model) -> (batch, length, d_model). No parameters: the table is a
    buffer of `max_len` rows; longer inputs raise an error naming `max_len`.
    `encoding_fn(n_positions, d_model)` builds the (n_positions, d_model) table; the default is
    the paper's `sinusoidal_encoding` (chapter 15 swaps in a faulty one).
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0, encoding_fn=sinusoidal_encoding):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("max_len", max_len)
        check_probability("dropout", dropout)
        if not callable(encoding_fn):
            raise TypeError(f"encoding_fn must be a function (n_positions, d_model) -> table, got {encoding_fn!r}")
        self.d_model, self.max_len = d_model, max_len
        pe = encoding_fn(max_len, d_model)
        if not isinstance(pe, torch.Tensor) or pe.shape != (max_len, d_model):
            raise ValueError(f"encoding_fn must return a tensor of shape (max_len={max_len}, d_model={d_model}), "
                             f"got {getattr(pe, 'shape', type(pe).__name__)}")
        self.register_buffer("pe", pe.to(device=book_device(), dtype=torch.get_default_dtype()),
                             persistent=False)
        self.dropout = nn.Dropout(dropout)

    @entry_point(_check_rows)
    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x (batch, T, d_model) -> x + PE[start : start + T], then dropout."""
        return self.dropout(x + self.pe[start : start + x.shape[1]].to(x.dtype))


class LearnedPositionalEncoding(nn.Module):
    """Add a learned vector per position (one row of an `nn.Embedding` per position).

    Flexible, but it only knows the positions it was trained on: inputs longer than `max_len`
    raise an error, and positions rarely seen in training stay close to their initial values.
    """

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("max_len", max_len)
        check_probability("dropout", dropout)
        self.d_model, self.max_len = d_model, max_len
        self.pe = nn.Embedding(max_len, d_model)
        self.reset_parameters()
        self.dropout = nn.Dropout(dropout)

    def reset_parameters(self) -> None:
        """Each position's vector drawn from N(0, 1/d_model): about unit length, like the rows
        of the sinusoidal table. Inside a model, `model.init_weights` then makes it
        Xavier-uniform like every other matrix (the models of the book start so)."""
        nn.init.normal_(self.pe.weight, std=self.d_model**-0.5)

    @entry_point(_check_rows)
    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x (batch, T, d_model) -> x + P[start : start + T], then dropout."""
        return self.dropout(x + self.pe.weight[start : start + x.shape[1]])


class RotaryEmbedding(nn.Module):
    """Rotary position embedding, RoPE (Su et al. 2021, arXiv:2104.09864: the rotation in section
    3.2, its element-wise form in section 3.4.2).

    Instead of adding a vector to the embeddings, rotate every query and key: the channel pair
    (2i, 2i+1) of the vector at position m turns by the angle m theta_i, with
    theta_i = base^(-2i / d_k), i = 0 .. d_k/2 - 1 (the frequencies of the paper's sinusoids):

        x'_{2i}   = x_{2i} cos(m theta_i) - x_{2i+1} sin(m theta_i)
        x'_{2i+1} = x_{2i} sin(m theta_i) + x_{2i+1} cos(m theta_i)

    A rotation keeps lengths, and rotating q by m theta and k by n theta changes their dot
    product only through (m - n) theta: the score q'_m . k'_n depends on the offset m - n alone.
    Equivalently, with the pairs read as complex numbers z = x_{2i} + i x_{2i+1},
    z' = z e^{i m theta_i}.

    x: (..., T, d_k) at positions start .. start + T - 1 -> (..., T, d_k). No parameters and
    no table: the angles are computed for the positions asked for (in float64, then rounded to
    x's dtype), so any position works, however far past the lengths seen in training.

    Context extension (`scaling`, with `factor` s = new length / trained length), each a change
    of the frequencies only, so a trained model takes it without new weights:

    - "pi", position interpolation (Chen et al. 2023, arXiv:2306.15595): theta_i / s, i.e.
      position m is read as m / s, so s times the trained length spans the trained angles;
    - "ntk", NTK-aware scaling (bloc97 2023, set out by Peng et al. 2023, section 3.1): the base
      becomes base * s^(d_k / (d_k - 2)): the fastest pair is unchanged, the slowest divided by s;
    - "yarn", YaRN (Peng et al. 2023, arXiv:2309.00071, sections 3.2 and 3.4): pair i turns
      r_i = trained_length * theta_i / (2 pi) times over the trained length; with
      gamma_i = clamp((r_i - ALPHA) / (BETA - ALPHA), 0, 1), theta_i becomes
      (1 - gamma_i) theta_i / s + gamma_i theta_i (slow pairs interpolated, fast pairs kept),
      and queries and keys are both multiplied by 0.1 ln(s) + 1, so that the logits are
      divided by the temperature t with sqrt(1 / t) = 0.1 ln(s) + 1.
    """

    def __init__(self, d_k: int, base: float = 10000.0, scaling: str | None = None, factor: float = 1.0,
                 trained_length: int | None = None):
        super().__init__()
        check_positive_int("d_k", d_k)
        if d_k % 2:
            raise ValueError(f"d_k must be even: RoPE turns pairs of channels, got {d_k}")
        if not isinstance(base, (int, float)) or isinstance(base, bool) or not base > 1:
            raise ValueError(f"base must be a number > 1, got {base!r}")
        check_rope_scaling(scaling, factor, trained_length)
        self.d_k, self.base = d_k, float(base)
        self.scaling, self.factor, self.trained_length = scaling, float(factor), trained_length

    def frequencies(self, dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
        """theta_i, i = 0 .. d_k/2 - 1, after the context-extension `scaling`: (d_k / 2,)."""
        s = self.factor
        if self.scaling == "ntk":
            return frequencies(self.d_k, self.base * s ** (self.d_k / (self.d_k - 2)), dtype, device)
        theta = frequencies(self.d_k, self.base, dtype, device)
        if self.scaling == "pi":
            return theta / s
        if self.scaling == "yarn":
            turns = self.trained_length * theta / (2 * math.pi)  # r_i
            gamma = ((turns - YARN_ALPHA) / (YARN_BETA - YARN_ALPHA)).clamp(0, 1)
            return (1 - gamma) * theta / s + gamma * theta
        return theta

    @property
    def magnitude(self) -> float:
        """What queries and keys are multiplied by: 0.1 ln(s) + 1 for YaRN, else 1."""
        return 0.1 * math.log(self.factor) + 1 if self.scaling == "yarn" else 1.0

    def angles(self, start: int, length: int, device=None) -> torch.Tensor:
        """m theta_i for positions m = start .. start + length - 1: (length, d_k / 2), float64
        (float32 on Apple's MPS, which has no float64)."""
        dtype = torch.float32 if torch.device(device or "cpu").type == "mps" else torch.float64
        theta = self.frequencies(dtype, device)  # (d_k / 2,)
        return torch.arange(start, start + length, dtype=dtype, device=device)[:, None] * theta

    def _check(self, x: torch.Tensor, start: int = 0) -> None:
        check_tensor("x", x, floating=True)
        check_last_dim("x", x, self.d_k, "d_k")
        check_non_negative_int("start", start)

    @entry_point(_check)
    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        angle = self.angles(start, x.shape[-2], x.device)
        cos, sin = angle.cos(), angle.sin()  # (T, d_k / 2)
        if self.scaling == "yarn":
            cos, sin = cos * self.magnitude, sin * self.magnitude
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d_k / 2): the two channels of each pair
        turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., T, d_k / 2, 2)
        return turned.flatten(-2)

    def extra_repr(self) -> str:
        extra = f", scaling={self.scaling!r}, factor={self.factor:g}" if self.scaling else ""
        extra += f", trained_length={self.trained_length}" if self.trained_length else ""
        return f"d_k={self.d_k}, base={self.base:g}" + extra


def rotation_for_offset(k: int, d_model: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The (d_model, d_model) block-diagonal rotation T(k) with PE[pos + k] = T(k) @ PE[pos].

    Each sine/cosine pair (2i, 2i+1) turns by the angle k * w_i, w_i = 1 / 10000^(2i/d_model),
    whatever pos is: the relative-position property behind the sinusoidal choice.
    """
    check_positive_int("d_model", d_model)
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    w = frequencies(d_model)  # (d_model / 2,)
    c, s = torch.cos(k * w), torch.sin(k * w)
    t = torch.zeros(d_model, d_model, dtype=torch.float64, device="cpu")
    # (sin(a + b), cos(a + b)) = [[cos b, sin b], [-sin b, cos b]] @ (sin a, cos a)
    t[0::2, 0::2] = torch.diag(c)
    t[0::2, 1::2] = torch.diag(s)
    t[1::2, 0::2] = torch.diag(-s)
    t[1::2, 1::2] = torch.diag(c)
    return t.to(device=book_device(), dtype=dtype or torch.get_default_dtype())


__all__ = ["frequencies", "ROPE_SCALINGS", "check_rope_scaling",
           "sinusoidal_encoding", "PositionalEncoding", "LearnedPositionalEncoding", "RotaryEmbedding",
           "rotation_for_offset"]
