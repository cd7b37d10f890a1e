"""One device setting: nothing in the model, training and decoding paths makes a tensor on the
CPU behind the user's back.

The machine that runs the tests has no GPU, so the model lives on PyTorch's `meta` device
(shapes without values) while the default device stays the CPU: any tensor the library makes
without asking the model or its inputs for their device would then appear on the CPU. A
dispatch mode records every operation whose output lands on the CPU, with the library line
that asked for it. Reading a value back (`.item()`, `bool()`) is impossible on `meta`, so the
tests give meta tensors a stand-in value for those few reads.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import transformer_lib as tl
from transformer_lib import decoding, lm, training
from transformer_lib.vocab import Vocab

LIBRARY = str(Path(tl.__file__).resolve().parent)
META = torch.device("meta")


class CPUTensorsMade(TorchDispatchMode):
    """Record (operation, library file:line) for every op whose output is on the CPU and that a
    line of transformer_lib called (PyTorch's own optimiser state, kept on the CPU on purpose,
    is not the library's doing)."""

    def __init__(self):
        super().__init__()
        self.made: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in tree_flatten(out)[0]):
            where = self._library_line()
            if where:
                self.made.append((str(func), where))
        return out

    @staticmethod
    def _library_line() -> str:
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if "torch/optim" in name:
                return ""
            if name.startswith(LIBRARY):
                return f"{Path(name).name}:{frame.f_lineno}"
            frame = frame.f_back
        return ""


@pytest.fixture
def readable_meta(monkeypatch):
    """`.item()`, `bool()`, `int()`, `float()` on a meta tensor give a stand-in instead of raising,
    and boolean indexing (the loss keeps its non-padding positions) assumes every entry kept."""
    import torch.fx.experimental._config as fx_config

    for name, stand_in in (("item", 0.0), ("__bool__", False), ("__int__", 0), ("__float__", 0.0)):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda t, real=real, v=stand_in: v if t.is_meta else real(t))
    if hasattr(fx_config, "meta_nonzero_assume_all_nonzero"):  # torch >= 2.7
        with fx_config.patch(meta_nonzero_assume_all_nonzero=True):
            yield
    else:  # older: boolean indexing on meta has no shape; keep the loss's positions all
        index = torch.Tensor.__getitem__
        monkeypatch.setattr(torch.Tensor, "__getitem__", lambda t, i: t if t.is_meta and isinstance(
            i, torch.Tensor) and i.dtype == torch.bool else index(t, i))
        yield


def small_transformer():
    torch.manual_seed(0)
    return tl.Transformer(tl.TransformerConfig(12, 12, d_model=16, n_heads=4, d_ff=32, n_layers=2, max_len=20))


def test_the_encoder_decoder_trains_and_decodes_without_a_cpu_tensor(readable_meta):
    model = small_transformer().to(META)
    src = torch.tensor([[4, 5, 6, 0], [7, 8, 9, 10]])
    tgt = torch.tensor([[1, 4, 5, 2, 0], [1, 6, 7, 8, 2]])
    cfg = tl.TrainConfig(max_steps=2, warmup=1, eval_every=1, progress=False)
    with CPUTensorsMade() as spy:
        logits = model(src.to(META), tgt[:, :-1].to(META))
        training.seq2seq_loss(model, (src.to(META), tgt.to(META)), cfg).backward()
        hist = tl.train(model, [(src, tgt)], [(src, tgt)], cfg)  # CPU batches, moved by the loop
        out = decoding.greedy_decode(model, src.to(META), max_len=6)
    assert spy.made == [], spy.made
    assert logits.shape == (2, 4, 12) and logits.is_meta
    assert hist.step == [1, 2] and hist.eval_step == [1, 2]
    assert out.tokens.is_meta and out.tokens.shape == (2, 6)
    assert all(p.is_meta for p in model.parameters())


