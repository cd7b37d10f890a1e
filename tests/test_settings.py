"""Every setting is checked when its object is made (issue: no setting accepted, then misused).

`BAD` lists, for every field of every config dataclass, values that must be refused at
construction with a ValueError or TypeError whose message names the field. A test checks that
the table covers every field, so a new field without a check fails here.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import transformer_lib as tl
from transformer_lib import decoding, lm, rnn
from transformer_lib.losses import LabelSmoothingLoss
from transformer_lib.training import TrainConfig

NAN, INF = float("nan"), float("inf")
NOT_INT = [0, -1, 2.0, True, "3", None]
NOT_PROB = [-0.1, 1.0, 1.5, NAN, "0.1", True, None]
NOT_BOOL = [0, 1, "yes", None]

VALID = {
    tl.TransformerConfig: dict(src_vocab=12, tgt_vocab=12, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=16),
    rnn.Seq2SeqConfig: dict(src_vocab=12, tgt_vocab=12, emb_dim=4, hidden_size=6, attn_size=5),
    lm.CausalLMConfig: dict(vocab_size=12, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=16),
    TrainConfig: dict(),
}

BAD = {
    tl.TransformerConfig: {
        "src_vocab": NOT_INT, "tgt_vocab": NOT_INT, "d_model": NOT_INT + [7], "n_heads": NOT_INT + [3],
        "d_ff": NOT_INT, "n_layers": NOT_INT, "dropout": NOT_PROB, "max_len": NOT_INT,
        "norm_first": NOT_BOOL, "share_embeddings": NOT_BOOL + [dict(value=True, tgt_vocab=13)],
        "tie_output": NOT_BOOL,
    },
    rnn.Seq2SeqConfig: {
        "src_vocab": NOT_INT, "tgt_vocab": NOT_INT, "emb_dim": NOT_INT, "hidden_size": NOT_INT,
        "attention": ["cosine", "", 1], "bidirectional": NOT_BOOL, "attn_size": NOT_INT,
    },
    lm.CausalLMConfig: {
        "vocab_size": NOT_INT, "d_model": NOT_INT + [7], "n_heads": NOT_INT + [3], "d_ff": NOT_INT,
        "n_layers": NOT_INT, "max_len": NOT_INT, "dropout": NOT_PROB, "norm_first": NOT_BOOL,
        "norm": ["batch", "", None], "positions": ["relative", None, dict(value="rope", d_model=12, n_heads=4)],
        "ffn": ["gelu", None], "n_kv_heads": [0, -1, 3, 2.0, True], "bias": NOT_BOOL,
        "tie_output": NOT_BOOL, "scale_embeddings": NOT_BOOL,
        "rope_scaling": ["linear", "", "pi", dict(value="yarn", positions="rope", rope_factor=2.0)],
        "rope_factor": [0.5, 0, NAN, INF, True, "2", 2.0, dict(value=None, positions="rope", rope_scaling="pi")],
        "rope_trained_length": [16, dict(value=0, positions="rope", rope_scaling="yarn", rope_factor=2.0),
                                dict(value=2.5, positions="rope", rope_scaling="yarn", rope_factor=2.0),
                                dict(value=32, positions="rope", rope_scaling="pi", rope_factor=2.0)],
        "qk_norm": NOT_BOOL,
    },
    TrainConfig: {
        "max_steps": NOT_INT, "warmup": NOT_INT, "factor": [0, -1.0, NAN, INF, "1", None],
        "label_smoothing": NOT_PROB, "clip_norm": [0, -1.0, NAN, INF, "1"], "eval_every": NOT_INT,
        "patience": [0, -1, 1.5, True], "target_accuracy": [0, -0.5, 1.5, NAN, "1", True],
        "max_seconds": [0, -1.0, NAN, "10"], "checkpoint": [3, 1.5, True], "progress": NOT_BOOL,
        "schedule": ["noam", "", None],
        "peak_lr": [0, -1e-3, NAN, INF, "1e-3", dict(value=1e-3, factor=2.0), dict(value=1e-3, schedule="constant")],
        "lr": [0, -1e-3, NAN, INF, "1e-3", None], "betas": [(0.9,), (0.9, 1.0), (-0.1, 0.9), "0.9", None],
        "adam_eps": [0, -1e-9, NAN, None],
    },
}


def _cases():
    for cls, fields in BAD.items():
        for name, values in fields.items():
            for value in values:
                yield pytest.param(cls, name, value, id=f"{cls.__name__}.{name}={value!r}")


def test_the_table_covers_every_field_of_every_config():
    for cls, fields in BAD.items():
        assert dataclasses.is_dataclass(cls)
        assert set(fields) == {f.name for f in dataclasses.fields(cls)}, cls.__name__


@pytest.mark.parametrize("cls, name, value", list(_cases()))
def test_every_field_refuses_a_bad_value_when_the_config_is_made(cls, name, value):
    kwargs = dict(VALID[cls])
    if isinstance(value, dict):  # a value that is bad only together with other settings
        value = dict(value)
        kwargs.update({k: v for k, v in value.items() if k != "value"})
        value = value["value"]
    kwargs[name] = value
    with pytest.raises((ValueError, TypeError), match=name):
        cls(**kwargs)


@pytest.mark.parametrize("cls", list(BAD))
def test_configs_are_valid_by_default_and_frozen(cls):
    config = cls(**VALID[cls])
    name = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(config, name, -1)
    assert dataclasses.replace(config) == config


@pytest.mark.parametrize("model_cls, config", [
    (tl.Transformer, tl.TransformerConfig(**VALID[tl.TransformerConfig])),
    (rnn.Seq2Seq, rnn.Seq2SeqConfig(**VALID[rnn.Seq2SeqConfig])),
    (lm.CausalLM, lm.CausalLMConfig(**VALID[lm.CausalLMConfig])),
])
def test_every_model_is_built_from_its_config_and_refuses_anything_else(model_cls, config):
    model = model_cls(config)
    assert model.config is config
    with pytest.raises(TypeError, match="config must be a"):
        model_cls(dataclasses.asdict(config))


# --- settings that used to be accepted and then misused --------------------------------------

def _tiny_transformer(max_len=8):
    torch.manual_seed(0)
    return tl.Transformer(tl.TransformerConfig(12, 12, d_model=8, n_heads=2, d_ff=16, n_layers=1, max_len=max_len))


def test_decoding_checks_its_lengths_against_the_positional_table_before_it_starts():
    model = _tiny_transformer(max_len=8)
    src = torch.tensor([[4, 5, 6]])
    for decode in (decoding.greedy_decode, decoding.beam_search):
        with pytest.raises(ValueError, match="max_len=9"):
            decode(model, src, max_len=9)
        decode(model, src, max_len=8)  # fits: <bos> and 7 outputs
    with pytest.raises(ValueError, match="src has 9 positions"):
        decoding.greedy_decode(model, torch.full((1, 9), 4), max_len=4)
    vocab = tl.vocab.Vocab.from_texts(["abcdefgh"])
    with pytest.raises(ValueError, match="max_len=40"):  # translate's default, before any batch runs
        decoding.translate(model, ["ab"], vocab, vocab)


def test_decoding_refuses_an_empty_source_and_bad_beam_settings():
    model = _tiny_transformer()
    with pytest.raises(ValueError, match="src must hold at least one position"):
        decoding.greedy_decode(model, torch.zeros(2, 0, dtype=torch.long), max_len=4)
    with pytest.raises(ValueError, match="beam_size"):
        decoding.beam_search(model, torch.tensor([[4]]), max_len=4, beam_size=0)
    with pytest.raises(ValueError, match="alpha"):
        decoding.beam_search(model, torch.tensor([[4]]), max_len=4, alpha=-1.0)


@pytest.mark.parametrize("options, name", [
    (dict(top_k=3), "top_k"), (dict(temperature=0.5), "temperature"),
    (dict(generator=torch.Generator()), "generator"),
    (dict(sample=True, top_k=13), "top_k"), (dict(sample=True, temperature=0.0), "temperature"),
    (dict(sample=True, generator=3), "generator"), (dict(sample=1), "sample"),
])
def test_generation_refuses_settings_it_would_ignore_or_misuse(options, name):
    model = lm.CausalLM(lm.CausalLMConfig(**VALID[lm.CausalLMConfig]))
    with pytest.raises((ValueError, TypeError), match=name):
        lm.generate(model, torch.tensor([[1, 2]]), 0, **options)  # refused before any step
    with pytest.raises((ValueError, TypeError), match=name):
        lm.next_token(torch.zeros(1, 12), **options)


def test_label_smoothing_refuses_targets_outside_the_vocabulary():
    loss = LabelSmoothingLoss(0.1, pad_id=0)
    logits = torch.zeros(2, 3, 5)
    with pytest.raises(ValueError, match=r"target holds token ids in \[0, 5\]"):
        loss(logits, torch.tensor([[1, 2, 5], [0, 1, 1]]))
    with pytest.raises(ValueError, match="target holds token ids"):
        loss(logits, torch.tensor([[1, 2, -1], [0, 1, 1]]))
    with pytest.raises(TypeError, match="target must hold integer"):
        loss(logits, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="pad_id=7"):
        LabelSmoothingLoss(0.1, pad_id=7)(logits, torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="pad_id"):
        LabelSmoothingLoss(0.1, pad_id=-1)


@pytest.mark.parametrize("where", ["query", "key", "value"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_one_policy_for_non_finite_inputs_on_every_attention_path(where, bad):
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    {"query": q, "key": k, "value": v}[where][0, 0, 1, 3] = bad
    mask = tl.causal_mask(4)
    paths = [lambda: tl.scaled_dot_product_attention(q, k, v, mask), lambda: tl.fused_attention(q, k, v, mask),
             lambda: tl.efficient.blockwise_attention(q, k, v, mask, block_size=2)]
    for path in paths:
        with pytest.raises(ValueError, match=f"{where} must be finite"):
            path()
    mha = tl.MultiHeadAttention(8, 2)
    x = torch.randn(1, 4, 8)
    x[0, 2, 5] = bad
    for fused in (True, False):
        mha.fused = fused
        with pytest.raises(ValueError, match="query must be finite"):
            mha(x, x, x)


def test_rnn_accepts_every_integer_id_dtype_and_checks_masks_and_targets():
    torch.manual_seed(0)
    model = rnn.Seq2Seq(rnn.Seq2SeqConfig(**VALID[rnn.Seq2SeqConfig])).eval()
    src = torch.tensor([[4, 5, 6], [7, 8, 0]])
    tgt = torch.tensor([[1, 4, 5], [1, 6, 0]])
    with torch.no_grad():
        expected = model(src, tgt)
        torch.testing.assert_close(model(src.int(), tgt.int()), expected)
        memory = model.encode(src)
        with pytest.raises(ValueError, match=r"src_mask must be a boolean \(batch, T_x\)"):
            model.decode(tgt, memory, torch.ones(2, 5, dtype=torch.bool))
        with pytest.raises(ValueError, match="src_mask must be the padding mask"):
            model.encode(src, torch.ones(2, 3, dtype=torch.bool))
        model.encode(src, src != 0)  # the padding mask itself is fine
        with pytest.raises(ValueError, match="T_y >= 1"):
            model.decode(tgt[:, :0], memory, src != 0)
        with pytest.raises(ValueError, match="at least one position"):
            model.encode(src[:, :0])


def test_setup_refuses_a_device_this_machine_lacks(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="'cuda' is not available"):
        tl.runtime.resolve_device("cuda")
    monkeypatch.setenv(tl.runtime.DEVICE_VARIABLE, "cuda:0")
    with pytest.raises(ValueError, match="not available"):
        tl.runtime.resolve_device()
    monkeypatch.setenv(tl.runtime.DEVICE_VARIABLE, "toaster")
    with pytest.raises(ValueError, match="device must name a torch device"):
        tl.runtime.resolve_device()
    monkeypatch.delenv(tl.runtime.DEVICE_VARIABLE)
    assert tl.runtime.resolve_device() == torch.device("cpu")
    with pytest.raises(ValueError, match="seed"):
        tl.runtime.setup(seed=-1)
