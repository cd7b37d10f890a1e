"""Blockwise attention, sliding-window masks and attention, Linformer projections, memory
counting, and the lazy import of the memory counter (the online-softmax exercise check is
in tests/book/test_exercises_ch13.py)."""
import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer_lib import efficient as ef
from transformer_lib.attention import scaled_dot_product_attention
from transformer_lib.masks import causal_mask, masked_softmax, padding_mask


def qkv(*lead, q_len=20, k_len=20, d_k=8, d_v=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = lambda n, d: (*lead, n, d)  # noqa: E731
    return (torch.randn(shape(q_len, d_k), generator=g, dtype=torch.float64),
            torch.randn(shape(k_len, d_k), generator=g, dtype=torch.float64),
            torch.randn(shape(k_len, d_v), generator=g, dtype=torch.float64))


@pytest.mark.parametrize("block_size", [1, 3, 7, 20, 64])
def test_blockwise_equals_exact_attention(block_size):
    q, k, v = qkv(2, 3, q_len=11, k_len=20)
    expected, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(ef.blockwise_attention(q, k, v, block_size=block_size), expected)


def test_blockwise_with_padding_causal_and_random_masks():
    q, k, v = qkv(2, 3)
    ids = torch.tensor([[5] * 20, [5] * 14 + [0] * 6])
    for mask in (padding_mask(ids, 0), causal_mask(20), padding_mask(ids, 0) & causal_mask(20),
                 torch.rand(2, 3, 20, 20, generator=torch.Generator().manual_seed(1)) > 0.5):
        expected, _ = scaled_dot_product_attention(q, k, v, mask)
        torch.testing.assert_close(ef.blockwise_attention(q, k, v, mask, block_size=6), expected)


def test_blockwise_fully_masked_row_gives_zeros_not_nan():
    q, k, v = qkv(1, 2, q_len=5, k_len=9)
    mask = torch.ones(1, 1, 5, 9, dtype=torch.bool)
    mask[..., 2, :] = False
    mask[..., 3, :5] = False  # row 3: its first block has no allowed key, its second has
    out = ef.blockwise_attention(q, k, v, mask, block_size=4)
    assert torch.isfinite(out).all()
    assert out[..., 2, :].abs().max() == 0
    # the library's one rule for masked rows, written out: masked_softmax(scores) @ V
    torch.testing.assert_close(out, masked_softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, mask) @ v)


def test_blockwise_extreme_scores_do_not_overflow():
    q, k, v = qkv(1, q_len=4, k_len=12)
    out = ef.blockwise_attention(q * 100, k * 100, v, block_size=5)  # scores in the thousands
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, scaled_dot_product_attention(q * 100, k * 100, v)[0])


def test_blockwise_keeps_memory_linear_in_length():
    peaks = []
    for length in (256, 512):
        q, k, v = (t.float() for t in qkv(1, 2, q_len=length, k_len=length, d_k=8, d_v=8))
        with ef.peak_tensor_memory() as mem:
            ef.blockwise_attention(q, k, v, block_size=64)
        peaks.append(mem.peak)
    assert peaks[1] <= 2.2 * peaks[0]
    assert peaks[1] < 2 * 512 * 512 * 4  # less than a single (batch, heads, T, T) float32 scores tensor


def test_blockwise_rejects_bad_input():
    q, k, v = qkv(1, q_len=4, k_len=6)
    with pytest.raises(ValueError, match="block_size"):
        ef.blockwise_attention(q, k, v, block_size=0)
    with pytest.raises(ValueError, match="mask"):
        ef.blockwise_attention(q, k, v, torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask"):
        ef.blockwise_attention(q, k, v, torch.ones(4, 6))
    with pytest.raises(ValueError, match="d_k"):
        ef.blockwise_attention(q, k[..., :3], v)


def test_sliding_window_mask_shape_and_pattern():
    mask = ef.sliding_window_mask(8, window=1, n_global=1)
    assert mask.shape == (8, 8) and mask.dtype == torch.bool
    expected = torch.tensor([
        [1, 1, 1, 1, 1, 1, 1, 1],
        [1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 0, 1, 1, 1, 0, 0, 0],
        [1, 0, 0, 1, 1, 1, 0, 0],
        [1, 0, 0, 0, 1, 1, 1, 0],
        [1, 0, 0, 0, 0, 1, 1, 1],
        [1, 0, 0, 0, 0, 0, 1, 1],
    ], dtype=torch.bool)
    assert torch.equal(mask, expected)
    plain = ef.sliding_window_mask(100, window=3)
    assert torch.equal(plain.sum(-1)[3:-3], torch.full((94,), 7))  # 2 window + 1 keys per row
    assert torch.equal(plain, plain.T)


def test_sliding_window_mask_rejects_bad_arguments():
    with pytest.raises(ValueError, match="window"):
        ef.sliding_window_mask(8, 0)
    with pytest.raises(ValueError, match="n_global"):
        ef.sliding_window_mask(8, 2, n_global=9)


@pytest.mark.parametrize("length, window, n_global", [(20, 3, 0), (20, 3, 2), (21, 4, 1), (5, 8, 1), (32, 8, 8)])
def test_sliding_window_attention_equals_masked_attention(length, window, n_global):
    q, k, v = qkv(2, 3, q_len=length, k_len=length)
    mask = ef.sliding_window_mask(length, window, n_global)
    expected, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(ef.sliding_window_attention(q, k, v, window, n_global), expected)


def test_sliding_window_attention_memory_is_linear():
    peaks = []
    for length in (512, 1024):
        q, k, v = (t.float() for t in qkv(1, 2, q_len=length, k_len=length, d_k=8, d_v=8))
        with ef.peak_tensor_memory() as mem:
            ef.sliding_window_attention(q, k, v, window=16, n_global=2)
        peaks.append(mem.peak)
    assert peaks[1] <= 2.2 * peaks[0]


def test_linformer_with_identity_projection_is_exact_and_shapes():
    q, k, v = qkv(2, 3, q_len=7, k_len=10)
    out, weights = ef.linformer_attention(q, k, v, torch.eye(10, dtype=torch.float64))
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v)[0])
    out, weights = ef.linformer_attention(q, k, v, ef.segment_mean_projection(10, 4, dtype=torch.float64))
    assert out.shape == (2, 3, 7, 6) and weights.shape == (2, 3, 7, 4)
    with pytest.raises(ValueError, match="proj_k"):
        ef.linformer_attention(q, k, v, torch.eye(9, dtype=torch.float64))


