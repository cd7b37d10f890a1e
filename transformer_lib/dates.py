"""Dates as people write them, from real locale data: the inputs of the book's date task.

A calendar date is rendered with the CLDR date patterns and month and day names that Babel
ships (CLDR data, Unicode licence; no download)::

    "mardi 3 mars 1998"  (French, CLDR "full" format)
    "3. März 1998"       (German, CLDR "long" format)
    "March 3rd, 1998"    (English, long format with an ordinal day)
    "3/3/98"             (English, CLDR "short" format)

:func:`render_date` writes one date, :func:`date_field_spans` also says which characters are
the year, month, day and weekday, :func:`add_context` puts a date inside a sentence. The data
splits built from these are in :mod:`transformer_lib.data`. Babel is imported lazily.
"""
from __future__ import annotations

import datetime as _dt
import random
import re
from typing import Sequence

__all__ = ["DEFAULT_LOCALES", "DATE_FORMATS", "CONTEXT_TEMPLATES", "date_patterns", "render_date",
           "date_field_spans", "context_sentences", "add_context",
           # the pieces `data` builds its splits and readers from
           "check_locales", "check_formats", "language_of", "normalise_spaces", "pattern_table", "render_pattern"]

DEFAULT_LOCALES = ("en", "fr", "de", "es")
#: CLDR standard formats ("full" ... "short") and "availableFormats" skeletons, plus
#: "ordinal": the long format with an ordinal day ("March 3rd, 1998"), for locales whose
#: ordinal suffixes are known here (English).
DATE_FORMATS = ("full", "long", "medium", "short", "yMMMd", "yMMMEd", "yMd", "yMEd", "ordinal")

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
# CLDR uses no-break and narrow no-break spaces in some patterns; people type plain spaces.
_PLAIN_SPACES = str.maketrans({"\u00a0": " ", "\u202f": " "})


def language_of(locale: str) -> str:
    """The language of a locale name: "en_GB" -> "en"."""
    return locale.split("_")[0]


def check_locales(locales) -> tuple[str, ...]:
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


def check_formats(formats) -> tuple[str, ...]:
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
    (locale,) = check_locales((locale,))
    formats = check_formats(formats)
    return dict(pattern_table(locale, formats))


_PATTERN_CACHE: dict = {}


def pattern_table(locale: str, formats: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The (format name, CLDR pattern) pairs of `locale` for checked `formats`, as
    `date_patterns` describes them, computed once per (locale, formats)."""
    key = (locale, formats)
    if key not in _PATTERN_CACHE:
        loc = _locale(locale)
        out: dict[str, str] = {}
        for name in formats:
            if name in ("full", "long", "medium", "short"):
                pat = loc.date_formats[name].pattern
            elif name == "ordinal":
                if language_of(locale) not in _ORDINAL_SUFFIXES:
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


def normalise_spaces(text: str) -> str:
    """CLDR's no-break spaces as plain ones, runs of white space as one space, no ends."""
    return _WS.sub(" ", text.translate(_PLAIN_SPACES)).strip()


def render_date(day: _dt.date, locale: str, fmt: str) -> str:
    """``day`` written in ``locale`` with the CLDR format ``fmt`` (a name in ``DATE_FORMATS``).

    >>> render_date(datetime.date(1998, 3, 3), "fr", "full")
    'mardi 3 mars 1998'
    """
    if not isinstance(day, _dt.date):
        raise TypeError(f"day: expected a datetime.date, got {type(day).__name__}")
    (locale,) = check_locales((locale,))
    check_formats((fmt,))
    return render_pattern(day, locale, fmt, _pattern(locale, fmt))


def _pattern(locale: str, fmt: str) -> str:
    pat = dict(pattern_table(locale, (fmt,))).get(fmt)
    if pat is None:
        raise ValueError(f"fmt: locale {locale!r} has no format {fmt!r}")
    return pat


_LOCALE_CACHE: dict = {}


def _locale(locale: str):
    if locale not in _LOCALE_CACHE:
        from babel import Locale
        _LOCALE_CACHE[locale] = Locale.parse(locale)
    return _LOCALE_CACHE[locale]


def render_pattern(day: _dt.date, locale: str, fmt: str, pattern: str) -> str:
    """`day` written with `pattern`, the CLDR pattern of format `fmt` in `locale` (unchecked:
    `render_date` checks its arguments and looks the pattern up)."""
    from babel.dates import format_date
    loc = _locale(locale)
    if fmt == "ordinal":
        from babel.dates import tokenize_pattern, untokenize_pattern
        ordinal = _ordinal_day(day, locale)
        tokens = [("chars", ordinal) if tok == ("field", ("d", 1)) else tok for tok in tokenize_pattern(pattern)]
        pattern = untokenize_pattern(tokens)
    return normalise_spaces(format_date(day, pattern, locale=loc))


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
        piece = piece.translate(_PLAIN_SPACES)
        if field is not None:
            spans.setdefault(field, []).append((pos, pos + len(piece)))
        pieces.append(piece)
        pos += len(piece)
    if "".join(pieces) != text:  # pragma: no cover - a pattern whose spacing the normaliser changes
        raise ValueError(f"fmt: cannot locate the fields of {fmt!r} in {locale!r} ({text!r})")
    return text, spans


def _ordinal_day(day: _dt.date, locale: str) -> str:
    suffixes = _ORDINAL_SUFFIXES[language_of(locale)]
    return f"{day.day}{suffixes[_locale(locale).ordinal_form(day.day)]}"



def context_sentences(locale: str) -> tuple[str, ...]:
    """The sentences (with "{}" where the date goes) that :func:`add_context` uses for ``locale``."""
    templates = CONTEXT_TEMPLATES.get(language_of(locale))
    if templates is None:
        raise ValueError(f"locale: no context sentences for {locale!r}; known: {sorted(CONTEXT_TEMPLATES)}")
    return templates


def add_context(text: str, locale: str, rng: random.Random) -> str:
    """Put ``text`` inside a sentence of ``locale``'s language (chosen with ``rng``), to make
    the input longer without changing its answer."""
    return rng.choice(context_sentences(locale)).format(text)
