"""What the browser tests, the live explorer check and the benchmarks share: where Chromium is,
how it is started, the quiet local web server for the built site, and the Jupyter kernel that
runs this interpreter.

    python3 scripts/sitetools.py chromium    # prints the Chromium binary in use (.ci/run asks)

Chromium: the CHROMIUM environment variable, else Debian's package's binary. It is started
headless with the flags this machine needs (no sandbox as root, no GPU, no background traffic:
the network reaches only the package registries).
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import os
import sys
import threading
from pathlib import Path
from typing import Iterator

#: The one setting: export CHROMIUM=/path/to/chromium to use another binary.
CHROMIUM = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def launch_chromium(playwright):
    """Start headless Chromium through Playwright (never downloads a browser of its own)."""
    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(f"{CHROMIUM} is missing: apt-get install -y chromium, or set CHROMIUM")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # The browser dropping a connection it no longer needs (a page closed while a file was
        # still being sent) is not an error of the site; anything else is still printed.
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve `directory` on 127.0.0.1 (a free port) while the block runs; yields its base URL."""
    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def this_interpreter_kernels():
    """A KernelSpecManager whose every kernel runs sys.executable (the project's .venv), whatever
    kernelspecs the machine has installed."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    class ThisInterpreter(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                              display_name="Python 3 (ipykernel)", language="python")

    return ThisInterpreter()


if __name__ == "__main__":
    if sys.argv[1:] == ["chromium"]:
        print(CHROMIUM)
    else:
        sys.exit("usage: python3 scripts/sitetools.py chromium")
