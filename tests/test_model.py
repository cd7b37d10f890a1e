"""The full model: causality, padding invariance, gradients, parameter counts, configs."""
import pytest
import torch

import transformer_lib as tl


def small_model(**kw):
    cfg = dict(src_vocab=13, tgt_vocab=11, d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0) | kw
    return tl.Transformer(tl.TransformerConfig(**cfg)).double().eval()


def test_logits_shape():
    model = small_model()
    src, tgt = torch.randint(1, 13, (3, 7)), torch.randint(1, 11, (3, 5))
    assert model(src, tgt).shape == (3, 5, 11)


@pytest.mark.parametrize("norm_first", [False, True])
def test_causality_future_targets_change_no_earlier_output(norm_first):
    model = small_model(norm_first=norm_first)
    src, tgt = torch.randint(1, 13, (2, 6)), torch.randint(1, 11, (2, 8))
    base = model(src, tgt)
    for t in range(7):
        changed = tgt.clone()
        changed[:, t + 1 :] = torch.randint(1, 11, changed[:, t + 1 :].shape)
        out = model(src, changed)
        assert (out[:, : t + 1] - base[:, : t + 1]).abs().max() < 1e-12, f"position {t} saw the future"
    # and the check can fail: a change at position t does change position t
    changed = tgt.clone()
    changed[:, 3] = (changed[:, 3] % 10) + 1
    assert (model(src, changed)[:, 3] - base[:, 3]).abs().max() > 1e-6


def test_padding_invariance_what_sits_under_padding_changes_nothing_real():
    model = small_model()
    pad = tl.special_tokens.PAD_ID
    src = torch.randint(1, 13, (2, 7))
    src[1, 4:] = pad
    tgt = torch.randint(1, 11, (2, 5))
    tgt[0, 3:] = pad
    base = model(src, tgt)
    # the same batch with different junk under the padding, and explicit masks that keep it hidden
    src_junk, tgt_junk = src.clone(), tgt.clone()
    src_junk[1, 4:] = torch.randint(1, 13, (3,))
    tgt_junk[0, 3:] = torch.randint(1, 11, (2,))
    out = model(src_junk, tgt_junk, src_mask=tl.padding_mask(src, pad), tgt_mask=tl.target_mask(tgt, pad))
    real = tgt != pad
    assert (out[real] - base[real]).abs().max() < 1e-12
    # and padding a shorter sentence gives the same answer as not padding it at all
    alone = model(src[1:, :4], tgt[1:])
    assert (alone - base[1:]).abs().max() < 1e-12


def test_every_parameter_receives_a_gradient():
    model = small_model(share_embeddings=False).train()
    src, tgt = torch.randint(1, 13, (4, 6)), torch.randint(1, 11, (4, 5))
    model(src, tgt).logsumexp(-1).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert not missing, missing


def test_shared_and_tied_weights_are_one_tensor():
    model = small_model(src_vocab=11, share_embeddings=True, tie_output=True)
    assert model.src_embed.weight is model.tgt_embed.weight is model.out.weight
    untied = small_model(src_vocab=11)
    assert tl.count_parameters(untied) - tl.count_parameters(model) == 2 * 11 * 32 + 11  # embedding, output + bias


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = small_model()
    ids = torch.tensor([[3, 4]])
    expected = model.src_embed.weight[ids] * 32**0.5 + tl.sinusoidal_encoding(2, 32).double()
    torch.testing.assert_close(model.src_embed(ids), expected)


def test_base_model_parameter_count_against_the_paper():
    # Paper, Table 3: base model 65M parameters, with a shared ~37,000-token vocabulary.
    cfg = tl.TransformerConfig.base(37000)
    with torch.device("meta"):
        model = tl.Transformer(cfg)
    n = tl.count_parameters(model)
    # the two stacks hold 44,138,496 = torch.nn.Transformer's 44,140,544 minus its two final
    # LayerNorms (2 x 1,024), which the post-norm paper model does not have; plus one
    # 37,000 x 512 embedding shared by source, target and output layer.
    stacks = 6 * (4 * (512 * 512 + 512) + 2 * 512 * 2048 + 2048 + 512 + 2 * 2 * 512) \
        + 6 * (8 * (512 * 512 + 512) + 2 * 512 * 2048 + 2048 + 512 + 3 * 2 * 512)
    assert stacks == 44_138_496
    assert n == stacks + 37000 * 512 == 63_082_496
    assert abs(n - 65e6) / 65e6 < 0.035  # within 3.5% of the paper's rounded 65M
    big = tl.TransformerConfig.big(37000)
    with torch.device("meta"):
        assert tl.count_parameters(tl.Transformer(big)) == 214_245_376  # paper: 213M


