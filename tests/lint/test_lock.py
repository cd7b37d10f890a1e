"""The locks are the environments (run by `make lint`, after `make env` has made .venv/).

- test_environment_is_the_lock: what `pip list` shows in this interpreter's environment is
  requirements.lock, package for package and version for version (for this platform's
  markers), plus torch at requirements.txt's pin (and, with PyPI's Linux build of torch, the
  CUDA libraries that build pins itself) and transformer_lib; `pip check` finds nothing broken.
- the locks agree with the top-level pins they were made from: every pin of requirements.txt
  in requirements.lock and in each unit-test lock, every pin of binder/requirements.in in
  Binder's lock (torch as its CPU build), Binder's lock with requirements.lock wherever both
  name a package;
- the hashed locks hash every package, no lock holds a CUDA-only package, and
  `make test-torch-versions` has a lock for the oldest torch pyproject.toml allows, the oldest
  for chapter 17 and one newer release.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import lock  # noqa: E402

UNIT_LOCKS = sorted(lock.LOCKS.glob("unit-torch-*.txt"))


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("+")[0].split("."))


def test_environment_is_the_lock():
    extra, missing, different = lock.environment_difference()
    problems = ([f"  installed, not in requirements.lock: {n}=={v}" for n, v in sorted(extra.items())]
                + [f"  in requirements.lock, not installed: {n}=={v}" for n, v in sorted(missing.items())]
                + [f"  {n}: installed {h}, locked {w}" for n, (h, w) in sorted(different.items())])
    assert not problems, "the environment is not the lock (run `make env`):\n" + "\n".join(problems)


def test_torch_is_the_pinned_release():
    import torch

    assert torch.__version__.split("+")[0] == lock.torch_pin()
    if torch.version.cuda is None:  # the CPU build needs none of the CUDA libraries
        cuda = [n for n in lock.installed() if lock.CUDA_ONLY.match(n)]
        assert not cuda, f"CUDA libraries installed beside the CPU build of torch: {cuda}"


def test_pip_check():
    result = subprocess.run([sys.executable, "-m", "pip", "check", "--disable-pip-version-check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, f"pip check:\n{result.stdout}{result.stderr}"


def test_lock_holds_the_top_level_pins():
    top = lock.pins(lock.TOP.read_text())
    locked = lock.pins_here(lock.LOCK.read_text(), lock.LINUX_311)
    differ = {n: (v, locked.get(n)) for n, v in top.items() if n != "torch" and locked.get(n) != v}
    assert not differ, f"requirements.txt and requirements.lock disagree (run `make lock`): {differ}"
    assert "torch" not in locked, "torch is installed apart from the hashed lock"


@pytest.mark.parametrize("path", UNIT_LOCKS, ids=[p.stem for p in UNIT_LOCKS])
def test_unit_locks_hold_the_top_level_pins(path):
    top = {n: v for n, v in lock.pins(lock.TOP.read_text()).items() if n not in lock.UNIT_SKIP}
    locked = lock.pins_here(path.read_text(), lock.LINUX_311)
    differ = {n: (v, locked.get(n)) for n, v in top.items() if locked.get(n) != v}
    assert not differ, f"requirements.txt and {path.name} disagree (run `make lock`): {differ}"
    heavy = set(locked) & (lock.UNIT_SKIP - {"uv"})
    assert not heavy, f"{path.name} installs what the unit tests do not need: {heavy}"


def test_binder_lock_holds_its_pins_and_agrees_with_the_book():
    binder = lock.pins(lock.BINDER_LOCK.read_text())
    wanted = lock.pins(lock.BINDER_IN.read_text())
    assert binder.get("torch") == wanted["torch"] + "+cpu", "Binder installs torch's CPU build"
    differ = {n: (v, binder.get(n)) for n, v in wanted.items() if n != "torch" and binder.get(n) != v}
    assert not differ, f"binder/requirements.in and its lock disagree (run `make lock`): {differ}"
    book = lock.pins_here(lock.LOCK.read_text(), lock.LINUX_311)  # Binder's platform
    differ = {n: (v, book[n]) for n, v in binder.items() if n in book and book[n] != v}
    assert not differ, f"Binder's lock and requirements.lock disagree (Binder, book): {differ}"
    assert wanted["torch"] == lock.torch_pin()


@pytest.mark.parametrize("path", [lock.LOCK, lock.BINDER_LOCK, *UNIT_LOCKS],
                         ids=["book", "binder", *[p.stem for p in UNIT_LOCKS]])
def test_locks_are_complete_and_written_by_make_lock(path):
    text = path.read_text()
    assert text.startswith("# Written by `make lock`"), f"{path.name} was not written by make lock"
    entries = [e for e in text.replace("\\\n", " ").splitlines() if e and e[0].isalnum()]
    assert entries, f"{path.name} pins nothing"
    unpinned = [e.split()[0] for e in entries if "==" not in e.split(";")[0]]
    assert not unpinned, f"{path.name}: not pinned with ==: {unpinned}"
    cuda = [n for n, _, _ in lock.marked_pins(text) if lock.CUDA_ONLY.match(n)]
    assert not cuda, f"{path.name} locks CUDA-only packages: {cuda}"
    if path != lock.BINDER_LOCK:
        unhashed = [e.split()[0] for e in entries if "--hash=sha256:" not in e]
        assert not unhashed, f"{path.name}: packages without hashes: {unhashed}"


def test_unit_locks_cover_the_torch_floors():
    versions = sorted((p.stem.removeprefix("unit-torch-") for p in UNIT_LOCKS), key=version_key)
    assert versions[0] == lock.torch_floor(), (
        f"the oldest unit-test lock is torch {versions[0]}, pyproject.toml allows "
        f"{lock.torch_floor()}")
    assert lock.TORCH_PARALLEL in versions
    assert version_key(versions[-1]) >= version_key(lock.torch_pin()), (
        "the newest unit-test lock should be at least the book's own torch")
    assert len(versions) == len({versions[0], lock.TORCH_PARALLEL, versions[-1]})
