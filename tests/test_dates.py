"""Tests for transformer_lib.dates: dates rendered from CLDR patterns, their field spans, context."""
import datetime as dt
import random
import re

import pytest
from babel.dates import get_month_names

from transformer_lib import dates


def test_examples_from_the_issue():
    d = dt.date(1998, 3, 3)
    assert dates.render_date(d, "fr", "full") == "mardi 3 mars 1998"
    assert dates.render_date(d, "de", "long") == "3. März 1998"
    assert dates.render_date(d, "en", "ordinal") == "March 3rd, 1998"
    assert dates.render_date(d, "en", "short") == "3/3/98"
    assert dates.render_date(dt.date(2001, 11, 11), "en", "ordinal") == "November 11th, 2001"
    assert dates.render_date(dt.date(2001, 5, 22), "en", "ordinal") == "May 22nd, 2001"


def test_two_digit_years_are_written_with_two_digits():
    assert dates.render_date(dt.date(2049, 12, 31), "de", "short") == "31.12.49"
    assert dates.render_date(dt.date(1950, 1, 13), "de", "short") == "13.01.50"


def test_date_patterns_keep_each_pattern_once():
    en = dates.date_patterns("en")
    assert set(en) <= set(dates.DATE_FORMATS) and "ordinal" in en
    plain = {k: v for k, v in en.items() if k != "ordinal"}
    assert len(set(plain.values())) == len(plain)
    assert "ordinal" not in dates.date_patterns("fr")  # no French ordinal suffixes are known
    assert dates.date_patterns("de", ["long"]) == {"long": "d. MMMM y"}


def test_no_break_spaces_become_plain_spaces():
    for loc in dates.DEFAULT_LOCALES:
        for fmt in dates.date_patterns(loc):
            text = dates.render_date(dt.date(1999, 12, 31), loc, fmt)
            assert "\u00a0" not in text and "\u202f" not in text and "  " not in text, (loc, fmt, text)


def test_add_context_keeps_the_date_and_uses_the_locale_language():
    rng = random.Random(0)
    for loc in ("en", "fr_FR", "de", "es"):
        sentence = dates.add_context("3/3/98", loc, rng)
        assert "3/3/98" in sentence and len(sentence) > len("3/3/98")
        assert sentence in {t.format("3/3/98") for t in dates.context_sentences(loc)}
    with pytest.raises(ValueError, match="locale"):
        dates.add_context("3/3/98", "ja", rng)


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="fmt"):
        dates.render_date(dt.date(2000, 1, 1), "fr", "ordinal")
    with pytest.raises(ValueError, match="formats"):
        dates.render_date(dt.date(2000, 1, 1), "fr", "verbose")
    with pytest.raises(ValueError, match="locales"):
        dates.render_date(dt.date(2000, 1, 1), "xx_NOPE", "long")
    with pytest.raises(TypeError, match="day"):
        dates.render_date("2000-01-01", "fr", "long")


def test_date_field_spans_point_at_the_right_characters():
    text, spans = dates.date_field_spans(dt.date(1998, 3, 3), "de", "long")
    assert text == "3. März 1998"
    assert spans == {"day": [(0, 1)], "month": [(3, 7)], "year": [(8, 12)]}
    assert dates.date_field_spans(dt.date(1998, 3, 3), "en", "ordinal")[1]["day"] == [(6, 9)]
    rng = random.Random(1)
    for _ in range(300):
        day = dt.date(1950, 1, 1) + dt.timedelta(days=rng.randrange(36525))
        loc = rng.choice(dates.DEFAULT_LOCALES)
        fmt = rng.choice(list(dates.date_patterns(loc)))
        text, spans = dates.date_field_spans(day, loc, fmt)
        assert text == dates.render_date(day, loc, fmt)
        (y0, y1), = spans["year"]
        assert int(text[y0:y1]) in (day.year, day.year % 100)
        (d0, d1), = spans["day"]
        assert int(re.match(r"\d+", text[d0:d1]).group()) == day.day
        (m0, m1), = spans["month"]
        month = text[m0:m1]
        names = {get_month_names(w, "format", loc)[day.month].lower().strip(".") for w in ("wide", "abbreviated")}
        assert (month.isdigit() and int(month) == day.month) or month.lower().strip(".") in names, (loc, fmt, text)