def test_torch_transformer_parameter_count_matches_the_stacks():
    with torch.device("meta"):
        theirs = torch.nn.Transformer(batch_first=True)
        ours = tl.EncoderDecoder(tl.Encoder(512, 8, 2048, 6, final_norm=True), tl.Decoder(512, 8, 2048, 6, final_norm=True))
    assert tl.count_parameters(ours) == sum(p.numel() for p in theirs.parameters()) == 44_140_544


def test_shipped_checkpoint_loads_strictly():
    # The checkpoint and the chapters depend on the state_dict keys: none missing, none extra.
    saved = torch.load(tl.CHECKPOINTS / "transformer_dates.pt", weights_only=True)
    config = dict(saved["config"])
    assert config.pop("pad_id", tl.special_tokens.PAD_ID) == tl.special_tokens.PAD_ID  # a field the library retired
    model = tl.Transformer(tl.TransformerConfig(**config))
    model.load_state_dict(saved["state_dict"], strict=True)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved["state_dict"].items())


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "explicit"])
def test_forward_on_the_meta_device_creates_nothing_elsewhere(norm_first, fused):
    # Meta tensors hold shapes only: a tensor made on the CPU by mistake (a mask, a position
    # table, a constant) meets them in one operation and fails, on any machine.
    with torch.device("meta"):
        model = tl.Transformer(tl.TransformerConfig(13, 11, d_model=16, n_heads=2, d_ff=32, n_layers=2,
                                                    dropout=0.1, norm_first=norm_first)).train()
        for m in tl.attention.attention_modules(model).values():
            m.fused = fused
        src, tgt = torch.zeros(3, 7, dtype=torch.long), torch.zeros(3, 5, dtype=torch.long)
        x, memory = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    logits = model(src, tgt)
    assert logits.is_meta and logits.shape == (3, 5, 11)
    src_mask, tgt_mask = tl.padding_mask(src, 0), tl.target_mask(tgt, 0)
    outputs = [
        model.encoder.layers[0](memory, src_mask),
        model.decoder.layers[0](x, memory, tgt_mask, src_mask),
        model.encoder(memory, src_mask),
        model.decoder(x, memory, tgt_mask, src_mask),
        model.decoder.layers[0].cross_attn(x, memory, memory, src_mask),
        model.decoder.layers[0].norm1(x, model.decoder.layers[0].ff),
    ]
    for out, shape in zip(outputs, [(3, 7, 16), (3, 5, 16), (3, 7, 16), (3, 5, 16), (3, 5, 16), (3, 5, 16)]):
        assert out.is_meta and out.shape == shape


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_model_and_greedy_decoding_on_cuda():
    torch.manual_seed(0)
    cpu_model = small_model()  # float64: CPU and GPU pick the same argmax
    src = torch.randint(3, 13, (4, 7))
    src[1, 5:] = 0
    tgt = torch.randint(3, 11, (4, 5))
    gpu_model = small_model()
    gpu_model.load_state_dict(cpu_model.state_dict())
    gpu_model = gpu_model.to("cuda")
    logits = gpu_model(src.cuda(), tgt.cuda())
    assert logits.device.type == "cuda"
    torch.testing.assert_close(logits.cpu(), cpu_model(src, tgt))
    gpu = tl.greedy_decode(gpu_model, src.cuda(), max_len=6)
    cpu = tl.greedy_decode(cpu_model, src, max_len=6)
    assert gpu.tokens.device.type == "cuda"
    assert torch.equal(gpu.tokens.cpu(), cpu.tokens)
