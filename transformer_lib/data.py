"""The book's data: the date-normalisation task, split by calendar date, and small synthetic tasks.

The task the book trains on is turning a date as people write it into an ISO date::

    "mardi 3 mars 1998"  -> "1998-03-03"
    "3/3/98"             -> "1998-03-03"

The inputs are written by :mod:`transformer_lib.dates` (CLDR patterns via Babel). Calendar
dates, not strings, are split between train, validation and test, so no date seen in training
is ever evaluated: ``train, valid, test = make_date_splits(seed=0)`` and
``src_vocab, tgt_vocab = date_vocabs()``. The copy and reverse tasks are random strings.

Everything here returns plain Python strings; :mod:`transformer_lib.vocab` turns them into
padded ``LongTensor`` batches (:class:`~transformer_lib.vocab.Vocab`, ``collate``, ``make_loader``).
"""
from __future__ import annotations

import datetime as _dt
import random
import re
from typing import NamedTuple, Sequence

from . import vocab as _vocab
from ._checks import check_positive_int
from .dates import (CONTEXT_TEMPLATES, DEFAULT_LOCALES, check_formats, check_locales, language_of,
                    normalise_spaces, pattern_table, render_pattern, add_context, context_sentences)

__all__ = [
    "ISO_ALPHABET", "YEARS", "all_dates", "split_calendar", "make_date_pairs",
    "DateSplits", "make_date_splits", "date_vocabs", "make_copy_pairs", "make_reverse_pairs",
]

ISO_ALPHABET = "-0123456789"
YEARS = (1950, 2049)


def all_dates(years: tuple[int, int] = YEARS) -> list[_dt.date]:
    """Every calendar date from 1 January of ``years[0]`` to 31 December of ``years[1]``."""
    _check_years(years)
    start, end = _dt.date(years[0], 1, 1), _dt.date(years[1], 12, 31)
    return [start + _dt.timedelta(days=i) for i in range((end - start).days + 1)]


def _check_years(years) -> None:
    if not (isinstance(years, (tuple, list)) and len(years) == 2 and all(isinstance(y, int) for y in years)):
        raise ValueError(f"years: expected (first, last) as two ints, got {years!r}")
    if not 1 <= years[0] <= years[1] <= 9999:
        raise ValueError(f"years: expected 1 <= first <= last <= 9999, got {years!r}")
    if years[1] - years[0] >= 100:
        raise ValueError(f"years: at most 100 years, so that a two-digit year names one year; got {years!r}")


def _check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}")


def split_calendar(seed: int = 0, years: tuple[int, int] = YEARS,
                   fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
                   ) -> tuple[list[_dt.date], list[_dt.date], list[_dt.date]]:
    """Shuffle the calendar dates of ``years`` with ``seed`` and cut them into train /
    validation / test by ``fractions``; each list is sorted. No date is in two lists."""
    _check_seed(seed)
    if not (isinstance(fractions, (tuple, list)) and len(fractions) == 3
            and all(isinstance(f, (int, float)) and f >= 0 for f in fractions)
            and abs(sum(fractions) - 1.0) < 1e-9):
        raise ValueError(f"fractions: expected three non-negative numbers summing to 1, got {fractions!r}")
    days = all_dates(years)
    random.Random(seed).shuffle(days)
    n_valid, n_test = int(len(days) * fractions[1]), int(len(days) * fractions[2])
    n_train = len(days) - n_valid - n_test
    train, valid, test = days[:n_train], days[n_train:n_train + n_valid], days[n_train + n_valid:]
    return sorted(train), sorted(valid), sorted(test)


_NUMERIC_FIELD = {"d": r"(?P<d>\d{1,2})", "dd": r"(?P<d>\d{2})", "M": r"(?P<M>\d{1,2})",
                  "MM": r"(?P<M>\d{2})", "y": r"(?P<y>\d{4})", "yy": r"(?P<yy>\d{2})"}


def _numeric_readers(locales: tuple[str, ...], formats: tuple[str, ...]) -> list[re.Pattern]:
    """Regular expressions that read back every all-numeric pattern of ``locales``."""
    from babel.dates import tokenize_pattern
    readers = []
    for loc in locales:
        for _, pat in pattern_table(loc, formats):
            parts, numeric = [], True
            for kind, value in tokenize_pattern(pat):
                if kind == "chars":
                    parts.append(re.escape(value))
                else:
                    field = value[0] * value[1]
                    if field not in _NUMERIC_FIELD:
                        numeric = False
                        break
                    parts.append(_NUMERIC_FIELD[field])
            if numeric:
                readers.append(re.compile("^" + normalise_spaces("".join(parts)) + "$"))
    return readers


