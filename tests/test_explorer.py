"""transformer_lib.book.explorer: the state the attention explorer writes, and its argument checks.

The browser side (drawing, clicking, hovering, the static site) is tests/browser/test_explorer.py.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from ipywidgets.widgets.widget import _instances as widget_instances

import transformer_lib as tl
from transformer_lib import book
from transformer_lib.book import explorer as ex
from transformer_lib.book.explorer import AttentionExplorer
from transformer_lib.book.explorer_state import MAX_HEADS, MAX_LAYERS, MAX_TOKENS, parse_rows

SRC_TOKENS = ["the", "cat", "sat", "down", "<eos>"]
TGT_TOKENS = ["<bos>", "le", "chat"]


@pytest.fixture
def model():
    torch.manual_seed(0)
    config = tl.TransformerConfig(src_vocab=20, tgt_vocab=20, d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.1)
    return tl.Transformer(config)


@pytest.fixture
def batch():
    src = torch.tensor([[4, 5, 6, 7, 2], [4, 5, 2, 0, 0]])
    tgt = torch.tensor([[1, 8, 9], [1, 8, 0]])
    return src, tgt


def recorded(model, src, tgt):
    model.eval()
    with torch.no_grad(), tl.record_attention(model) as weights:
        model(src, tgt)
    return weights


def kind(explorer, name):
    return next(k for k in explorer.data["kinds"] if k["id"] == name)


# ---- the state written for a known model run ---------------------------------------------------

def test_from_model_state(model, batch):
    src, tgt = batch
    explorer = AttentionExplorer.from_model(model, src, tgt, SRC_TOKENS, TGT_TOKENS)
    weights = recorded(model, src, tgt)
    data = explorer.data
    assert data["version"] == 1 and data["decimals"] == 3 and data["notes"] == []
    assert [k["id"] for k in data["kinds"]] == ["encoder", "decoder", "cross"]
    labels = ["Encoder self-attention", "Decoder self-attention", "Cross-attention"]
    assert [k["label"] for k in data["kinds"]] == labels
    tokens = {"encoder": (SRC_TOKENS, SRC_TOKENS), "decoder": (TGT_TOKENS, TGT_TOKENS),
              "cross": (TGT_TOKENS, SRC_TOKENS)}
    module = {"encoder": "encoder.layers.{}.self_attn", "decoder": "decoder.layers.{}.self_attn",
              "cross": "decoder.layers.{}.cross_attn"}
    for k in data["kinds"]:
        assert (k["queries"], k["keys"]) == tokens[k["id"]]
        assert (k["n_layers"], k["n_heads"], k["total_heads"]) == (2, 2, 2)
        assert len(k["weights"]) == 2 and all(len(layer) == 2 for layer in k["weights"]) and len(k["mean"]) == 2
        for layer in range(2):
            w = weights[module[k["id"]].format(layer)][0].double().numpy()  # (heads, q, k) of example 0
            for head in range(2):
                rows = k["weights"][layer][head]
                assert len(rows) == len(k["queries"]) and all(len(r.split()) == len(k["keys"]) for r in rows)
                np.testing.assert_array_equal(parse_rows(rows), np.round(w[head], 3))
            # the mean of the heads, computed before rounding
            np.testing.assert_array_equal(parse_rows(k["mean"][layer]), np.round(w.mean(axis=0), 3))
            np.testing.assert_allclose(np.sum(parse_rows(k["mean"][layer]), axis=1), 1, atol=2e-3)
    # decoder self-attention is causal: nothing above the diagonal
    for layer in kind(explorer, "decoder")["weights"]:
        for head in layer:
            assert np.all(np.triu(parse_rows(head), 1) == 0)
    assert (explorer.kind, explorer.layer, explorer.head) == ("encoder", 0, -1)
    np.testing.assert_array_equal(explorer.matrix(), parse_rows(data["kinds"][0]["mean"][0]))
    np.testing.assert_array_equal(explorer.matrix("cross", 1, 0), parse_rows(data["kinds"][2]["weights"][1][0]))


def test_from_model_leaves_the_model_as_it_was(model, batch):
    src, tgt = batch
    model.train()
    AttentionExplorer.from_model(model, src, tgt, SRC_TOKENS, TGT_TOKENS)
    assert model.training
    assert all(not m.record_weights and m.last_weights is None for m in tl.attention.attention_modules(model).values())
    # eval mode: dropout (0.1 here) does not touch the recorded weights, so two runs agree
    again = AttentionExplorer.from_model(model, src, tgt, SRC_TOKENS, TGT_TOKENS)
    assert again.data == AttentionExplorer.from_model(model, src, tgt, SRC_TOKENS, TGT_TOKENS).data


def test_from_model_drops_padding(model, batch):
    src, tgt = batch
    explorer = AttentionExplorer.from_model(model, src, tgt, ["the", "cat", "<eos>"], ["<bos>", "le"], index=1)
    weights = recorded(model, src, tgt)
    cross = kind(explorer, "cross")
    assert (cross["queries"], cross["keys"]) == (["<bos>", "le"], ["the", "cat", "<eos>"])
    w = weights["decoder.layers.0.cross_attn"][1, 1, :2, :3].double().numpy()
    np.testing.assert_array_equal(parse_rows(cross["weights"][0][1]), np.round(w, 3))
    # without tokens the ids stand in for them, padding left out
    plain = AttentionExplorer.from_model(model, src, tgt, index=1)
    assert kind(plain, "encoder")["queries"] == ["4", "5", "2"]
    # tokens for every position, padding included, are kept as they are
    full = AttentionExplorer.from_model(model, src, tgt, ["a", "b", "c", "p", "p"], ["x", "y", "p"], index=1)
    assert kind(full, "cross")["keys"] == ["a", "b", "c", "p", "p"]


def test_from_model_encoder_only_and_one_example(model):
    explorer = AttentionExplorer.from_model(model, torch.tensor([4, 5, 6]), src_tokens=["a", "b", "c"])
    assert [k["id"] for k in explorer.data["kinds"]] == ["encoder"]
    assert kind(explorer, "encoder")["queries"] == ["a", "b", "c"]


def test_from_recorded_lone_attention_module():
    torch.manual_seed(0)
    mha = tl.MultiHeadAttention(8, 2)
    x = torch.randn(1, 4, 8)
    with tl.record_attention(mha) as weights:
        mha(x, x, x)
    explorer = AttentionExplorer.from_recorded(weights, tokens=list("abcd"))
    # a module outside any encoder is the decoder's kind (attention_maps.attention_kind)
    assert [k["id"] for k in explorer.data["kinds"]] == ["decoder"]
    assert kind(explorer, "decoder")["queries"] == list("abcd")
    np.testing.assert_array_equal(explorer.matrix("decoder", 0, 1), np.round(weights[""][0, 1].double().numpy(), 3))


# ---- plain tensors ----------------------------------------------------------------------------

def test_plain_tensors_all_shapes_agree():
    torch.manual_seed(0)
    w = torch.randn(2, 3, 4, 4).softmax(-1)  # (layers, heads, q, k)
    tokens = ["I", "saw", "her", "duck"]
    as_list = AttentionExplorer({"encoder": list(w)}, tokens=tokens)
    as_4d = AttentionExplorer({"encoder": w}, tokens=tokens)
    as_numpy = AttentionExplorer({"encoder": [a.numpy() for a in w]}, src_tokens=tokens)
    assert as_list.data == as_4d.data == as_numpy.data
    one = AttentionExplorer(w[0, 0], tokens=tokens)  # one (q, k) tensor: self-attention, 1 layer, 1 head
    k = one.data["kinds"][0]
    assert (k["id"], k["n_layers"], k["n_heads"], k["total_heads"]) == ("self", 1, 1, 1)
    assert one.head == 0  # the mean of a single head is that head
    np.testing.assert_array_equal(one.matrix(), np.round(w[0, 0].double().numpy(), 3))
    numbered = AttentionExplorer({"cross": w[0]})
    assert kind(numbered, "cross")["queries"] == ["0", "1", "2", "3"]


def test_cross_attention_needs_both_sequences():
    w = torch.full((1, 2, 3), 1 / 3)  # 2 target tokens attend to 3 source tokens
    explorer = AttentionExplorer({"cross": [w]}, src_tokens=["a", "b", "c"], tgt_tokens=["x", "y"])
    assert (kind(explorer, "cross")["queries"], kind(explorer, "cross")["keys"]) == (["x", "y"], ["a", "b", "c"])
    assert explorer.matrix() == [[0.333] * 3] * 2


def test_rounding_and_number_format():
    w = torch.tensor([[0.0, 1.0], [0.12345, 0.87655]], dtype=torch.float64)
    explorer = AttentionExplorer(w, tokens=["a", "b"])
    assert explorer.data["kinds"][0]["weights"][0][0] == ["0 1", ".123 .877"]
    two = AttentionExplorer(w, tokens=["a", "b"], decimals=2)
    assert two.data["kinds"][0]["weights"][0][0] == ["0 1", ".12 .88"] and two.data["decimals"] == 2
    assert parse_rows([".123 .877", "0 1"]) == [[0.123, 0.877], [0.0, 1.0]]


def test_caps_keep_the_state_small():
    torch.manual_seed(0)
    w = torch.randn(8, 10, 50, 50).softmax(-1)  # 8 layers, 10 heads, 50 tokens
    explorer = AttentionExplorer({"encoder": w}, tokens=[f"t{i}" for i in range(50)])
    k = explorer.data["kinds"][0]
    assert len(k["queries"]) == len(k["keys"]) == MAX_TOKENS == 40
    assert (k["n_layers"], k["n_heads"], k["total_heads"]) == (MAX_LAYERS, MAX_HEADS, 10) == (6, 8, 10)
    assert len(k["weights"]) == 6 and len(k["weights"][0]) == 8 and len(k["weights"][0][0]) == 40
    # the mean is over all ten heads, then cropped
    expected = np.round(w[5].double().mean(0)[:40, :40].numpy(), 3)
    np.testing.assert_array_equal(explorer.matrix("encoder", 5, -1), expected)
    assert explorer.data["notes"] == [
        "Only the first 40 of 50 source tokens are shown.",
        "Encoder self-attention: only the first 6 of 8 layers are shown.",
        "Encoder self-attention: only the first 8 of 10 heads are shown one by one (the mean is over all 10).",
    ]
    small = AttentionExplorer({"encoder": w}, max_tokens=5, max_layers=1, max_heads=2)
    assert len(small.data["kinds"][0]["mean"][0]) == 5 and small.data["kinds"][0]["n_heads"] == 2


def test_state_size_of_a_typical_run(model):
    torch.manual_seed(0)
    src, tgt = torch.randint(3, 20, (1, 20)), torch.randint(3, 20, (1, 20))
    explorer = AttentionExplorer.from_model(model, src, tgt)
    assert len(json.dumps(explorer.data)) < 40_000  # 3 kinds x 2 layers x (2 heads + mean) x 20 x 20 numbers
    # the front end travels in every notebook's state: about 19 kB to draw, 8 kB to run a model in a browser
    assert len(explorer._esm) < 30_000 and len(explorer._css) < 8_000


def test_front_end_ships_with_the_package():
    assert "export default" in AttentionExplorer._esm and ".tlx" in AttentionExplorer._css
    assert (ex._STATIC / "explorer.js").is_file() and (ex._STATIC / "explorer.css").is_file()
    assert "http://" not in AttentionExplorer._esm.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in AttentionExplorer._esm + AttentionExplorer._css


def test_repr_is_a_text_summary():
    w = torch.full((2, 3, 3), 1 / 3)
    explorer = AttentionExplorer({"decoder": [w, w]}, tokens=["a", "b", "c"])
    assert repr(explorer) == "AttentionExplorer: decoder self-attention, 2 layers x 2 heads, 3 queries x 3 keys"
    assert explorer._repr_mimebundle_()[0]["text/plain"] == repr(explorer)


def test_exported_from_the_package():
    assert book.AttentionExplorer is AttentionExplorer and "AttentionExplorer" in book.__all__


# ---- live use ---------------------------------------------------------------------------------

def test_text_callback_updates_the_explorer():
    w = torch.full((1, 2, 2), 0.5)
    explorer = AttentionExplorer({"encoder": [w, w]}, tokens=["a", "b"], layer=1)
    sent = []
    explorer.send = sent.append

    def run(text):
        n = len(text.split())
        explorer.set_attention({"encoder": [torch.full((1, n, n), 1 / n)]}, tokens=text.split())

    explorer.on_text(run, placeholder="Type a sentence")
    assert explorer.text_input and explorer.text_placeholder == "Type a sentence"
    explorer._on_custom_msg(explorer, {"type": "hello"}, [])
    assert sent == [{"type": "live"}]
    explorer._on_custom_msg(explorer, {"type": "text", "text": "x y z w"}, [])
    assert sent[-1] == {"type": "done"}
    assert kind(explorer, "encoder")["queries"] == ["x", "y", "z", "w"] and explorer.layer == 0
    explorer._on_custom_msg(explorer, {"type": "text", "text": ""}, [])  # run() fails on no words
    assert sent[-1] == {"type": "error", "message": "ZeroDivisionError: division by zero"}
    assert kind(explorer, "encoder")["queries"] == ["x", "y", "z", "w"]  # unchanged
    explorer.set_attention(torch.full((1, 2, 2), 0.5), tokens=["p", "q"], title="new")
    assert explorer.data["title"] == "new" and [k["id"] for k in explorer.data["kinds"]] == ["self"]
    explorer.set_attention(torch.full((1, 1, 1), 1.0))
    assert explorer.data["title"] == "new"  # kept


def test_text_callback_may_return_a_new_explorer():
    explorer = AttentionExplorer(torch.full((1, 2, 2), 0.5), tokens=["a", "b"])
    sent = []
    explorer.send = sent.append
    made = []

    def run(text):
        words = text.split()
        made.append(AttentionExplorer(torch.full((1, len(words), len(words)), 1 / len(words)), tokens=words))
        return made[-1]

    explorer.on_text(run)
    n_widgets = len(widget_instances)
    explorer._on_custom_msg(explorer, {"type": "text", "text": "one two three"}, [])
    assert sent == [{"type": "done"}] and kind(explorer, "self")["queries"] == ["one", "two", "three"]
    assert made[0].comm is None and len(widget_instances) == n_widgets  # never shown: no comm opened
    assert AttentionExplorer(torch.full((1, 2, 2), 0.5)).comm is not None  # outside the callback as usual


def test_encode_fn_reruns_the_model(model):
    vocab = {w: i + 4 for i, w in enumerate("the cat sat down on a mat".split())}

    def encode(text):
        words = text.split()
        return torch.tensor([[vocab[w] for w in words]]), torch.tensor([[1, 8]]), words, ["<bos>", "le"]

    explorer = AttentionExplorer.from_model(model, *encode("the cat sat"), encode_fn=encode)
    sent = []
    explorer.send = sent.append
    explorer.kind, explorer.layer, explorer.head = "cross", 1, 0
    n_widgets = len(widget_instances)
    explorer._on_custom_msg(explorer, {"type": "text", "text": "a cat sat on the mat"}, [])
    assert sent == [{"type": "done"}]
    assert kind(explorer, "cross")["keys"] == ["a", "cat", "sat", "on", "the", "mat"]
    assert explorer.data["title"] == "Your input: 'a cat sat on the mat'"
    assert (explorer.kind, explorer.layer, explorer.head) == ("cross", 1, 0)  # the reader's choice stays
    assert len(widget_instances) == n_widgets  # no throwaway widgets (each would open a comm)
    explorer._on_custom_msg(explorer, {"type": "text", "text": "an unknown word"}, [])
    assert sent[-1] == {"type": "error", "message": "KeyError: 'an'"}


# ---- argument checks --------------------------------------------------------------------------

W = torch.full((2, 3, 3), 1 / 3)  # (heads, q, k)


@pytest.mark.parametrize("args, kwargs, error, message", [
    (("weights",), {}, TypeError, r"attention must be a dict"),
    (({},), {}, ValueError, r"attention is empty"),
    (({"encoders": [W]},), {}, ValueError, r"unknown kinds \['encoders'\]"),
    (({"encoder": []},), {}, ValueError, r"attention\['encoder'\] holds no layers"),
    (({"encoder": [W.tolist()]},), {}, TypeError, r"attention\['encoder'\]\[0\] must be a torch.Tensor or numpy array"),
    (({"encoder": [W[None]]},), {}, ValueError,
     r"attention\['encoder'\]\[0\] has shape \(1, 2, 3, 3\).*pick one example"),
    (({"encoder": W[0, 0]},), {}, ValueError, r"attention\['encoder'\] must have shape \(n_layers, n_heads"),
    (({"encoder": [W, W[:, :2]]},), {}, ValueError, r"layer 0 is \(2, 3, 3\), layer 1 is \(2, 2, 3\)"),
    (({"encoder": [W * 4]},), {}, ValueError, r"attention weights lie in \[0, 1\].*not the scores"),
    (({"encoder": [W * float("nan")]},), {}, ValueError, r"NaN"),
    (({"encoder": [W]},), {"tokens": ["a", "b"]}, ValueError,
     r"attention\['encoder'\] has 3 query rows but tokens has 2 tokens.*\(n_heads, len\(tokens\), len\(tokens\)\)"),
    (({"cross": [W]},), {"src_tokens": ["a", "b"], "tgt_tokens": ["x", "y", "z"]}, ValueError,
     r"attention\['cross'\] has 3 key columns but src_tokens has 2 tokens"
     r".*\(n_heads, len\(tgt_tokens\), len\(src_tokens\)\)"),
    (({"encoder": [W], "cross": [W[:, :, :2]]},), {}, ValueError,
     r"attention\['cross'\] has 2 key columns but attention\['encoder'\] has 3 query rows"),
    (({"encoder": [W]},), {"tokens": "abc"}, TypeError, r"tokens must be a list of strings"),
    (({"encoder": [W]},), {"tokens": [1, 2, 3]}, TypeError, r"tokens\[0\] must be a string"),
    (({"encoder": [W]},), {"tokens": list("abc"), "src_tokens": list("abc")}, ValueError, r"either tokens"),
    (({"encoder": [W]},), {"decimals": 9}, ValueError, r"decimals must be an integer from 0 to 6"),
    (({"encoder": [W]},), {"max_tokens": 0}, ValueError, r"max_tokens must be a positive integer"),
    (({"encoder": [W]},), {"kind": "cross"}, ValueError, r"kind must be one of \['encoder'\]"),
    (({"encoder": [W]},), {"layer": 1}, ValueError, r"layer must be an integer from 0 to 0"),
    (({"encoder": [W]},), {"head": 2}, ValueError, r"head must be -1 \(mean of heads\) or an integer from 0 to 1"),
])
def test_bad_arguments(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        AttentionExplorer(*args, **kwargs)


def test_bad_model_arguments(model, batch):
    src, tgt = batch
    with pytest.raises(TypeError, match=r"model must be a torch.nn.Module"):
        AttentionExplorer.from_model("model", src, tgt)
    with pytest.raises(TypeError, match=r"src_ids must be a torch.Tensor of token ids"):
        AttentionExplorer.from_model(model, [4, 5], tgt)
    with pytest.raises(ValueError, match=r"src_ids and tgt_ids must have the same batch size, got 2 and 1"):
        AttentionExplorer.from_model(model, src, tgt[:1])
    with pytest.raises(ValueError, match=r"index must pick an example of the batch of 2, got 2"):
        AttentionExplorer.from_model(model, src, tgt, index=2)
    with pytest.raises(ValueError, match=r"src_tokens has 4 tokens but src_ids has 5 positions \(3 without padding\)"):
        AttentionExplorer.from_model(model, src, tgt, ["a", "b", "c", "d"], index=1)
    with pytest.raises(ValueError, match=r"recorded no attention weights"):
        AttentionExplorer.from_model(torch.nn.Linear(2, 2), torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"weights is empty"):
        AttentionExplorer.from_recorded({})
    with pytest.raises(TypeError, match=r"fn must be callable"):
        AttentionExplorer(W).on_text("not a function")
