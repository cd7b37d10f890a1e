"""Chapter 14's character model (`book.char_lm`): its texts, its windows, its measured training,
and the run the book ships (`checkpoints/char_lm.pt`), which the chapter replays and then loads."""
import copy
import dataclasses

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib import lm
from transformer_lib.book import char_lm
from transformer_lib.vocab import Vocab

paragraph = st.text(alphabet="abc .", min_size=1, max_size=12).map(lambda s: s + "\n")


@settings(max_examples=60, deadline=None)
@given(st.lists(paragraph, min_size=12, max_size=60))
def test_split_cuts_at_a_line_break_and_holds_out_every_tenth_paragraph(paragraphs):
    text = "".join(paragraphs)
    train_text, texts, other = char_lm.split(text)
    head = text[: len(text) - len(texts["later chapters"])]
    assert head.endswith("\n") and head + texts["later chapters"] == text
    assert len(head) <= 0.9 * len(text) + 1
    numbered = head.splitlines(keepends=True)
    assert train_text == "".join(p for i, p in enumerate(numbered) if i % 10 != 9)
    assert texts["same chapters"] == "".join(numbered[9::10])  # held out of the training text
    assert texts["training sample"] == "".join(numbered[4::10])
    assert other == "".join(numbered[2::10])
    assert list(texts) == ["training sample", "same chapters", "later chapters"]


def test_split_of_the_corpus_gives_the_chapters_sizes():
    train_text, texts, other = char_lm.split(lm.load_corpus())
    sizes = {name: len(part) for name, part in texts.items()}
    assert len(train_text) == 192_872  # chapter 14 prints these
    assert sizes == {"training sample": 18_825, "same chapters": 22_516, "later chapters": 24_492}


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet="abcd", min_size=10, max_size=300), st.integers(2, 9), st.integers(1, 5))
def test_every_window_is_each_consecutive_window_and_its_next_characters(text, length, per_batch):
    assume(len(text) > length + 1)  # at least one window
    vocab = Vocab.from_texts(["abcd"])
    batches = char_lm.every_window(vocab, text, length, per_batch)
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    data = torch.tensor(vocab.encode(text))
    starts = list(range(0, len(data) - length - 1, length))
    assert x.shape == y.shape == (len(starts), length)
    assert all(len(b[0]) <= per_batch for b in batches)
    for row, s in enumerate(starts):
        assert torch.equal(x[row], data[s:s + length]) and torch.equal(y[row], data[s + 1:s + length + 1])


def _tiny():
    vocab = Vocab.from_texts(["the cat sat on the mat. "])
    torch.manual_seed(0)
    model = lm.CausalLM(lm.CausalLMConfig(vocab_size=len(vocab), d_model=16, n_heads=2, d_ff=32,
                                          n_layers=1, max_len=64))
    ids = torch.tensor(vocab.encode("the cat sat on the mat. " * 40))
    windows = {name: char_lm.every_window(vocab, "the mat sat on the cat. " * 4, 16)
               for name in ("training sample", "later chapters")}
    return model, ids, windows


def test_train_measured_is_tl_train_with_a_measuring_hook():
    model, ids, windows = _tiny()
    ours, untrained = copy.deepcopy(model), copy.deepcopy(model)
    history, curves = char_lm.train_measured(model, ids, windows, seed=3, steps=200)
    assert history.eval_step == [100, 200]
    assert {name: len(c) for name, c in curves.items()} == {"training sample": 3, "later chapters": 3}
    assert curves["later chapters"][1:] == history.eval_loss
    # the same steps by hand: the recipe, the same windows, tl.train
    cfg = tl.TrainConfig(**char_lm.RECIPE, progress=False)
    torch.manual_seed(3)
    loader = lm.random_windows(ids, char_lm.BATCH_SIZE, char_lm.LENGTH, 200, seed=3)
    tl.train(ours, loader, None, dataclasses.replace(cfg, max_steps=200), loss_fn=lm.lm_loss)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), ours.parameters()))
    assert curves["training sample"][-1] == lm.lm_evaluate(model, windows["training sample"])[1]
    for name, batches in windows.items():  # step 0: the untrained model
        assert curves[name][0] == lm.lm_evaluate(untrained, batches)[1]


def test_train_measured_split_and_every_window_refuse_bad_settings():
    model, ids, windows = _tiny()
    for steps, message in [(0, "steps"), (-3, "steps"), (1001, "at most the recipe's 1000")]:
        with pytest.raises(ValueError, match=message):
            char_lm.train_measured(model, ids, windows, seed=0, steps=steps)
    with pytest.raises(ValueError, match="held_out must name one of the texts"):
        char_lm.train_measured(model, ids, {"training sample": windows["training sample"]}, seed=0, steps=1)
    with pytest.raises(ValueError, match="line break"):
        char_lm.split("no paragraphs at all")
    vocab = Vocab.from_texts(["abc"])
    with pytest.raises(ValueError, match="too few for a window of length 8"):
        char_lm.every_window(vocab, "abcabcab", 8)
    with pytest.raises(ValueError, match="per_batch"):
        char_lm.every_window(vocab, "abc" * 10, 4, per_batch=0)


def test_the_shipped_run_records_what_chapter_14_shows():
    model, vocab, _, record = tl.checkpoints.load(tl.CHECKPOINTS / "char_lm.pt")
    assert record["config"] == char_lm.CONFIG and record["train"] == char_lm.RECIPE
    assert record["seed"] == 0 and record["threads"] == 1
    steps = list(range(0, char_lm.RECIPE["max_steps"] + 1, char_lm.RECIPE["eval_every"]))
    assert list(record["curves"]) == ["training sample", "same chapters", "later chapters"]
    assert all(len(curve) == len(steps) for curve in record["curves"].values())
    assert len(record["loss"]) == char_lm.RECIPE["max_steps"]
    later = record["curves"]["later chapters"]
    assert [round(v, 4) for v in later[1:]] == record["later_chapters_loss"]
    # the record's last measurement is these weights' (up to the kernels' rounding)
    _, texts, _ = char_lm.split(lm.load_corpus())
    measured = lm.lm_evaluate(model, char_lm.every_window(vocab, texts["later chapters"]))[1]
    assert measured == pytest.approx(later[-1], abs=1e-4)
