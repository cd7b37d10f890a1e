"""Data for the book: date normalisation from real locale data, and small synthetic tasks.

The task the book trains on is turning a date as people write it into an ISO date::

    "mardi 3 mars 1998"  -> "1998-03-03"      (French, CLDR "full" format)
    "3. März 1998"       -> "1998-03-03"      (German, CLDR "long" format)
    "March 3rd, 1998"    -> "1998-03-03"      (English, long format with an ordinal day)
    "3/3/98"             -> "1998-03-03"      (English, CLDR "short" format)

The inputs are rendered with the CLDR date patterns and month and day names that Babel ships
(CLDR data, Unicode licence; no download). Calendar dates, not strings, are split between
train, validation and test, so no date seen in training is ever evaluated.

Everything here works on plain Python strings; :func:`collate` turns a list of
``(source, target)`` pairs into padded ``LongTensor`` batches. Babel is imported lazily, so
the vocabulary, the synthetic tasks and :func:`collate` work without it.
"""
from __future__ import annotations

import datetime as _dt
import random
import re
from typing import Iterable, Iterator, NamedTuple, Sequence

import torch

from ._checks import check_positive_int
from .vocab import (BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID, SPECIALS, UNK, UNK_ID, Vocab, batches, collate,
                    make_loader)

__all__ = [
    "PAD", "BOS", "EOS", "UNK", "SPECIALS", "PAD_ID", "BOS_ID", "EOS_ID", "UNK_ID",
    "Vocab", "collate", "batches", "make_loader",
    "DEFAULT_LOCALES", "DATE_FORMATS", "ISO_ALPHABET",
    "date_patterns", "render_date", "date_field_spans", "all_dates", "split_calendar", "make_date_pairs",
    "DateSplits", "make_date_splits", "date_vocabs", "add_context", "CONTEXT_TEMPLATES",
    "make_copy_pairs", "make_reverse_pairs",
]

# --------------------------------------------------------------------------------------
# Dates from CLDR locale data
# --------------------------------------------------------------------------------------

DEFAULT_LOCALES = ("en", "fr", "de", "es")
#: CLDR standard formats ("full" ... "short") and "availableFormats" skeletons, plus
#: "ordinal": the long format with an ordinal day ("March 3rd, 1998"), for locales whose
#: ordinal suffixes are known here (English).
DATE_FORMATS = ("full", "long", "medium", "short", "yMMMd", "yMMMEd", "yMd", "yMEd", "ordinal")
ISO_ALPHABET = "-0123456789"
YEARS = (1950, 2049)

# English ordinal suffixes by CLDR ordinal plural category (Babel's Locale.ordinal_form gives
# the category: 1 -> "one", 2 -> "two", 3 -> "few", 11 and 4 -> "other").
_ORDINAL_SUFFIXES = {"en": {"one": "st", "two": "nd", "few": "rd", "other": "th"}}

# Sentences around a date, to make inputs longer (see add_context). Written for this book;
# they contain no digits so that the only numbers in an input belong to the date.
CONTEXT_TEMPLATES = {
    "en": ("The meeting was moved to {}.", "Please reply before {} at the latest.",
           "She was born on {} in a small village by the sea.", "Delivered: {}",
           "According to the minutes, the committee first met on {} and agreed on nothing."),
    "fr": ("La réunion est reportée au {}.", "Merci de répondre avant le {}.",
           "Elle est née le {} dans un petit village au bord de la mer.", "Livré le {}",
           "Selon le compte rendu, le comité s'est réuni pour la première fois le {}."),
    "de": ("Die Sitzung wurde auf {} verschoben.", "Bitte antworten Sie bis {}.",
           "Sie wurde am {} in einem kleinen Dorf am Meer geboren.", "Geliefert am {}",
           "Laut Protokoll traf sich der Ausschuss zum ersten Mal am {} und beschloss nichts."),
    "es": ("La reunión se aplazó al {}.", "Por favor, responda antes del {}.",
           "Nació el {} en un pequeño pueblo junto al mar.", "Entregado el {}",
           "Según el acta, el comité se reunió por primera vez el {} y no acordó nada."),
}

_WS = re.compile(r"\s+")


def _check_locales(locales) -> tuple[str, ...]:
    if isinstance(locales, str):
        locales = (locales,)
    try:
        locales = tuple(locales)
    except TypeError:
        raise TypeError(f"locales: expected a sequence of locale names, got {type(locales).__name__}") from None
    if not locales:
        raise ValueError("locales: expected at least one locale")
    from babel import Locale, UnknownLocaleError
    for loc in locales:
        if not isinstance(loc, str):
            raise TypeError(f"locales: expected locale names as strings, got {loc!r}")
        try:
            Locale.parse(loc)
        except (UnknownLocaleError, ValueError) as exc:
            raise ValueError(f"locales: unknown locale {loc!r} (Babel/CLDR has no data for it: {exc})") from None
    return locales


