"""The attention explorer computing in the reader's browser (issue 32), on the built site in
headless Chromium, with every request to another host blocked and recorded.

Chapter 12 (the date Transformer) and chapter 14 (the character language model):

- before a run the page requests nothing of onnxruntime-web or the models (the page weight
  before a run is test_page_weight.py's); the text box and a button that says what it
  downloads are there, with the line that says where the model comes from;
- bad input (nothing, too long, characters outside the vocabulary) gets a message on the page
  and downloads nothing; the box works again afterwards;
- 12 dates typed into chapter 12's explorer: each answer equals PyTorch's greedy decoding of
  the shipped checkpoint (`decoding.translate`); every kind, layer and head is offered, and the
  maps drawn for three of the dates equal PyTorch's attention weights (to the 3 decimals the
  explorer keeps, plus rounding);
- 6 prompts typed into chapter 14's explorer: each continuation equals `lm.generate` (greedy)
  on the shipped character model, and one prompt's maps equal PyTorch's;
- on a 390 px wide screen the box, the button and the answer stay on the screen and work;
- no console error, no failed request, no request to another host.

Screenshots: artifacts/screenshots/live-*.png. Needs the built site (`make book`).
"""
from __future__ import annotations

import re

import pytest
import torch

import transformer_lib as tl
from transformer_lib import lm
from transformer_lib.book import explorer_browser as eb
from transformer_lib.decoding import attention_of, translate
from transformer_lib.vocab import collate

import test_site as site_pages  # the shared page opener: console errors, failed and foreign requests

CH12, CH14 = "chapters/12_inference.html", "chapters/14_decoder_only.html"
DATES = ["14 juillet 1989", "3/4/98", "domingo, 12 de septiembre de 2032", "March 3, 1998", "3 mars 1998",
         "12. Oktober 2001", "Friday, June 7, 2024", "1 janvier 1950", "31/12/2049", "3 marzo 1998",
         "March 3, 2075", "le 5 mai 1975"]
PROMPTS = ["The attention ", "A Transformer ", "Each head ", "The mask ", "Beam search ", "Why"]
# what the network may carry for a live run: the runtime and the models, nothing else heavy
LIVE_FILES = re.compile(r"(onnxruntime/|_static/models/)")
RUN_MS = 120_000
MAP_TOLERANCE = 1.5e-3  # the explorer keeps 3 decimals: half a unit of the last one, and float32


@pytest.fixture(scope="module")
def date_model():
    return tl.checkpoints.load(tl.CHECKPOINTS / "transformer_dates.pt")


@pytest.fixture(scope="module")
def char_model():
    return tl.checkpoints.load(tl.CHECKPOINTS / "char_lm.pt")


def explorer(page):
    root = page.locator(".tlx").first
    root.wait_for()
    return root


def run(page, root, text: str) -> dict:
    """Type `text` into the explorer's box, run it, wait for the run to finish; what it shows."""
    form = root.locator("form.tlx-input")
    before = int(form.get_attribute("data-runs") or 0)
    form.locator("input").fill(text)
    form.locator("button").click()
    page.wait_for_function("([form, n]) => Number(form.dataset.runs || 0) > n",
                           arg=[form.element_handle(), before], timeout=RUN_MS)
    return root.evaluate("""root => ({
      status: root.querySelector(".tlx-status").textContent,
      error: root.querySelector(".tlx-status").classList.contains("tlx-error"),
      answer: root.querySelector(".tlx-answer").hidden ? null : root.querySelector(".tlx-answer").dataset.answer,
      title: root.querySelector(".tlx-title").textContent,
      kinds: [...root.querySelectorAll(".tlx-kind option")].map(o => o.value),
      layers: root.querySelectorAll(".tlx-layer option").length,
      heads: [...root.querySelectorAll(".tlx-head option")].map(o => o.textContent),
      thumbs: root.querySelectorAll("button.tlx-thumb").length,
    })""")