def test_projections():
    e = ef.segment_mean_projection(10, 4)
    assert e.shape == (4, 10)
    torch.testing.assert_close(e.sum(-1), torch.ones(4))
    assert torch.equal((e > 0).sum(-1), torch.tensor([3, 2, 3, 2]))
    r = ef.random_projection(1000, 50, generator=torch.Generator().manual_seed(0))
    assert r.shape == (50, 1000)
    assert abs(r.var().item() * 50 - 1) < 0.05
    with pytest.raises(ValueError, match="rank"):
        ef.segment_mean_projection(4, 5)


def test_peak_tensor_memory_counts_storages_once_and_frees():
    with ef.peak_tensor_memory() as mem:
        a = torch.zeros(1000)           # 4000 bytes
        b = a.view(10, 100)             # a view: no new bytes
        del a, b
        c = torch.ones(500, dtype=torch.float64)  # 4000 bytes, after the first is freed
    assert mem.peak == 4000
    assert mem.current == c.nbytes


def test_peak_tensor_memory_charges_nothing_for_views_of_tensors_made_before_the_block():
    a = torch.zeros(1000)  # 4000 bytes, made before the block
    with ef.peak_tensor_memory() as mem:
        b = a[:1]                       # slicing: a view
        c = a.view(10, 100).t()         # view, then transpose: views
        a.add_(1.0)                     # in place: no new storage
        d = a.unsqueeze(0).expand(3, 1000)  # views again
    assert mem.peak == 0 and mem.current == 0
    assert b.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    del b, c, d


def test_peak_tensor_memory_counts_a_copy_of_a_tensor_made_before_the_block():
    a = torch.zeros(1000)
    with ef.peak_tensor_memory() as mem:
        b = a[:10].clone()              # a new storage of 10 floats
        c = b.view(2, 5)                # a view of it: not counted twice
    assert mem.peak == 40 and mem.current == 40
    del b, c


def test_peak_tensor_memory_does_not_charge_flash_attention_for_its_inputs():
    # FlashAttention's forward pass slices its inputs; the slices must cost nothing, so that
    # what it keeps for the backward pass is O, L (and no copy of Q, K, V).
    from transformer_lib import flash

    q, k, v = (torch.randn(1, 2, 256, 8) for _ in range(3))
    with ef.peak_tensor_memory() as mem:
        out = flash.flash_attention(q, k, v, block_q=16, block_k=16)
    kept = out.nbytes + 4 * 1 * 2 * 256  # O and L (float32, one number per query row)
    # O, L, one input-sized temporary of the finiteness check, tiles and running sums; were
    # the slices of the inputs charged, the three inputs alone would be 3 x 16 KB
    assert kept <= mem.peak < 3 * q.nbytes


def test_peak_tensor_memory_lives_in_memory_and_is_imported_on_first_use():
    from transformer_lib import memory

    assert ef.peak_tensor_memory is memory.peak_tensor_memory
    code = "import sys, transformer_lib; print('transformer_lib.memory' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_memory_names_the_torch_version_when_the_private_api_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils._python_dispatch", None)  # as if removed
    monkeypatch.delitem(sys.modules, "transformer_lib.memory", raising=False)
    with pytest.raises(ImportError, match=re.escape(f"torch {torch.__version__}")):
        importlib.import_module("transformer_lib.memory")


def _private_torch_imports(path: Path) -> list[str]:
    """Module-level imports (outside functions and classes) of a private torch module: a
    dotted name under torch with a part starting with '_' (e.g. torch.utils._pytree)."""
    found = []

    def visit(statements):
        for node in statements:
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):  # if/try/with blocks
                    inner = getattr(node, field, None)
                    if isinstance(inner, list) and not isinstance(
                            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        visit(inner)
                continue
            found.extend(n for n in names if n.split(".")[0] == "torch"
                         and any(part.startswith("_") for part in n.split(".")[1:]))

    visit(ast.parse(path.read_text()).body)
    return found


def test_import_transformer_lib_imports_no_private_torch_module_of_ours():
    code = ("import sys, transformer_lib\n"
            "for name, m in sorted(sys.modules.items()):\n"
            "    if name.startswith('transformer_lib') and getattr(m, '__file__', None):\n"
            "        print(m.__file__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    files = [Path(line) for line in out.stdout.split()]
    assert any(f.name == "efficient.py" for f in files) and len(files) > 10
    offenders = {f.name: _private_torch_imports(f) for f in files}
    assert not any(offenders.values()), offenders
    # and the scan does see such an import where there is one
    assert _private_torch_imports(Path(ef.__file__).with_name("memory.py"))
