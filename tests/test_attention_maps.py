"""transformer_lib.attention_maps: the kind of each attention module, and one model run by kind."""
import pytest
import torch

import transformer_lib as tl
from transformer_lib.attention_maps import MAP_KINDS, attention_by_kind, attention_kind, run_model


def test_attention_kind_of_every_module_of_the_book_models():
    config = tl.TransformerConfig(src_vocab=12, tgt_vocab=12, d_model=8, n_heads=2, d_ff=16, n_layers=2)
    names = tl.attention.attention_modules(tl.Transformer(config))
    kinds = {name: attention_kind(name) for name in names}
    assert kinds == {"encoder.layers.0.self_attn": "encoder", "encoder.layers.1.self_attn": "encoder",
                     "decoder.layers.0.self_attn": "decoder", "decoder.layers.1.self_attn": "decoder",
                     "decoder.layers.0.cross_attn": "cross", "decoder.layers.1.cross_attn": "cross"}
    lm = tl.lm.CausalLM(tl.lm.CausalLMConfig(12, d_model=8, n_heads=2, d_ff=16, n_layers=2))
    assert {attention_kind(n) for n in tl.attention.attention_modules(lm)} == {"decoder"}
    # the same rule for a model held inside another module
    assert attention_kind("model.encoder.layers.0.self_attn") == "encoder"
    assert attention_kind("layers.3.cross_attn") == "cross"
    assert set(MAP_KINDS) >= {"encoder", "decoder", "cross"}


def test_attention_by_kind_keeps_module_order_and_picks_the_example():
    w = {f"encoder.layers.{i}.self_attn": torch.full((3, 2, 4, 4), float(i)) for i in range(2)}
    w["decoder.layers.0.cross_attn"] = torch.rand(3, 2, 5, 4)
    got = attention_by_kind(w, index=2)
    assert list(got) == ["encoder", "cross"]
    assert [float(a[0, 0, 0]) for a in got["encoder"]] == [0.0, 1.0]
    assert torch.equal(got["cross"][0], w["decoder.layers.0.cross_attn"][2])
    with pytest.raises(ValueError, match="index"):
        attention_by_kind(w, index=3)
    with pytest.raises(ValueError, match="weights"):
        attention_by_kind({"x": torch.rand(2, 2)})


def test_run_model_on_a_decoder_only_model_uses_its_one_sequence():
    torch.manual_seed(0)
    lm = tl.lm.CausalLM(tl.lm.CausalLMConfig(12, d_model=8, n_heads=2, d_ff=16, n_layers=2))
    ids = torch.tensor([[4, 5, 6, 7]])
    attention, src_tokens, tgt_tokens = run_model(lm, ids, src_tokens=list("abcd"))
    assert list(attention) == ["decoder"] and len(attention["decoder"]) == 2
    assert src_tokens is None and tgt_tokens == list("abcd")
    assert attention["decoder"][0].shape == (2, 4, 4)
    assert torch.all(attention["decoder"][0].triu(1) == 0)  # causal
    explorer_tokens = run_model(lm, ids)[2]
    assert explorer_tokens == ["4", "5", "6", "7"]
    with pytest.raises(ValueError, match="src_tokens has 3 tokens but src_ids has 4"):
        run_model(lm, ids, src_tokens=list("abc"))