def drawn(root, kind: str, layer: int, head: int) -> list[list[float]]:
    """Choose a map with the menus and read its cells' weights back."""
    if root.locator(".tlx-kind").is_enabled():  # one kind only: the menu is disabled
        root.locator(".tlx-kind").select_option(kind)
    assert root.evaluate("root => root.dataset.kind") == kind
    root.locator(".tlx-layer").select_option(str(layer))
    root.locator(".tlx-head").select_option(str(head))
    return root.evaluate("""root => [...root.querySelectorAll("table.tlx-heat tbody tr")].map(tr =>
      [...tr.querySelectorAll("td")].map(td => Number(td.dataset.weight)))""")


def assert_map(name, ours, theirs):
    theirs = theirs.tolist()
    assert len(ours) == len(theirs) and all(len(a) == len(b) for a, b in zip(ours, theirs)), \
        f"{name}: the drawn map is {len(ours)} x {len(ours[0])}, PyTorch's {len(theirs)} x {len(theirs[0])}"
    worst = max(abs(a - b) for ra, rb in zip(ours, theirs) for a, b in zip(ra, rb))
    assert worst <= MAP_TOLERANCE, f"{name}: the browser's weights differ from PyTorch's by {worst:.4f}"


def clean(log, what: str):
    assert not log["errors"], f"{what}: errors {log['errors']}"
    assert not log["failed"], f"{what}: failed requests {log['failed']}"
    assert not log["foreign"], f"{what}: requests to other hosts {log['foreign']}"


def test_dates_in_the_browser(browser, site_url, screenshots, date_model):
    model, src_vocab, tgt_vocab, _ = date_model
    expected = translate(model, DATES, src_vocab, tgt_vocab, max_len=12)
    context, page, log = site_pages.open_page(browser, site_url, CH12)
    try:
        root = explorer(page)
        button = root.locator("form.tlx-input button")
        assert re.search(r"Run in your browser \(downloads \d+\.\d MB\)", button.text_content())
        note = root.locator(".tlx-live-note").text_content()
        assert "chapter 11 trained" in note and "ONNX" in note and "test dates" in note, note
        assert not [u for u in log["requests"] if LIVE_FILES.search(u)], "the page fetched a model before any run"

        # bad input first: a message, and nothing downloaded
        tokens = eb.manifest("transformer_dates")["src_tokens"]
        assert "ç" not in tokens and "-" not in tokens
        for text, message in [("", "Type a date first"), ("   ", "Type a date first"),
                              ("1" * 41, "at most 40"), ("3 março 1998", "“ç”"), ("1998-03-03", "“-”")]:
            shown = run(page, root, text)
            assert shown["error"] and message in shown["status"], (text, shown["status"])
            assert shown["answer"] is None
        assert not [u for u in log["requests"] if LIVE_FILES.search(u)], "bad input downloaded the model"

        for i, (text, answer) in enumerate(zip(DATES, expected)):
            shown = run(page, root, text)
            assert not shown["error"], (text, shown["status"])
            assert shown["answer"] == answer, f"{text!r}: the browser wrote {shown['answer']!r}, PyTorch {answer!r}"
            assert text in shown["title"]
            assert shown["kinds"] == ["encoder", "decoder", "cross"] and shown["layers"] == 2
            assert shown["heads"] == ["mean of 4 heads", "head 0", "head 1", "head 2", "head 3"]
            assert shown["thumbs"] == 2 * 5
            if i < 3:  # the maps themselves, against PyTorch's
                src, _ = collate([(text, "")], src_vocab, tgt_vocab)
                tgt = torch.tensor([[1] + tgt_vocab.encode(answer)])
                weights = attention_of(model, src, tgt)
                for kind in ("encoder", "decoder", "cross"):
                    for layer in (0, 1):
                        w = weights[kind][layer][0]  # (heads, q, k)
                        assert_map(f"{text!r} {kind} layer {layer} head 2", drawn(root, kind, layer, 2), w[2])
                        assert_map(f"{text!r} {kind} layer {layer} mean", drawn(root, kind, layer, -1), w.mean(0))
                if i == 0:
                    root.locator(".tlx-kind").select_option("cross")
                    root.screenshot(path=str(screenshots / "live-ch12-explorer.png"))
        assert [u for u in log["requests"] if u.endswith(".wasm")], "no WebAssembly runtime was loaded"
        # after the runs, bad input still gets its message, and a good one still runs
        assert run(page, root, "")["error"]
        assert run(page, root, DATES[0])["answer"] == expected[0]
        clean(log, CH12)
    finally:
        context.close()


