"""FlashAttention for training (chapter 13): the tiled forward pass and the recomputing
backward pass equal exact attention and its autograd gradients, with the library's masks,
pass gradcheck in float64, save only O and the log-sum-exp, and keep memory linear in T."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from conftest import boolean_masks
from transformer_lib.flash import FlashAttention, flash_attention
from transformer_lib.memory import peak_tensor_memory


def qkv(*lead, q_len=10, k_len=10, d_k=6, d_v=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    make = lambda n, d: torch.randn(*lead, n, d, generator=g, dtype=dtype)  # noqa: E731
    return (make(q_len, d_k).requires_grad_(), make(k_len, d_k).requires_grad_(),
            make(k_len, d_v).requires_grad_())


def exact_and_flash(q, k, v, mask=None, causal=False, **blocks):
    """Outputs and gradients (for one random upstream gradient) of exact attention and of
    flash_attention. The exact one gets the causal mask (aligned to the last key) spelled out."""
    full = mask
    if causal:
        t_q, t_k = q.shape[-2], k.shape[-2]
        tri = torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q)
        full = tri if mask is None else mask & tri
    exact = tl.scaled_dot_product_attention(q, k, v, full)[0]
    flash = flash_attention(q, k, v, mask, causal=causal, **blocks)
    grad_out = torch.randn(exact.shape, generator=torch.Generator().manual_seed(9), dtype=q.dtype)
    return (exact, torch.autograd.grad(exact, (q, k, v), grad_out),
            flash, torch.autograd.grad(flash, (q, k, v), grad_out))


def assert_same(exact, exact_grads, flash, flash_grads, **tol):
    torch.testing.assert_close(flash, exact, **tol)
    for name, a, b in zip("qkv", exact_grads, flash_grads):
        torch.testing.assert_close(b, a, msg=lambda m, n=name: f"grad of {n}: {m}", **tol)


@pytest.mark.parametrize("block_q, block_k", [(1, 1), (3, 4), (4, 3), (10, 10), (64, 64)])
def test_output_and_gradients_equal_exact_attention(block_q, block_k):
    q, k, v = qkv(2, 3, q_len=10, k_len=13)
    assert_same(*exact_and_flash(q, k, v, block_q=block_q, block_k=block_k))


def test_with_the_librarys_masks():
    q, k, v = qkv(2, 3, q_len=12, k_len=12)
    ids = torch.tensor([[5] * 12, [5] * 8 + [0] * 4])
    random = torch.rand(2, 3, 12, 12, generator=torch.Generator().manual_seed(1)) > 0.5
    for mask in (tl.padding_mask(ids, 0), tl.causal_mask(12), tl.target_mask(ids, 0), random):
        assert_same(*exact_and_flash(q, k, v, mask, block_q=5, block_k=4))
    for mask in (None, tl.padding_mask(ids, 0)):  # the causal flag, alone and with padding
        assert_same(*exact_and_flash(q, k, v, mask, causal=True, block_q=5, block_k=4))


def test_causal_flag_with_fewer_queries_than_keys_is_aligned_to_the_last_key():
    q, k, v = qkv(1, 2, q_len=3, k_len=11)
    assert_same(*exact_and_flash(q, k, v, causal=True, block_q=2, block_k=4))
    out = flash_attention(q, k, v, causal=True)
    # the last query sees every key: it equals unmasked attention for that row
    torch.testing.assert_close(out[..., -1, :], tl.scaled_dot_product_attention(q, k, v)[0][..., -1, :])


def test_a_row_with_no_allowed_key_gives_zero_output_and_zero_gradients():
    q, k, v = qkv(1, 2, q_len=6, k_len=9)
    mask = torch.ones(1, 1, 6, 9, dtype=torch.bool)
    mask[..., 2, :] = False  # no key at all
    mask[..., 4, :5] = False  # no key in its first tile, some in the second
    exact, exact_grads, flash, flash_grads = exact_and_flash(q, k, v, mask, block_q=2, block_k=4)
    assert_same(exact, exact_grads, flash, flash_grads)
    assert torch.isfinite(flash).all() and flash[..., 2, :].abs().max() == 0
    assert flash_grads[0][..., 2, :].abs().max() == 0  # the empty row's query gets no gradient


def test_gradcheck_in_float64_with_masks():
    q, k, v = qkv(1, 2, q_len=5, k_len=7, d_k=3, d_v=2)
    mask = torch.rand(1, 2, 5, 7, generator=torch.Generator().manual_seed(2)) > 0.3
    mask[0, 1, 3] = False  # one empty row
    fn = lambda q, k, v: flash_attention(q, k, v, mask, block_q=2, block_k=3)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))
    causal = lambda q, k, v: flash_attention(q, k, v, causal=True, block_q=2, block_k=3)  # noqa: E731
    assert torch.autograd.gradcheck(causal, (q, k, v))


def test_broadcast_leading_dimensions_get_summed_gradients():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(3, 2, 6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 8, 4, generator=g, dtype=torch.float64, requires_grad=True)  # shared
    v = torch.randn(2, 8, 5, generator=g, dtype=torch.float64, requires_grad=True)
    exact, exact_grads, flash, flash_grads = exact_and_flash(q, k, v, tl.causal_mask(8)[:6],
                                                             block_q=4, block_k=3)
    assert_same(exact, exact_grads, flash, flash_grads)
    assert [t.shape for t in flash_grads] == [q.shape, k.shape, v.shape]


@settings(max_examples=30, deadline=None)
@given(t_q=st.integers(1, 9), t_k=st.integers(1, 9), block_q=st.integers(1, 5),
       block_k=st.integers(1, 5), causal=st.booleans(), seed=st.integers(0, 2**16), data=st.data())
def test_property_equal_to_exact_attention_for_any_tiling_and_mask(t_q, t_k, block_q, block_k,
                                                                   causal, seed, data):
    q, k, v = qkv(2, q_len=t_q, k_len=t_k, d_k=3, d_v=2, seed=seed)
    mask = data.draw(boolean_masks((2, t_q, t_k)), label="mask")
    exact, exact_grads, flash, flash_grads = exact_and_flash(q, k, v, mask, causal, block_q=block_q,
                                                             block_k=block_k)
    assert_same(exact, exact_grads, flash, flash_grads)
    assert torch.isfinite(flash).all() and all(torch.isfinite(g).all() for g in flash_grads)


def test_float32_and_extreme_scores():
    q, k, v = qkv(2, 2, q_len=33, k_len=40, dtype=torch.float32)
    assert_same(*exact_and_flash(q, k, v, block_q=8, block_k=16), rtol=1e-4, atol=1e-5)
    big = [(t.detach() * 30).requires_grad_() for t in (q, k)] + [v]  # scores in the thousands
    exact, exact_grads, flash, flash_grads = exact_and_flash(*big, block_q=8, block_k=16)
    assert torch.isfinite(flash).all() and all(torch.isfinite(g).all() for g in flash_grads)
    torch.testing.assert_close(flash, exact, rtol=1e-4, atol=1e-4)


def test_saves_only_inputs_output_and_one_log_sum_exp_per_row():
    q, k, v = qkv(2, 3, q_len=40, k_len=50)
    out = flash_attention(q, k, v, tl.causal_mask(50)[:40], block_q=8, block_k=8)
    saved = [tuple(t.shape) for t in out.grad_fn.saved_tensors]
    assert saved == [(2, 3, 40, 6), (2, 3, 50, 6), (2, 3, 50, 5), (2, 3, 40, 5), (2, 3, 40, 1),
                     (2, 3, 40, 50)]  # Q, K, V, O, L and the caller's mask, a broadcast view
    assert out.grad_fn.saved_tensors[-1].untyped_storage().nbytes() == 50 * 50  # no copy
    out = flash_attention(q, k, v, causal=True, block_q=8, block_k=8)
    saved = [tuple(t.shape) for t in out.grad_fn.saved_tensors if t is not None]
    assert max(s[-2] * s[-1] for s in saved) <= 50 * 6  # nothing of size T_q x T_k
    # the explicit path, by contrast, keeps its (.., T_q, T_k) weights for the backward pass
    exact = tl.scaled_dot_product_attention(q, k, v)[0]
    node, kept = exact.grad_fn, []
    while node is not None:
        kept += [getattr(node, n) for n in dir(node) if n.startswith("_saved_")]
        node = node.next_functions[0][0] if node.next_functions else None
    assert any(isinstance(t, torch.Tensor) and t.shape[-2:] == (40, 50) for t in kept)


def test_forward_plus_backward_memory_is_linear_in_length():
    peaks = {}
    for length in (256, 512, 1024):
        q, k, v = (torch.randn(1, 2, length, 8, requires_grad=True) for _ in range(3))
        with peak_tensor_memory() as mem:
            flash_attention(q, k, v, causal=True, block_q=64, block_k=64).sum().backward()
        peaks[length] = mem.peak
    first, second = peaks[512] - peaks[256], peaks[1024] - peaks[512]
    assert 1.8 * first <= second <= 2.2 * first  # a + b T: each doubling adds twice as much
    assert peaks[1024] < 2 * 1024 * 1024 * 4  # below a single (1, 2, T, T) float32 table


def test_rejects_bad_arguments():
    q, k, v = qkv(1, q_len=4, k_len=6)
    with pytest.raises(ValueError, match="block_q"):
        flash_attention(q, k, v, block_q=0)
    with pytest.raises(ValueError, match="block_k"):
        flash_attention(q, k, v, block_k=2.5)
    with pytest.raises(TypeError, match="causal"):
        flash_attention(q, k, v, causal=1)
    with pytest.raises(TypeError, match="one dtype"):
        flash_attention(q, k.float(), v)
    with pytest.raises(TypeError, match="mask"):
        flash_attention(q, k, v, torch.ones(4, 6))
    with pytest.raises(ValueError, match="mask"):
        flash_attention(q, k, v, torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="d_k"):
        flash_attention(q, k[..., :3], v)


def test_is_an_autograd_function_without_double_backward():
    q, k, v = qkv(1, q_len=3, k_len=3)
    out = flash_attention(q, k, v)
    assert type(out.grad_fn).__name__ == "FlashAttentionBackward"
    assert issubclass(FlashAttention, torch.autograd.Function)
    (gq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError):
        gq.sum().backward()  # once_differentiable: the backward pass is not differentiated
