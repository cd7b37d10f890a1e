"""Tests for transformer_lib.data: the date task split by calendar date, and the toy tasks."""
import datetime as dt
import hashlib
import re

import pytest
from babel.dates import get_day_names, get_month_names

from transformer_lib import data as D
from transformer_lib import vocab as V
from transformer_lib.dates import date_patterns, render_date

# sha256 of make_date_splits() (seed 0, every default) as "split\tsource\ttarget\n" lines,
# recorded before data.py was split into dates.py and data.py (issue 15): the book's data must
# not change when its code moves.
SPLITS_SHA256 = "f40bf8455623b44b9c65cc7f513dbf02107e6d1764f0905039d725199674befa"
# date_vocabs() source characters after the four specials, recorded at the same time.
SOURCE_CHARS = " ',./0123456789:ABDEFGJLMNOPSTWabcdefghijklmnopqrstuvwyzáäèéñóúû"


@pytest.fixture(scope="module")
def splits():
    return D.make_date_splits(seed=0, return_meta=True)


@pytest.fixture(scope="module")
def plain():
    return D.make_date_splits()


def test_the_book_data_is_unchanged(plain):
    h = hashlib.sha256()
    for name, part in zip(D.DateSplits._fields, plain):
        for src, tgt in part:
            h.update(f"{name}\t{src}\t{tgt}\n".encode())
    assert h.hexdigest() == SPLITS_SHA256
    src_vocab, tgt_vocab = D.date_vocabs()
    assert src_vocab.tokens == list(V.SPECIALS) + list(SOURCE_CHARS)
    assert tgt_vocab.tokens == list(V.SPECIALS) + list("-0123456789")


def test_vocabulary_names_moved_to_vocab():
    assert "Vocab" not in D.__all__ and "Vocab" not in vars(D)
    with pytest.raises(ImportError):
        from transformer_lib.data import collate  # noqa: F401


def test_vocab_round_trip_on_dates(splits):
    src_vocab, tgt_vocab = D.date_vocabs()
    for src, tgt, *_ in splits.train[:2000] + splits.test:
        assert src_vocab.decode(src_vocab.encode(src, strict=True)) == src
        assert tgt_vocab.decode(tgt_vocab.encode(tgt, bos=True, eos=True, strict=True)) == tgt


def test_split_sizes_and_determinism(splits, plain):
    assert [len(s) for s in splits] == [29221, 3652, 3652]
    again = D.make_date_splits(seed=0, return_meta=True)
    assert again == splits
    assert D.split_calendar(seed=1)[2] != D.split_calendar(seed=0)[2]
    assert plain == tuple([p[:2] for p in part] for part in splits)
    assert D.make_date_splits(n_train=100).train == plain.train[:100]


def test_no_calendar_date_in_two_splits(splits):
    dates = [{p[1] for p in part} for part in splits]
    assert not dates[0] & dates[1] and not dates[0] & dates[2] and not dates[1] & dates[2]
    assert len(dates[0] | dates[1] | dates[2]) == 36525  # every date of 1950-2049 is used
    train, valid, test = D.split_calendar(seed=5)
    assert not set(train) & set(valid) and not set(valid) & set(test) and not set(train) & set(test)


def test_several_languages_and_formats(splits):
    locales = {p[2] for p in splits.train}
    assert locales == {"en", "fr", "de", "es"}
    for loc in locales:
        assert len({p[3] for p in splits.train if p[2] == loc}) >= 6


def test_every_source_names_one_date(splits):
    seen = {}
    for src, tgt, *_ in splits.train + splits.valid + splits.test:
        assert seen.setdefault(src, tgt) == tgt, f"{src!r} maps to {seen[src]} and {tgt}"


def _words(text):
    return set(re.findall(r"\w+", text.lower()))