def test_character_model_in_the_browser(browser, site_url, screenshots, char_model):
    model, vocab, _, _ = char_model
    m = eb.manifest("char_lm")
    context, page, log = site_pages.open_page(browser, site_url, CH14)
    try:
        root = explorer(page)
        note = root.locator(".tlx-live-note").text_content()
        assert "recipe" in note and "this chapter loads" in note, note
        for text, message in [("", "Type the start of a sentence first"), ("x" * (m["max_chars"] + 1), "at most"),
                              ("The 注意 ", "“注”")]:
            shown = run(page, root, text)
            assert shown["error"] and message in shown["status"], (text, shown["status"])
        assert not [u for u in log["requests"] if LIVE_FILES.search(u)], "bad input downloaded the model"
        for i, prompt in enumerate(PROMPTS):
            ids = torch.tensor([vocab.encode(prompt)])
            full = lm.generate(model, ids, m["continue"])
            expected = vocab.decode(full[0, ids.shape[1]:])
            shown = run(page, root, prompt)
            assert not shown["error"], (prompt, shown["status"])
            assert shown["answer"] == expected, (
                f"{prompt!r}: the browser wrote {shown['answer']!r}, PyTorch {expected!r}")
            assert shown["kinds"] == ["decoder"] and shown["layers"] == 2 and shown["thumbs"] == 2 * 5
            if i == 0:
                with torch.no_grad(), tl.record_attention(model) as weights:
                    model(full)
                for layer in (0, 1):
                    w = weights[f"layers.{layer}.self_attn"][0]
                    assert_map(f"{prompt!r} layer {layer} head 0", drawn(root, "decoder", layer, 0), w[0])
                    assert_map(f"{prompt!r} layer {layer} mean", drawn(root, "decoder", layer, -1), w.mean(0))
                root.screenshot(path=str(screenshots / "live-ch14-explorer.png"))
        clean(log, CH14)
    finally:
        context.close()


def test_narrow_screen(browser, site_url, screenshots, date_model):
    model, src_vocab, tgt_vocab, _ = date_model
    context, page, log = site_pages.open_page(browser, site_url, CH12)
    try:
        page.set_viewport_size({"width": 390, "height": 844})
        root = explorer(page)
        root.scroll_into_view_if_needed()
        form = root.locator("form.tlx-input")
        box = form.locator("button").bounding_box()
        assert box["x"] + box["width"] <= 390 + 1, f"the button leaves the screen before a run: {box}"
        form.screenshot(path=str(screenshots / "live-ch12-390px-before.png"))
        shown = run(page, root, "3 mars 1998")
        assert shown["answer"] == translate(model, ["3 mars 1998"], src_vocab, tgt_vocab, max_len=12)[0]
        for part in ("form.tlx-input input", "form.tlx-input button", ".tlx-answer", ".tlx-live-note"):
            box = root.locator(part).bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1, f"{part} leaves the screen: {box}"
        root.locator("form.tlx-input").screenshot(path=str(screenshots / "live-ch12-390px-form.png"))
        page.screenshot(path=str(screenshots / "live-ch12-390px.png"))
        clean(log, "390 px")
    finally:
        context.close()
