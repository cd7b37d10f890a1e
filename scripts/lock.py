"""The locked environments: every package of every environment the project makes, pinned.

    python scripts/lock.py              # `make lock`: write every lock from the top-level pins
    python scripts/lock.py extras       # packages in this interpreter's environment that its
                                        # lock does not list (`make env` removes them)
    python scripts/lock.py floor        # the oldest torch pyproject.toml allows (X.Y.Z)

Top-level pins (edited by hand)      lock (written here, never by hand)
-------------------------------      -----------------------------------------------------------
requirements.txt                     requirements.lock: the book, its notebooks and its tests
binder/requirements.in               binder/requirements.txt: Binder (mybinder.org) installs it
requirements.txt, less the site,     locks/unit-torch-X.txt for each torch the unit tests run
browser and lab tools                under (`make test-torch-versions`): the oldest release
                                     pyproject.toml allows, the oldest for chapter 17's
                                     parallel code, and the newest on the package index

The tool is uv's `uv pip compile` (pinned in requirements.txt): it resolves the whole tree in
seconds, writes every transitive package with `==`, hashes of every file of each release
(`--generate-hashes`), and, with `--universal`, one lock for Linux, macOS and Windows (a
package needed on one of them carries its environment marker). pip-tools' pip-compile would do
the same through pip, one platform at a time and much more slowly.

torch itself is not in the hashed locks. Which build of torch==2.13.0 a machine gets depends on
where pip finds it: this project's machines have the CPU build on disk (pip's find-links),
PyTorch's CPU index serves another file of the same version (`make env TORCH=cpu`), and PyPI
serves the CUDA build on Linux and CPU builds on macOS and Windows. Their hashes differ, and pip
checks hashes for all of a file's requirements or for none, so `make env` installs the hashed
lock first (`--require-hashes --no-deps`), then `torch==2.13.0` from requirements.txt. The lock
holds torch's own dependencies (sympy, networkx, jinja2, ...), resolved from its metadata, but
not the CUDA libraries that only PyPI's Linux build needs (nvidia-*, cuda-*, triton): that
build pins each of them exactly itself, and the CPU build does not use them.

Binder's lock has no hashes: its torch is the CPU build from PyTorch's own index, whose files
this machine cannot reach to hash, and pip takes hashes for all or none.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
TOP = ROOT / "requirements.txt"
BINDER_IN = ROOT / "binder" / "requirements.in"
BINDER_LOCK = ROOT / "binder" / "requirements.txt"
LOCKS = ROOT / "locks"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYTHON = "3.11"
#: The oldest torch for chapter 17's parallel code (transformer_lib.parallel).
TORCH_PARALLEL = "2.10.0"
#: Packages the unit tests do not need: the site, the browser, JupyterLab, and torch (each
#: unit-test environment installs its own).
UNIT_SKIP = {"torch", "jupyter-book", "sphinx", "sphinx-book-theme", "myst-nb", "myst-parser",
             "linkify-it-py", "playwright", "jupyterlab", "uv"}
#: Distributions only PyPI's CUDA build of torch needs (left out of every lock, see above).
CUDA_ONLY = re.compile(r"^(nvidia-[\w-]+|cuda-[\w-]+|triton|pytorch-triton[\w-]*)$")
#: Installed by venv itself, never locked.
BOOTSTRAP = {"pip", "setuptools", "wheel", "distribute"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """name -> version of every `name==version` line (environment markers and hashes aside)."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if m:
            found[canonical(m.group(1))] = m.group(3)
    return found


