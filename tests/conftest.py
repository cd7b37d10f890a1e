import importlib.util
import os
import sys
from pathlib import Path

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


def boolean_masks(shape):
    """A Hypothesis strategy for boolean masks of `shape` (True = may attend), drawn entry by
    entry: a failing example shrinks to the smallest mask that fails, not to a random seed."""
    from math import prod

    from hypothesis import strategies as st

    n = prod(shape)
    return st.lists(st.booleans(), min_size=n, max_size=n).map(
        lambda bits: torch.tensor(bits, dtype=torch.bool).view(*shape))


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def study(request):
    """The script benchmarks/<BENCHMARK>.py (BENCHMARK: a name the test module sets), loaded as
    a module, with benchmarks/ on sys.path while the module's tests run (the scripts import
    their neighbours: seeds, run)."""
    name = request.module.BENCHMARK
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))
