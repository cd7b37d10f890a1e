"""Starting processes on this machine and joining them in one process group (chapter 17).
"""
from __future__ import annotations

import datetime
import os
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .._checks import check_positive_int

#: The only address the processes talk over: this machine's loopback interface.
HOST = "127.0.0.1"


class WorkerError(RuntimeError):
    """A worker raised or died. `pids` are the launched processes (all stopped by now), `port`
    the rendezvous port (released), `logs` what each rank printed, by rank."""

    def __init__(self, message: str, pids: list[int], port: int, logs: dict[int, str]):
        super().__init__(message)
        self.pids, self.port, self.logs = pids, port, logs


class WorkerTimeout(WorkerError, TimeoutError):
    """The workers did not finish within `timeout` seconds; they were stopped."""


def free_port(host: str = HOST) -> int:
    """A TCP port on `host` that nothing listens on now: bind port 0 and let the system pick.
    (Another program could take it before the workers do; rank 0 would then fail to bind it,
    and `launch` raises `WorkerError`.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _loopback_interface() -> str | None:
    """The name of the loopback network interface ('lo' on Linux, 'lo0' on macOS), if any."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):  # pragma: no cover - platforms without if_nameindex
        return None
    return next((n for n in names if n in ("lo", "lo0")), None)


def _check_worker(worker) -> None:
    if not callable(worker):
        raise TypeError(f"worker must be a function, got {type(worker).__name__}")
    module, qualname = getattr(worker, "__module__", None), getattr(worker, "__qualname__", "")
    if module in (None, "__main__") or "<" in qualname:
        raise TypeError(
            f"worker {qualname or worker!r} must be defined at the top level of an importable module "
            "(like transformer_lib.parallel): the new processes import it by name, and cannot see a "
            "function defined in a notebook, a script's __main__ or inside another function")


def launch(worker: Callable, *args, world_size: int = 2, timeout: float = 300.0, threads: int = 1,
           **kwargs) -> list:
    """Run `worker(*args, **kwargs)` in `world_size` new processes joined in one process group.

    Each process is started with `torch.multiprocessing` ("spawn": a fresh interpreter that
    imports `worker` by name), sets `threads` PyTorch threads, and joins the gloo process group
    through a store that rank 0 serves on 127.0.0.1 at a free port; gloo itself is told to use
    the loopback interface. Inside, `dist.get_rank()` and `dist.get_world_size()` say who is
    who; the environment variables that `torchrun` sets (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT) are set too. What a worker prints goes to a log file, not to the
    caller's output; it is attached to the error if a worker fails.

    Returns a list with each rank's return value, by rank. A return value must be made of
    tensors, numbers, strings, lists, tuples and dicts (it travels through `torch.save`).

    Raises `WorkerError` if a worker raises or dies, and `WorkerTimeout` (also a TimeoutError)
    if they have not all finished after `timeout` seconds. Either way every process has been
    stopped (terminated, then killed) and joined, and the port is free again, before it raises.
    """
    _check_worker(worker)
    check_positive_int("world_size", world_size)
    check_positive_int("threads", threads)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="transformer_lib-parallel-") as folder:
        context = mp.start_processes(
            _run_worker, args=(world_size, port, folder, worker, args, kwargs, threads, float(timeout)),
            nprocs=world_size, join=False, daemon=True, start_method="spawn")
        pids = [p.pid for p in context.processes]
        try:
            _wait(context, timeout, pids, port, folder)
        finally:
            _stop(context.processes)
        return [torch.load(Path(folder) / f"rank{r}.pt", weights_only=True) for r in range(world_size)]