def test_the_language_model_generates_and_trains_without_a_cpu_tensor(readable_meta):
    torch.manual_seed(0)
    config = lm.CausalLMConfig(20, d_model=16, n_heads=4, d_ff=32, n_layers=2, max_len=32,
                               positions="rope", norm="rms", ffn="swiglu", n_kv_heads=2)
    model = lm.CausalLM(config).to(META)
    prompt = torch.tensor([[3, 4, 5]], device=META)
    cfg = tl.TrainConfig(max_steps=2, warmup=1, eval_every=2, progress=False, label_smoothing=0.0)
    ids = torch.arange(100) % 20
    windows = list(lm.random_windows(ids, 2, 8, steps=3))  # data is made on the CPU by design
    with CPUTensorsMade() as spy:
        greedy = lm.generate(model, prompt, 5)
        sampled = lm.generate(model, prompt, 5, sample=True, top_k=4)  # the default generator: on meta
        cache = model.new_cache(1)
        model(prompt, cache=cache)
        tl.train(model, windows[:2], windows[2:], cfg, loss_fn=lm.lm_loss, eval_fn=lm.lm_evaluate)
    assert spy.made == [], spy.made
    assert greedy.is_meta and greedy.shape == sampled.shape == (1, 8)
    assert all(c.keys.is_meta and c.length == 3 for c in cache)


def test_the_spy_catches_a_tensor_made_on_the_cpu_by_mistake(monkeypatch):
    # A forward pass that builds its mask without the input's device: the test above would fail.
    model = lm.CausalLM(lm.CausalLMConfig(20, d_model=16, n_heads=4, d_ff=32, max_len=16)).to(META)
    real = tl.masks.causal_mask
    monkeypatch.setattr(lm, "causal_mask", lambda n, device=None, k_len=None: real(n, k_len=k_len).to(device))
    with CPUTensorsMade() as spy:
        model(torch.tensor([[1, 2, 3]], device=META))
    assert spy.made and all(where.startswith("test_device.py") or where.startswith("lm.py") or
                            where.startswith("masks.py") for _, where in spy.made)


def test_models_load_onto_the_books_device(tmp_path):
    vocab = Vocab.from_texts(["abc"])
    model = lm.CausalLM(lm.CausalLMConfig(len(vocab), d_model=8, n_heads=2, d_ff=8, n_layers=1))
    tl.checkpoints.save(tmp_path / "m.pt", model, vocab, vocab)
    on_meta = tl.checkpoints.load(tmp_path / "m.pt", map_location="meta")[0]
    assert all(p.is_meta for p in on_meta.parameters())
    with torch.device("meta"):  # as `setup(device=...)` makes it, for the default map_location
        assert all(p.is_meta for p in tl.checkpoints.load(tmp_path / "m.pt")[0].parameters())
    assert all(p.device.type == "cpu" for p in tl.checkpoints.load(tmp_path / "m.pt")[0].parameters())


def _device_contexts() -> list:
    """The device contexts on PyTorch's torch-function mode stack: what `set_default_device`
    leaves behind (each one costs a little on every torch call)."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext

    return [m for m in _get_current_function_mode_stack() if isinstance(m, DeviceContext)]


def test_setup_makes_the_chosen_device_the_default_and_the_cpu_leaves_no_trace():
    assert not _device_contexts()
    try:
        tl.runtime.setup(seed=0, threads=torch.get_num_threads(), device="meta")
        assert tl.runtime.book_device() == META and torch.zeros(1).is_meta
        assert tl.sinusoidal_encoding(4, 8).is_meta and tl.PositionalEncoding(8, 4).pe.is_meta
        assert len(_device_contexts()) == 1  # the check sees a context where there is one
    finally:
        tl.runtime.setup(seed=0, threads=torch.get_num_threads(), device="cpu")
    assert torch.zeros(1).device.type == "cpu"
    assert not _device_contexts(), "setup(device='cpu') left a device context behind"
    try:
        torch.set_default_device("cpu")  # what setup used to do: a CPU context, left on the stack
        assert len(_device_contexts()) == 1
    finally:
        torch.set_default_device(None)
    assert not _device_contexts()
