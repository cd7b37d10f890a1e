"""Inputs are checked where a call enters the library, once per call (`_checks.entry_point`): a
model's forward checks its token ids and masks, and the layers and attention modules inside it do
not check again, so nothing per layer waits for the device. A layer or attention module that a
reader calls alone is itself an entry point and checks everything."""
import pytest
import torch
from torch.overrides import TorchFunctionMode

import transformer_lib as tl
from transformer_lib import decoding, lm

#: Tensor methods that make the host wait for the device's result.
SYNCS = {"__bool__", "item", "__int__", "__float__", "__index__", "tolist", "nonzero", "numpy"}


class CountSyncs(TorchFunctionMode):
    """Counts the tensor calls inside the block that wait for the device (`SYNCS`)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += getattr(func, "__name__", "") in SYNCS
        return func(*args, **(kwargs or {}))


def syncs(fn) -> int:
    with CountSyncs() as counter, torch.no_grad():
        fn()
    return counter.count


def _transformer(n_layers: int) -> tl.Transformer:
    torch.manual_seed(0)
    return tl.Transformer(tl.TransformerConfig(11, 11, d_model=16, n_heads=2, d_ff=16, n_layers=n_layers)).eval()


def test_the_counter_sees_a_check_that_waits():
    x = torch.randn(2, 3, 8)
    mha = tl.MultiHeadAttention(8, 2)
    assert syncs(lambda: mha(x, x, x)) == 1  # alone, it is an entry point: one finiteness check
    assert syncs(lambda: bool(x.sum() > 0)) == 1


@pytest.mark.parametrize("fused", [True, False])
def test_a_transformer_forward_waits_twice_whatever_its_depth(fused):
    src, tgt = torch.randint(4, 11, (3, 7)), torch.randint(4, 11, (3, 5))
    counts = []
    for n_layers in (1, 4):
        model = _transformer(n_layers)
        for m in tl.attention.attention_modules(model).values():
            m.fused = fused
        counts.append(syncs(lambda: model(src, tgt)))
    assert counts == [2, 2]  # src's and tgt's token ids, checked once each


def test_a_language_model_forward_and_cached_generation_do_not_wait_per_layer():
    counts = []
    for n_layers in (1, 3):
        torch.manual_seed(0)
        model = lm.CausalLM(lm.CausalLMConfig(13, d_model=16, n_heads=2, d_ff=16, n_layers=n_layers, max_len=32))
        ids = torch.randint(0, 13, (2, 9))
        counts.append((syncs(lambda: model(ids)), syncs(lambda: lm.generate(model, ids[:, :3], 10))))
    assert counts[0] == counts[1] and counts[0][0] == 1


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_decoder_step_inside_decoding_waits_for_nothing(use_cache, search):
    model, src = _transformer(3), torch.randint(4, 11, (4, 6))
    waits, decode = [], model.decode

    def counted(*args, **kwargs):  # the syncs of each decoder step, inside the search's one check
        before = counter.count
        out = decode(*args, **kwargs)
        waits.append(counter.count - before)
        return out

    model.decode = counted
    with CountSyncs() as counter, torch.no_grad():
        if search == "greedy":
            decoding.greedy_decode(model, src, 8, use_cache=use_cache)
        else:
            decoding.beam_search(model, src, 8, beam_size=3, use_cache=use_cache)
    assert len(waits) >= 2 and set(waits) == {0}, waits
    assert syncs(lambda: decode(torch.randint(4, 11, (4, 2)), torch.randn(4, 6, 16))) > 0  # alone: checked


def test_inner_modules_still_check_when_a_reader_calls_them_alone():
    x = torch.randn(2, 4, 16)
    x[1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match="query must be finite"):
        tl.EncoderLayer(16, 2, 32)(x)
    with pytest.raises(ValueError, match="x must be finite"):
        tl.Encoder(16, 2, 32, 2)(x)
    with pytest.raises(ValueError, match="memory must be finite"):
        tl.Decoder(16, 2, 32, 1)(torch.randn(2, 3, 16), x)
    with pytest.raises(ValueError, match="x must be finite"):
        tl.PositionalEncoding(16, 10)(x)


def test_a_models_boundary_checks_what_its_layers_no_longer_check():
    model = _transformer(2)
    src, tgt = torch.randint(4, 11, (3, 7)), torch.randint(4, 11, (3, 5))
    with pytest.raises(ValueError, match=r"src_mask of shape \(3, 1, 1, 6\) does not broadcast"):
        model(src, tgt, src_mask=torch.ones(3, 1, 1, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"tgt_mask of shape \(4, 4\) does not broadcast"):
        model(src, tgt, tgt_mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="src_mask must be a boolean tensor"):
        model.encode(src, torch.ones(3, 1, 1, 7))
    with pytest.raises(ValueError, match="memory must have last dimension d_model=16"):
        model.decode(tgt, torch.randn(3, 7, 8))
    with pytest.raises(ValueError, match=r"tgt reaches position 600, past the model's max_len=512"):
        model(src, torch.randint(4, 11, (3, 601)))
    with pytest.raises(ValueError, match="src and tgt must have the same batch size"):
        model(src, tgt[:2])


def test_after_a_refused_call_the_next_call_is_checked_again():
    model = _transformer(1)
    with pytest.raises(ValueError, match="src holds token ids"):
        model(torch.tensor([[1, 99]]), torch.tensor([[1, 2]]))
    x = torch.full((1, 2, 16), float("inf"))
    with pytest.raises(ValueError, match="query must be finite"):  # not taken for a call nested in the first
        model.encoder.layers[0].self_attn(x, x, x)