def _wait(context, timeout: float, pids: list[int], port: int, folder: str) -> None:
    deadline = time.monotonic() + timeout
    n = len(pids)
    try:
        while not context.join(timeout=max(deadline - time.monotonic(), 0.01), grace_period=2.0):
            if time.monotonic() >= deadline:
                _stop(context.processes)
                raise WorkerTimeout(f"the {n} workers did not finish within {timeout} s; they were stopped"
                                    f"{_log_tail(folder, n)}", pids, port, _logs(folder, n))
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as err:  # a worker raised or died
        _stop(context.processes)
        raise WorkerError(_failure(folder, n, err), pids, port, _logs(folder, n)) from None
    finally:
        for path in getattr(context, "error_files", []):  # torch.multiprocessing's own traceback files
            if path and os.path.exists(path):
                os.remove(path)


def _failure(folder: str, world_size: int, err: Exception) -> str:
    """The error message: the rank that failed first and its traceback, then the others'."""
    failed = []
    for r in range(world_size):
        path = Path(folder) / f"rank{r}.error"
        if path.exists():
            when, _, trace = path.read_text(errors="replace").partition("\n")
            failed.append((float(when), r, trace))
    if not failed:  # it died without a Python exception (a signal, os._exit)
        return f"rank {err.error_index} died: {err}{_log_tail(folder, world_size)}"
    failed.sort()
    first = failed[0]
    lines = [f"rank {first[1]} failed first: {first[2].strip().splitlines()[-1]}"]
    lines += [f"\n--- rank {r} raised:\n{trace}" for _, r, trace in failed]
    return "".join(lines) + _log_tail(folder, world_size)


def _stop(processes) -> None:
    """Terminate, then kill, then join every process that is still alive."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 3.0
    for p in processes:
        p.join(max(deadline - time.monotonic(), 0.0))
        if p.is_alive():
            p.kill()
            p.join()


def _logs(folder: str, world_size: int) -> dict[int, str]:
    logs = {}
    for r in range(world_size):
        path = Path(folder) / f"rank{r}.log"
        logs[r] = path.read_text(errors="replace") if path.exists() else ""
    return logs


def _log_tail(folder: str, world_size: int, chars: int = 2000) -> str:
    tails = [f"\n--- rank {r} printed:\n{text[-chars:]}" for r, text in _logs(folder, world_size).items() if text.strip()]
    return "".join(tails)


def _run_worker(rank: int, world_size: int, port: int, folder: str, worker: Callable, args: tuple,
                kwargs: dict, threads: int, timeout: float) -> None:
    """The body of each launched process (rank given by torch.multiprocessing)."""
    log = open(Path(folder) / f"rank{rank}.log", "w")
    os.dup2(log.fileno(), 1)  # everything this process prints, Python or C++, goes to the log
    os.dup2(log.fileno(), 2)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR=HOST,
                      MASTER_PORT=str(port))
    loopback = _loopback_interface()
    if loopback:
        os.environ["GLOO_SOCKET_IFNAME"] = loopback
    torch.set_num_threads(threads)
    wait = datetime.timedelta(seconds=timeout)
    # Rank 0 serves the store on 127.0.0.1 only (left to itself, it would listen on every interface).
    listener = socket.create_server((HOST, port)) if rank == 0 and sys.platform.startswith("linux") else None
    store = dist.TCPStore(HOST, port, world_size, rank == 0, wait,
                          master_listen_fd=listener.fileno() if listener else None)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=wait)
    try:
        result = worker(*args, **kwargs)
        dist.barrier()
        torch.save(result, Path(folder) / f"rank{rank}.pt")
    except BaseException:  # noted with the time, so that the parent can tell which rank failed first
        (Path(folder) / f"rank{rank}.error").write_text(f"{time.time()}\n{traceback.format_exc()}")
        raise
    finally:
        dist.destroy_process_group()
        if listener is not None:
            listener.close()


def all_reduce_worker(x: torch.Tensor) -> dict:
    """Send row `rank` of x (one row per process) into an all-reduce (a sum) and return who this
    process is, what it sent and what it received."""
    rank = dist.get_rank()
    sent = x[rank].clone()
    received = sent.clone()
    dist.all_reduce(received)  # in place: every process ends with the sum of every process's tensor
    return {"rank": rank, "world_size": dist.get_world_size(), "backend": dist.get_backend(),
            "address": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", "sent": sent,
            "received": received}