def marked_pins(text: str) -> list[tuple[str, str, str | None]]:
    """(name, version, marker or None) for every pinned line of a lock."""
    found = []
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)\s*(?:;\s*([^\\#]+))?",
                     line)
        if m:
            found.append((canonical(m.group(1)), m.group(2), (m.group(3) or "").strip() or None))
    return found


#: Binder's platform, and this project's machines': Linux on x86_64, CPython 3.11.
LINUX_311 = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux",
             "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
             "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def pins_here(text: str, environment: dict | None = None) -> dict[str, str]:
    """The pins of a universal lock that apply to this interpreter and platform (or to
    `environment`, a dict of marker variables)."""
    from packaging.markers import Marker  # in the lock

    return {name: version for name, version, marker in marked_pins(text)
            if marker is None or Marker(marker).evaluate(environment)}


def torch_pin() -> str:
    version = pins(TOP.read_text()).get("torch")
    if not version:
        sys.exit("requirements.txt must pin torch exactly (torch==X.Y.Z)")
    return version


def torch_floor() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        m = re.fullmatch(r"torch>=([\d.]+)", dep.replace(" ", ""))
        if m:
            version = m.group(1)
            return version if version.count(".") == 2 else version + ".0"
    sys.exit("pyproject.toml has no torch>=X.Y.Z dependency")


def newest_torch() -> str:
    """The newest torch release on the package index (local builds such as +cpu aside)."""
    env = dict(os.environ, PIP_CONSTRAINT="/dev/null")  # lift a machine-wide cap on torch
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch"],
                         capture_output=True, text=True, env=env, check=True).stdout
    versions = re.search(r"Available versions:\s*(.*)", out).group(1).split(", ")
    return next(v for v in versions if "+" not in v and re.fullmatch(r"[\d.]+", v))


def uv() -> list[str]:
    exe = Path(sys.executable).with_name("uv")
    return [str(exe) if exe.exists() else "uv"]


def compile_lock(top_level: list[str], out: Path, header: str, *, hashes: bool,
                 universal: bool = True) -> None:
    """Resolve `top_level` (requirement lines) with uv and write the lock `out`, torch and the
    CUDA-only packages left out, with `header` as its opening comment."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "requirements.in"
        source.write_text("\n".join(top_level) + "\n")
        raw = Path(tmp) / "lock.txt"
        command = uv() + ["pip", "compile", str(source), "-o", str(raw), "--quiet",
                          "--python-version", PYTHON, "--no-header", "--no-annotate",
                          "--no-emit-package", "torch"]
        command += ["--universal"] if universal else ["--python-platform", "x86_64-manylinux_2_28"]
        if hashes:
            command.append("--generate-hashes")
        subprocess.run(command, check=True, cwd=ROOT)
        kept, skipping = [], False
        for line in raw.read_text().splitlines():
            if line and not line[0].isspace():
                name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
                skipping = bool(name and CUDA_ONLY.match(canonical(name.group(0))))
            if not skipping:
                kept.append(line)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header.rstrip("\n") + "\n" + "\n".join(kept).strip("\n") + "\n")
    print(f"wrote {out.relative_to(ROOT)} ({len(pins(out.read_text()))} packages)")


def requirement_lines(path: Path, skip: set[str] = frozenset()) -> list[str]:
    lines = []
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        name = canonical(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line).group(0))
        if name not in skip:
            lines.append(line)
    return lines


GENERATED = "# Written by `make lock` (scripts/lock.py) from {source}: do not edit by hand.\n"


def lock_all() -> None:
    torch = torch_pin()
    top = requirement_lines(TOP)
    compile_lock(top, LOCK, GENERATED.format(source="requirements.txt") + (
        f"# Every package of the book's environment, with hashes, for Python {PYTHON} on any\n"
        f"# platform. torch=={torch} and, with PyPI's Linux build, its CUDA libraries are\n"
        "# installed apart (see scripts/lock.py); `make env` installs this file, then torch.\n"),
        hashes=True)

    binder = requirement_lines(BINDER_IN, skip={"torch"})
    compile_lock(binder + [f"torch=={torch}"], BINDER_LOCK,
                 GENERATED.format(source="binder/requirements.in") + (
                     "# Binder's environment (Linux, Python 3.11): torch's CPU build from\n"
                     "# PyTorch's own index (a few hundred MB, where PyPI's Linux build brings\n"
                     "# several GB of CUDA libraries). No hashes: see scripts/lock.py.\n"
                     f"--extra-index-url {CPU_INDEX}\n"
                     f"torch=={torch}+cpu\n"),
                 hashes=False, universal=False)

    unit = requirement_lines(TOP, skip=UNIT_SKIP)
    wanted = {torch_floor(), TORCH_PARALLEL, newest_torch()}
    for old in LOCKS.glob("unit-torch-*.txt"):
        if old.stem.removeprefix("unit-torch-") not in wanted:
            old.unlink()
    for version in sorted(wanted, key=lambda v: tuple(int(x) for x in v.split("."))):
        compile_lock(unit + [f"torch=={version}"], LOCKS / f"unit-torch-{version}.txt",
                     GENERATED.format(source="requirements.txt") + (
                         f"# The unit tests' environment under torch {version} (make\n"
                         "# test-torch-versions): requirements.txt less torch and the site,\n"
                         "# browser and lab tools, with torch's own dependencies for this\n"
                         "# release. torch itself is installed apart (see scripts/lock.py).\n"),
                     hashes=True)


def installed() -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "pip", "list", "--format=freeze",
                          "--disable-pip-version-check"], capture_output=True, text=True,
                         check=True).stdout
    return pins(out)


def torch_family(name: str) -> bool:
    return name == "torch" or bool(CUDA_ONLY.match(name))


def environment_difference(lock: Path = LOCK) -> tuple[dict, dict, dict]:
    """(extra, missing, different) between this environment and its lock: packages installed
    but not locked, locked but not installed, and installed at another version. torch, the
    CUDA libraries of its Linux build, the project itself and venv's own tools are apart."""
    want = pins_here(lock.read_text())
    have = {n: v for n, v in installed().items()
            if not torch_family(n) and n not in BOOTSTRAP and n != "transformer-lib"}
    want = {n: v for n, v in want.items() if n not in BOOTSTRAP}
    extra = {n: v for n, v in have.items() if n not in want}
    missing = {n: v for n, v in want.items() if n not in have}
    different = {n: (have[n], want[n]) for n in have.keys() & want.keys() if have[n] != want[n]}
    return extra, missing, different


def main(argv: list[str]) -> int:
    if argv == ["floor"]:
        print(torch_floor())
        return 0
    if argv == ["extras"]:
        extra, _, _ = environment_difference()
        print("\n".join(sorted(extra)))
        return 0
    if argv:
        sys.exit(__doc__.split("\n\n")[1])
    lock_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