@pytest.mark.parametrize("part", ["train", "valid", "test"])
def test_every_target_is_an_iso_date_that_matches_its_input(splits, part):
    # An independent reading of each input: the year, the day and the month (by number or by a
    # CLDR month name of its locale) must all be there, and a weekday name must be the right one.
    for src, tgt, loc, fmt in getattr(splits, part)[:3000]:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", tgt)
        day = dt.date.fromisoformat(tgt)
        assert 1950 <= day.year <= 2049
        numbers = [int(n) for n in re.findall(r"\d+", src)]
        assert day.year in numbers or day.year % 100 in numbers, (src, tgt)
        assert day.day in numbers, (src, tgt)
        words = _words(src)
        names = set()
        for width in ("wide", "abbreviated"):
            for ctx in ("format", "stand-alone"):
                names |= _words(get_month_names(width, ctx, loc)[day.month])
        assert day.month in numbers or names & words, (src, tgt)


@pytest.mark.parametrize("part", ["train", "valid", "test"])
def test_a_weekday_in_the_input_is_the_right_one(splits, part):
    with_weekday = [p for p in getattr(splits, part)[:3000] if "E" in date_patterns(p[2])[p[3]]]
    assert len(with_weekday) > 300  # full, yMMMEd and yMEd formats
    for src, tgt, loc, fmt in with_weekday:
        day = dt.date.fromisoformat(tgt)
        names = set()
        for width in ("wide", "abbreviated"):
            names |= _words(get_day_names(width, "format", loc)[day.weekday()])
        assert names & _words(src), (src, tgt)


def test_render_matches_the_stored_format(splits):
    for src, tgt, loc, fmt in splits.valid[:500]:
        assert render_date(dt.date.fromisoformat(tgt), loc, fmt) == src


def test_context_makes_inputs_longer_and_keeps_the_answer():
    days = D.split_calendar(seed=0)[2][:1500]
    plain = D.make_date_pairs(days, seed=3)
    wrapped = D.make_date_pairs(days, seed=3, context=1.0)
    assert [t for _, t in plain] == [t for _, t in wrapped]
    assert sum(len(s) for s, _ in wrapped) > 2 * sum(len(s) for s, _ in plain)
    src_vocab, _ = D.date_vocabs(context=True)
    assert all(src_vocab.encode(s, strict=True) for s, _ in wrapped[:500])


def test_date_vocabs_cover_every_split(splits):
    src_vocab, _ = D.date_vocabs()
    chars = set("".join(p[0] for part in splits for p in part))
    assert chars <= set(src_vocab.tokens)
    # the context sentences bring characters no date format writes ("q" of "Please", "ñ" of "pequeño")
    assert {"q", "ñ"} <= set(src_vocab.tokens) - set(D.date_vocabs(context=False)[0].tokens)


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="locales"):
        D.make_date_splits(locales=("en", "xx_NOPE"))
    with pytest.raises(ValueError, match="formats"):
        D.make_date_splits(formats=("long", "verbose"))
    with pytest.raises(ValueError, match="years"):
        D.make_date_splits(years=(1900, 2049))
    with pytest.raises(ValueError, match="fractions"):
        D.split_calendar(fractions=(0.5, 0.1, 0.1))
    with pytest.raises(ValueError, match="context"):
        D.make_date_pairs([dt.date(2000, 1, 1)], context=2)
    with pytest.raises(ValueError, match="days"):
        D.make_date_pairs([dt.date(1900, 1, 1)])
    with pytest.raises(TypeError, match="seed"):
        D.make_date_splits(seed="0")
    with pytest.raises(ValueError, match="n_train"):
        D.make_date_splits(n_train=0)


# ----------------------------------------------------------------------------- toy tasks

def test_copy_and_reverse_tasks():
    copy = D.make_copy_pairs(100, 3, 7, seed=4)
    assert copy == D.make_copy_pairs(100, 3, 7, seed=4)
    assert copy != D.make_copy_pairs(100, 3, 7, seed=5)
    assert all(s == t and 3 <= len(s) <= 7 and set(s) <= set("abcdefghijklmnop") for s, t in copy)
    rev = D.make_reverse_pairs(100, 3, 7, seed=4)
    assert [s for s, _ in rev] == [s for s, _ in copy]
    assert all(t == s[::-1] for s, t in rev)
    with pytest.raises(ValueError, match="min_len"):
        D.make_copy_pairs(10, 5, 3)
    with pytest.raises(ValueError, match="alphabet"):
        D.make_copy_pairs(10, alphabet="a")
