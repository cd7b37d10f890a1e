"""Tests for transformer_lib.data: vocabularies, batching, the date task and the toy tasks."""
import datetime as dt
import re

import pytest
import torch

pytest.importorskip("babel")

from babel.dates import get_day_names, get_month_names  # noqa: E402

from transformer_lib import data as D  # noqa: E402


@pytest.fixture(scope="module")
def splits():
    return D.make_date_splits(seed=0, return_meta=True)


# ----------------------------------------------------------------------------- Vocab

def test_vocab_specials_and_round_trip():
    v = D.Vocab("abc")
    assert v.tokens[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3) == (D.PAD_ID, D.BOS_ID, D.EOS_ID, D.UNK_ID)
    ids = v.encode("cab", bos=True, eos=True)
    assert ids == [1, 6, 4, 5, 2]
    assert v.decode(ids + [0, 0]) == "cab"
    assert v.decode(torch.tensor(ids)) == "cab"
    assert v.decode([4, 2, 5]) == "a"  # stops at <eos>
    assert v.decode([4, 2, 5], stop_at_eos=False) == "ab"


def test_vocab_round_trip_on_dates(splits):
    src_vocab, tgt_vocab = D.date_vocabs()
    for src, tgt, *_ in splits.train[:2000] + splits.test:
        assert src_vocab.decode(src_vocab.encode(src, strict=True)) == src
        assert tgt_vocab.decode(tgt_vocab.encode(tgt, bos=True, eos=True, strict=True)) == tgt


def test_vocab_unknown_characters():
    v = D.Vocab("ab")
    assert v.encode("abz") == [4, 5, 3]
    assert v.decode(v.encode("abz")) == "ab?"
    with pytest.raises(ValueError, match="text"):
        v.encode("abz", strict=True)
    with pytest.raises(ValueError, match="chars"):
        D.Vocab("aba")
    with pytest.raises(ValueError, match="ids"):
        v.decode([99])
    with pytest.raises(TypeError, match="text"):
        v.encode(5)


def test_vocab_from_texts_is_order_independent_and_rebuildable():
    a = D.Vocab.from_texts(["hello", "world"])
    b = D.Vocab.from_texts(["world", "hello"])
    assert a == b
    assert D.Vocab.from_tokens(a.tokens) == a
    with pytest.raises(ValueError, match="tokens"):
        D.Vocab.from_tokens(["a", "b"])


# ----------------------------------------------------------------------------- collate

def test_collate_pads_with_zero_and_wraps_targets():
    v = D.Vocab("abc")
    src, tgt = D.collate([("abc", "a"), ("a", "cba")], v, v)
    assert src.dtype == tgt.dtype == torch.long
    assert src.tolist() == [[4, 5, 6], [4, 0, 0]]
    assert tgt.tolist() == [[1, 4, 2, 0, 0], [1, 6, 5, 4, 2]]
    with pytest.raises(ValueError, match="pairs"):
        D.collate([], v, v)
    with pytest.raises(ValueError, match="pairs"):
        D.collate([("", "a")], v, v)


def test_batches_and_loader_cover_every_pair_once():
    v = D.Vocab("abcdefghijklmnop")
    pairs = D.make_copy_pairs(50, 2, 6, seed=3)
    seen = []
    for src, tgt in D.batches(pairs, 16, v, v, seed=1):
        assert src.size(0) == tgt.size(0) <= 16
        seen += [v.decode(row) for row in src]
    assert sorted(seen) == sorted(s for s, _ in pairs)
    loader = D.make_loader(pairs, v, v, batch_size=16, seed=1)
    first = [b[0].tolist() for b in loader]
    again = [b[0].tolist() for b in D.make_loader(pairs, v, v, batch_size=16, seed=1)]
    assert first == again
    with pytest.raises(ValueError, match="batch_size"):
        next(D.batches(pairs, 0, v, v))


# ----------------------------------------------------------------------------- dates

