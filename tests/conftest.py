import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# Property tests (tests/test_properties.py): no per-example deadline (the first example pays
# for PyTorch's warm-up, and a busy machine is slow), nothing written to a .hypothesis/ folder
# in the checkout, and under CI=true the same examples on every run (a failure in CI is then
# reproduced by running the test again). Each test bounds its own number of examples;
# HYPOTHESIS_EXAMPLES_SCALE=20 multiplies them to hunt for a counter-example by hand.
# The autouse fixture below only seeds and fixes the thread count, so running it once per
# test rather than once per example is fine.
_common = dict(deadline=None, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("dev", **_common)
settings.register_profile("ci", derandomize=True, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE",
                                     "ci" if os.environ.get("CI", "").lower() in ("1", "true") else "dev"))


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    yield


def to_torch_padding(mask_keep):
    """Our key padding (batch, 1, 1, S), True = real token -> PyTorch's (batch, S), True = pad."""
    return ~mask_keep[:, 0, 0, :]


def pytest_configure(config):
    # `pytest -m "not slow"` runs the fast unit tests in well under a minute.
    config.addinivalue_line("markers", "slow: takes seconds to minutes (training runs, launched processes)")
