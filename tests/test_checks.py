"""transformer_lib._checks: the shared argument checks and the one tensor-to-NumPy conversion."""
import numpy as np
import pytest
import torch

from transformer_lib._checks import as_numpy, check_tokens


def test_as_numpy_is_the_one_tensor_to_numpy_conversion():
    x = torch.tensor([[0.25, 1.0]], requires_grad=True)
    out = as_numpy("x", x * 2)
    assert out.dtype == np.float64 and out.tolist() == [[0.5, 2.0]]
    assert as_numpy("m", torch.tensor([True, False])).tolist() == [1.0, 0.0]
    assert as_numpy("a", np.arange(3)).dtype == np.float64
    with pytest.raises(TypeError, match="m must be a tensor or array, got list"):
        as_numpy("m", [1, 2])
    assert as_numpy("l", [[1, 2], [3, 4]], lists=True).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    with pytest.raises(TypeError, match="l must hold numbers"):
        as_numpy("l", ["x", "y"], lists=True)
    with pytest.raises(TypeError, match="a must hold numbers"):
        as_numpy("a", np.array(["x"]))


def test_check_tokens_names_the_argument():
    assert check_tokens("tokens", None) is None
    assert check_tokens("tokens", ("a", "b")) == ["a", "b"]
    with pytest.raises(TypeError, match="src_tokens must be a list of strings"):
        check_tokens("src_tokens", "ab")
    with pytest.raises(TypeError, match=r"tgt_tokens\[1\] must be a string, got int"):
        check_tokens("tgt_tokens", ["a", 3])