def _readings(text: str, readers: list[re.Pattern], years: tuple[int, int]) -> set[_dt.date]:
    """Every date that some all-numeric pattern reads ``text`` as (within ``years``)."""
    out = set()
    for r in readers:
        m = r.match(text)
        if not m:
            continue
        g = m.groupdict()
        if g.get("y"):
            year = int(g["y"])
        else:  # a two-digit year: the one year in the range that ends in these digits
            year = next((y for y in range(years[0], years[1] + 1) if y % 100 == int(g["yy"])), None)
        try:
            day = _dt.date(year, int(g["M"]), int(g["d"]))
        except (TypeError, ValueError):
            continue
        if years[0] <= day.year <= years[1]:
            out.add(day)
    return out



def make_date_pairs(days: Sequence[_dt.date], seed: int = 0,
                    locales: Sequence[str] = DEFAULT_LOCALES, formats: Sequence[str] | None = None,
                    context: float = 0.0, per_date: int = 1, years: tuple[int, int] = YEARS,
                    return_meta: bool = False) -> list:
    """``(source, target)`` pairs for the calendar dates ``days``.

    For each date, ``per_date`` times: pick a locale and one of its formats at random (with
    ``seed``), render the date, and with probability ``context`` put it inside a sentence.
    An all-numeric rendering that another of the chosen locales would read as a different date
    ("3/4/98" is 4 March in English and 3 April in Spanish) is redrawn with another format, so
    every source names exactly one date. With ``return_meta=True`` the items are
    ``(source, target, locale, format)``.
    """
    _check_seed(seed)
    locales = check_locales(locales)
    formats = check_formats(formats)
    _check_years(years)
    if not isinstance(context, (int, float)) or not 0.0 <= context <= 1.0:
        raise ValueError(f"context: expected a probability in [0, 1], got {context!r}")
    if context > 0:
        for loc in locales:
            if language_of(loc) not in CONTEXT_TEMPLATES:
                raise ValueError(f"locales: no context sentences for {loc!r}; with context > 0 use "
                                 f"locales among {sorted(CONTEXT_TEMPLATES)}")
    check_positive_int("per_date", per_date)
    for d in days:
        if not isinstance(d, _dt.date):
            raise TypeError(f"days: expected datetime.date items, got {type(d).__name__}")
        if not years[0] <= d.year <= years[1]:
            raise ValueError(f"days: {d.isoformat()} is outside years {years!r}")
    rng = random.Random(seed)
    table = {loc: pattern_table(loc, formats) for loc in locales}
    if not any(table.values()):
        raise ValueError(f"formats: none of {formats!r} exists in locales {locales!r}")
    readers = _numeric_readers(locales, formats)
    out = []
    for day in days:
        target = day.isoformat()
        for _ in range(per_date):
            loc = rng.choice([loc for loc in locales if table[loc]])
            options = list(table[loc])
            while True:
                name, pat = options.pop(rng.randrange(len(options)))
                source = render_pattern(day, loc, name, pat)
                ambiguous = bool(readers) and bool(_readings(source, readers, years) - {day})
                if not ambiguous or not options:
                    break
            if ambiguous:
                # every format of this locale was ambiguous for this date: use another locale
                for loc2 in locales:
                    for name2, pat2 in table[loc2]:
                        s2 = render_pattern(day, loc2, name2, pat2)
                        if not _readings(s2, readers, years) - {day}:
                            loc, name, source = loc2, name2, s2
                            break
                    else:
                        continue
                    break
                else:  # pragma: no cover - needs a choice of formats with only numeric patterns
                    raise ValueError(f"formats: {formats!r} cannot write {target} unambiguously in {locales!r}")
            if context and rng.random() < context:
                source = add_context(source, loc, rng)
            out.append((source, target, loc, name) if return_meta else (source, target))
    return out


class DateSplits(NamedTuple):
    """Train, validation and test lists of ``(source, target)`` pairs."""
    train: list
    valid: list
    test: list