def _check_formats(formats) -> tuple[str, ...]:
    if formats is None:
        return DATE_FORMATS
    if isinstance(formats, str):
        formats = (formats,)
    formats = tuple(formats)
    bad = [f for f in formats if f not in DATE_FORMATS]
    if bad or not formats:
        raise ValueError(f"formats: unknown format names {bad!r}; expected some of {DATE_FORMATS!r}")
    return formats


def date_patterns(locale: str, formats: Sequence[str] | None = None) -> dict[str, str]:
    """The CLDR date patterns of ``locale`` by format name, e.g. ``{"long": "d MMMM y", ...}``.

    Formats a locale does not have (a skeleton missing from its data, or "ordinal" where no
    ordinal suffixes are known) are left out; formats with the same pattern are kept once
    (under the first name in ``DATE_FORMATS`` order).
    """
    (locale,) = _check_locales((locale,))
    formats = _check_formats(formats)
    return dict(_patterns_cached(locale, formats))


_PATTERN_CACHE: dict = {}


def _patterns_cached(locale: str, formats: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    key = (locale, formats)
    if key not in _PATTERN_CACHE:
        loc = _locale(locale)
        out: dict[str, str] = {}
        for name in formats:
            if name in ("full", "long", "medium", "short"):
                pat = loc.date_formats[name].pattern
            elif name == "ordinal":
                if locale.split("_")[0] not in _ORDINAL_SUFFIXES:
                    continue
                pat = loc.date_formats["long"].pattern  # the day field is replaced at render time
            elif name in loc.datetime_skeletons:
                pat = loc.datetime_skeletons[name].pattern
            else:
                continue
            if name == "ordinal" or pat not in out.values():
                out[name] = pat
        _PATTERN_CACHE[key] = tuple(out.items())
    return _PATTERN_CACHE[key]


def _normalise_spaces(text: str) -> str:
    # CLDR uses no-break and narrow no-break spaces in some patterns; people type plain spaces.
    return _WS.sub(" ", text.replace("\u00a0", " ").replace("\u202f", " ")).strip()


def render_date(day: _dt.date, locale: str, fmt: str) -> str:
    """``day`` written in ``locale`` with the CLDR format ``fmt`` (a name in ``DATE_FORMATS``).

    >>> render_date(datetime.date(1998, 3, 3), "fr", "full")
    'mardi 3 mars 1998'
    """
    if not isinstance(day, _dt.date):
        raise TypeError(f"day: expected a datetime.date, got {type(day).__name__}")
    (locale,) = _check_locales((locale,))
    _check_formats((fmt,))
    return _render(day, locale, fmt, _pattern(locale, fmt))


def _pattern(locale: str, fmt: str) -> str:
    pat = dict(_patterns_cached(locale, (fmt,))).get(fmt)
    if pat is None:
        raise ValueError(f"fmt: locale {locale!r} has no format {fmt!r}")
    return pat


_LOCALE_CACHE: dict = {}


def _locale(locale: str):
    if locale not in _LOCALE_CACHE:
        from babel import Locale
        _LOCALE_CACHE[locale] = Locale.parse(locale)
    return _LOCALE_CACHE[locale]


def _render(day: _dt.date, locale: str, fmt: str, pattern: str) -> str:
    from babel.dates import format_date
    loc = _locale(locale)
    if fmt == "ordinal":
        from babel.dates import tokenize_pattern, untokenize_pattern
        ordinal = _ordinal_day(day, locale)
        tokens = [("chars", ordinal) if tok == ("field", ("d", 1)) else tok for tok in tokenize_pattern(pattern)]
        pattern = untokenize_pattern(tokens)
    return _normalise_spaces(format_date(day, pattern, locale=loc))


_FIELD_OF_LETTER = {"y": "year", "Y": "year", "u": "year", "M": "month", "L": "month", "d": "day",
                    "E": "weekday", "c": "weekday", "e": "weekday"}


def date_field_spans(day: _dt.date, locale: str, fmt: str) -> tuple[str, dict[str, list[tuple[int, int]]]]:
    """``render_date(day, locale, fmt)`` and where its fields are: ``(text, spans)`` with
    ``spans`` mapping "year", "month", "day", "weekday" (those present) to ``[(start, end), ...]``
    character ranges of ``text``. Used to ask which input characters a model reads.

    >>> date_field_spans(datetime.date(1998, 3, 3), "de", "long")
    ('3. März 1998', {'day': [(0, 1)], 'month': [(3, 7)], 'year': [(8, 12)]})
    """
    text = render_date(day, locale, fmt)
    from babel.dates import format_date, tokenize_pattern
    pattern = _pattern(locale, fmt)
    loc = _locale(locale)
    pieces, spans, pos = [], {}, 0
    for kind, value in tokenize_pattern(pattern):
        if kind == "chars":
            piece, field = value, None
        elif fmt == "ordinal" and value == ("d", 1):
            piece, field = _ordinal_day(day, locale), "day"
        else:
            piece = format_date(day, value[0] * value[1], locale=loc)
            field = _FIELD_OF_LETTER.get(value[0])
        piece = piece.replace("\u00a0", " ").replace("\u202f", " ")
        if field is not None:
            spans.setdefault(field, []).append((pos, pos + len(piece)))
        pieces.append(piece)
        pos += len(piece)
    if "".join(pieces) != text:  # pragma: no cover - a pattern whose spacing the normaliser changes
        raise ValueError(f"fmt: cannot locate the fields of {fmt!r} in {locale!r} ({text!r})")
    return text, spans


def _ordinal_day(day: _dt.date, locale: str) -> str:
    suffixes = _ORDINAL_SUFFIXES[locale.split("_")[0]]
    return f"{day.day}{suffixes[_locale(locale).ordinal_form(day.day)]}"


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
        for _, pat in _patterns_cached(loc, formats):
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
                readers.append(re.compile("^" + _normalise_spaces("".join(parts)) + "$"))
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


def add_context(text: str, locale: str, rng: random.Random) -> str:
    """Put ``text`` inside a sentence of ``locale``'s language (chosen with ``rng``), to make
    the input longer without changing its answer."""
    lang = locale.split("_")[0]
    if lang not in CONTEXT_TEMPLATES:
        raise ValueError(f"locale: no context sentences for {locale!r}; known: {sorted(CONTEXT_TEMPLATES)}")
    return rng.choice(CONTEXT_TEMPLATES[lang]).format(text)


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
    locales = _check_locales(locales)
    formats = _check_formats(formats)
    _check_years(years)
    if not isinstance(context, (int, float)) or not 0.0 <= context <= 1.0:
        raise ValueError(f"context: expected a probability in [0, 1], got {context!r}")
    if context > 0:
        for loc in locales:
            if loc.split("_")[0] not in CONTEXT_TEMPLATES:
                raise ValueError(f"locales: no context sentences for {loc!r}; with context > 0 use "
                                 f"locales among {sorted(CONTEXT_TEMPLATES)}")
    check_positive_int("per_date", per_date)
    for d in days:
        if not isinstance(d, _dt.date):
            raise TypeError(f"days: expected datetime.date items, got {type(d).__name__}")
        if not years[0] <= d.year <= years[1]:
            raise ValueError(f"days: {d.isoformat()} is outside years {years!r}")
    rng = random.Random(seed)
    table = {loc: _patterns_cached(loc, formats) for loc in locales}
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
                source = _render(day, loc, name, pat)
                ambiguous = bool(readers) and bool(_readings(source, readers, years) - {day})
                if not ambiguous or not options:
                    break
            if ambiguous:
                # every format of this locale was ambiguous for this date: use another locale
                for loc2 in locales:
                    for name2, pat2 in table[loc2]:
                        s2 = _render(day, loc2, name2, pat2)
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
                context: bool = True) -> tuple[Vocab, Vocab]:
    """Source and target vocabularies for the date task.

    The source vocabulary holds every character that any format of ``locales`` can produce
    (found by rendering every day of a leap year in every format) and, with ``context``, the
    characters of the context sentences; it does not depend on a data split. The target
    vocabulary is ``ISO_ALPHABET`` ("-" and the digits).
    """
    locales = _check_locales(locales)
    formats = _check_formats(formats)
    chars: set[str] = set("0123456789")
    year = [_dt.date(2000, 1, 1) + _dt.timedelta(days=i) for i in range(366)]
    for loc in locales:
        for name, pat in _patterns_cached(loc, formats):
            for d in year:
                chars.update(_render(d, loc, name, pat))
        if context and loc.split("_")[0] in CONTEXT_TEMPLATES:
            for t in CONTEXT_TEMPLATES[loc.split("_")[0]]:
                chars.update(t.replace("{}", ""))
    return Vocab(sorted(chars)), Vocab(ISO_ALPHABET)


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