def test_examples_from_the_issue():
    d = dt.date(1998, 3, 3)
    assert D.render_date(d, "fr", "full") == "mardi 3 mars 1998"
    assert D.render_date(d, "de", "long") == "3. März 1998"
    assert D.render_date(d, "en", "ordinal") == "March 3rd, 1998"
    assert D.render_date(d, "en", "short") == "3/3/98"
    assert D.render_date(dt.date(2001, 11, 11), "en", "ordinal") == "November 11th, 2001"
    assert D.render_date(dt.date(2001, 5, 22), "en", "ordinal") == "May 22nd, 2001"


def test_split_sizes_and_determinism(splits):
    assert [len(s) for s in splits] == [29221, 3652, 3652]
    again = D.make_date_splits(seed=0, return_meta=True)
    assert again == splits
    assert D.split_calendar(seed=1)[2] != D.split_calendar(seed=0)[2]
    plain = D.make_date_splits(seed=0)
    assert plain.train[:100] == [p[:2] for p in splits.train[:100]]
    assert all(len(p) == 2 for p in plain.valid)


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
        weekday_names = {w: set() for w in range(7)}
        for width in ("wide", "abbreviated"):
            for w, name in get_day_names(width, "format", loc).items():
                weekday_names[w] |= _words(name)
        if "E" in D.date_patterns(loc).get(fmt, "E"):
            assert weekday_names[day.weekday()] & words, (src, tgt)


def test_render_matches_the_stored_format(splits):
    for src, tgt, loc, fmt in splits.valid[:500]:
        assert D.render_date(dt.date.fromisoformat(tgt), loc, fmt) == src


def test_context_makes_inputs_longer_and_keeps_the_answer():
    days = D.split_calendar(seed=0)[2][:1500]
    plain = D.make_date_pairs(days, seed=3)
    wrapped = D.make_date_pairs(days, seed=3, context=1.0)
    assert [t for _, t in plain] == [t for _, t in wrapped]
    assert sum(len(s) for s, _ in wrapped) > 2 * sum(len(s) for s, _ in plain)
    src_vocab, _ = D.date_vocabs(context=True)
    assert all(src_vocab.encode(s, strict=True) for s, _ in wrapped[:500])


def test_date_vocabs_cover_every_split(splits):
    src_vocab, tgt_vocab = D.date_vocabs()
    assert tgt_vocab.tokens[4:] == list("-0123456789")
    chars = set("".join(p[0] for part in splits for p in part))
    assert chars <= set(src_vocab.tokens)


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
    with pytest.raises(ValueError, match="fmt"):
        D.render_date(dt.date(2000, 1, 1), "fr", "ordinal")


def test_two_digit_years_are_unambiguous_in_the_range():
    assert D.render_date(dt.date(2049, 12, 31), "de", "short") == "31.12.49"
    assert D.render_date(dt.date(1950, 1, 13), "de", "short") == "13.01.50"


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


def test_date_field_spans_point_at_the_right_characters(splits):
    text, spans = D.date_field_spans(dt.date(1998, 3, 3), "de", "long")
    assert text == "3. März 1998"
    assert spans == {"day": [(0, 1)], "month": [(3, 7)], "year": [(8, 12)]}
    assert D.date_field_spans(dt.date(1998, 3, 3), "en", "ordinal")[1]["day"] == [(6, 9)]
    for src, tgt, loc, fmt in splits.test[:1000]:
        day = dt.date.fromisoformat(tgt)
        text, spans = D.date_field_spans(day, loc, fmt)
        assert text == src
        (y0, y1), = spans["year"]
        assert int(text[y0:y1]) in (day.year, day.year % 100)
        (d0, d1), = spans["day"]
        assert int(re.match(r"\d+", text[d0:d1]).group()) == day.day
        (m0, m1), = spans["month"]
        month = text[m0:m1]
        assert (month.isdigit() and int(month) == day.month) or month.lower().strip(".") in {
            n.lower().strip(".") for w in ("wide", "abbreviated") for n in [get_month_names(w, "format", loc)[day.month]]}
