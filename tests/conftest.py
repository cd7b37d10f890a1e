import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    yield


def to_torch_padding(mask_keep):
    """Our key padding (batch, 1, 1, S), True = real token -> PyTorch's (batch, S), True = pad."""
    return ~mask_keep[:, 0, 0, :]