def make_date_splits(seed: int = 0, locales: Sequence[str] = DEFAULT_LOCALES,
                     formats: Sequence[str] | None = None, context: float = 0.0,
                     years: tuple[int, int] = YEARS,
                     fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
                     train_per_date: int = 1, n_train: int | None = None,
                     return_meta: bool = False) -> DateSplits:
    """The book's date-normalisation data: ``train, valid, test = make_date_splits(seed=0)``.

    The calendar dates of ``years`` (1950-2049: 36,525 dates) are split by ``fractions``
    (29,221 / 3,652 / 3,652 by default), so that no calendar date appears in two splits; then
    each date is written once (``train_per_date`` times in training) in a random locale and
    format. ``n_train`` keeps only the first ``n_train`` training pairs (after shuffling).
    Everything depends only on ``seed`` and the arguments.
    """
    train_days, valid_days, test_days = split_calendar(seed, years, fractions)
    kw = dict(locales=locales, formats=formats, context=context, years=years, return_meta=return_meta)
    train = make_date_pairs(train_days, seed=seed * 3 + 1, per_date=train_per_date, **kw)
    valid = make_date_pairs(valid_days, seed=seed * 3 + 2, **kw)
    test = make_date_pairs(test_days, seed=seed * 3 + 3, **kw)
    random.Random(seed).shuffle(train)
    if n_train is not None:
        check_positive_int("n_train", n_train)
        train = train[:n_train]
    return DateSplits(train, valid, test)


def date_vocabs(locales: Sequence[str] = DEFAULT_LOCALES, formats: Sequence[str] | None = None,
                context: bool = True) -> tuple[_vocab.Vocab, _vocab.Vocab]:
    """Source and target vocabularies for the date task.

    The source vocabulary holds every character that any format of ``locales`` can produce
    (found by rendering every day of a leap year in every format) and, with ``context``, the
    characters of the context sentences; it does not depend on a data split. The target
    vocabulary is ``ISO_ALPHABET`` ("-" and the digits).
    """
    locales = check_locales(locales)
    formats = check_formats(formats)
    chars: set[str] = set("0123456789")
    year = [_dt.date(2000, 1, 1) + _dt.timedelta(days=i) for i in range(366)]
    for loc in locales:
        for name, pat in pattern_table(loc, formats):
            for d in year:
                chars.update(render_pattern(d, loc, name, pat))
        if context and language_of(loc) in CONTEXT_TEMPLATES:
            for t in context_sentences(loc):
                chars.update(t.replace("{}", ""))
    return _vocab.Vocab(sorted(chars)), _vocab.Vocab(ISO_ALPHABET)


# --------------------------------------------------------------------------------------
# Small synthetic tasks
# --------------------------------------------------------------------------------------

def _random_strings(n: int, min_len: int, max_len: int, alphabet: str, seed: int) -> list[str]:
    _check_seed(seed)
    check_positive_int("n", n)
    if not (isinstance(min_len, int) and isinstance(max_len, int) and 1 <= min_len <= max_len):
        raise ValueError(f"min_len, max_len: expected 1 <= min_len <= max_len, got {min_len!r}, {max_len!r}")
    if not isinstance(alphabet, str) or len(alphabet) < 2 or len(set(alphabet)) != len(alphabet):
        raise ValueError(f"alphabet: expected a string of at least 2 distinct characters, got {alphabet!r}")
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(min_len, max_len))) for _ in range(n)]


def make_copy_pairs(n: int, min_len: int = 4, max_len: int = 32, alphabet: str = "abcdefghijklmnop",
                    seed: int = 0) -> list[tuple[str, str]]:
    """``n`` pairs ``(s, s)`` of random strings over ``alphabet`` with lengths in [min_len, max_len]."""
    return [(s, s) for s in _random_strings(n, min_len, max_len, alphabet, seed)]


def make_reverse_pairs(n: int, min_len: int = 4, max_len: int = 32, alphabet: str = "abcdefghijklmnop",
                       seed: int = 0) -> list[tuple[str, str]]:
    """``n`` pairs ``(s, reversed s)`` of random strings, as :func:`make_copy_pairs`."""
    return [(s, s[::-1]) for s in _random_strings(n, min_len, max_len, alphabet, seed)]
