"""Starting processes on this machine and joining them in one process group (chapter 17).

The processes meet through a `torch.distributed.FileStore` in a private temporary folder: the
rendezvous is a file, so nothing listens on a network port for it, on any platform. The
collectives then run over gloo on the loopback interface (127.0.0.1), or over NCCL between GPUs.
"""
from __future__ import annotations

import datetime
import multiprocessing
import multiprocessing.connection
import os
import socket
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .._checks import check_choice, check_positive_int

#: The address gloo's connections use: this machine's loopback interface.
HOST = "127.0.0.1"
#: The backends `launch` knows: gloo (CPU tensors, and some CUDA ones) and NCCL (one GPU a process).
BACKENDS = ("gloo", "nccl")
#: What the fork server imports once, so that each worker it forks starts with them (Linux).
#: torch._dynamo too: torch imports it when a process builds or steps its first optimizer (a
#: second or more per worker otherwise).
PRELOAD = ["torch", "torch._dynamo", "torch.distributed", "transformer_lib", "transformer_lib.parallel"]
#: How `launch` starts its processes: forked from a fork server on Linux, fresh interpreters elsewhere.
START_METHOD = "forkserver" if sys.platform.startswith("linux") else "spawn"


class WorkerError(RuntimeError):
    """A worker raised or died. `pids` are the launched processes (all stopped by now), `logs`
    what each rank printed, by rank."""

    def __init__(self, message: str, pids: list[int], logs: dict[int, str]):
        super().__init__(message)
        self.pids, self.logs = pids, logs


class WorkerTimeout(WorkerError, TimeoutError):
    """The workers did not finish within `timeout` seconds; they were stopped."""


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
           backend: str = "gloo", **kwargs) -> list:
    """Run `worker(*args, **kwargs)` in `world_size` new processes joined in one process group.

    Each process is started with `torch.multiprocessing` and imports `worker` by name. On Linux
    it is forked from a fork server (`START_METHOD`, "forkserver"): a clean process that the
    first launch of this process starts, which imports torch and this package once (`PRELOAD`),
    so a later launch does not pay a second or two per process to import them again. What the
    server imported stays as it was then: an edit to this package, or a variable that torch
    reads as it is imported (ATEN_CPU_CAPABILITY, OMP_NUM_THREADS), reaches the workers only
    after a restart of the launching process (a new kernel); the rest of the environment, the
    working folder and sys.path are the launcher's at each launch. Elsewhere each process is a
    fresh interpreter ("spawn", Python's default on macOS, where forking a process that has
    loaded system frameworks is unsafe, and on Windows, which cannot fork). Each sets `threads`
    PyTorch threads, and joins the process group through a file store in a private temporary
    folder (no network port). gloo (the default) is told to use the loopback interface; NCCL
    (`backend="nccl"`) needs a CUDA GPU per process, and each process makes GPU `LOCAL_RANK` its
    current device. Inside, `dist.get_rank()` and `dist.get_world_size()` say who is who; the
    environment variables that `torchrun` sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR) are set
    too. What a worker prints goes to a log
    file, not to the caller's output; it is attached to the error if a worker fails. A worker
    whose launching process dies (killed, not only stopped) is ended too.

    Returns a list with each rank's return value, by rank. A return value must be made of
    tensors, numbers, strings, lists, tuples and dicts (it travels through `torch.save`).

    Raises `WorkerError` if a worker raises or dies, and `WorkerTimeout` (also a TimeoutError)
    if they have not all finished after `timeout` seconds. Either way every process has been
    stopped (terminated, then killed) and joined before it raises.
    """
    _check_worker(worker)
    check_positive_int("world_size", world_size)
    check_positive_int("threads", threads)
    check_choice("backend", backend, BACKENDS)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(f"backend='nccl' needs a CUDA GPU per process: world_size={world_size}, but this "
                         f"machine has {torch.cuda.device_count()}")
    with tempfile.TemporaryDirectory(prefix="transformer_lib-parallel-") as folder:
        if START_METHOD == "forkserver":  # takes effect when the fork server starts (the first launch)
            multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
        context = mp.start_processes(
            _run_worker, args=(world_size, folder, worker, args, kwargs, threads, float(timeout), backend, os.getpid(),
                               dict(os.environ)),
            nprocs=world_size, join=False, daemon=True, start_method=START_METHOD)
        pids = [p.pid for p in context.processes]
        try:
            _wait(context, timeout, pids, folder)
        finally:
            _stop(context.processes)
        return [torch.load(Path(folder) / f"rank{r}.pt", weights_only=True) for r in range(world_size)]


def _wait(context, timeout: float, pids: list[int], folder: str) -> None:
    deadline = time.monotonic() + timeout
    n = len(pids)
    try:
        while not context.join(timeout=max(deadline - time.monotonic(), 0.01), grace_period=2.0):
            if time.monotonic() >= deadline:
                _stop(context.processes)
                raise WorkerTimeout(f"the {n} workers did not finish within {timeout} s; they were stopped"
                                    f"{_log_tail(folder, n)}", pids, _logs(folder, n))
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as err:  # a worker raised or died
        _stop(context.processes)
        raise WorkerError(_failure(folder, n, err), pids, _logs(folder, n)) from None
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
    tails = [f"\n--- rank {r} printed:\n{text[-chars:]}"
             for r, text in _logs(folder, world_size).items() if text.strip()]
    return "".join(tails)


def _alive(pid: int) -> bool:
    """Is there a process `pid` (POSIX; used only where a pidfd is refused)?"""
    try:
        os.kill(pid, 0)  # signal 0: is there such a process (sends nothing)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - it exists, owned by someone else
        return True
    return True


def _end_with_launcher(launcher: int) -> None:
    """End this process when the process that launched it dies, even by SIGKILL (then no
    `finally` of the launcher runs). A daemon thread waits for the launcher to exit and then
    ends this process. Under the fork server (Linux) the parent is the server, which outlives a
    killed launcher while a worker holds its pipe, so the thread waits on a pidfd of the
    launcher, ready the moment it exits (where pidfds are refused, it checks every second).
    Under "spawn" the launcher is the parent, and it waits on multiprocessing's sentinel of
    the parent (a pipe the launcher holds; a process handle on Windows)."""
    handle = None
    if START_METHOD == "spawn":  # pragma: no cover - not Linux
        handle = multiprocessing.parent_process().sentinel
    else:
        try:
            handle = os.pidfd_open(launcher)
        except ProcessLookupError:  # it died before this process started watching
            os._exit(1)
        except (AttributeError, OSError):  # pragma: no cover - Linux before 5.3, or a sandbox without pidfds
            handle = None

    def watch() -> None:
        if handle is not None:
            multiprocessing.connection.wait([handle])  # ready once the launcher has exited
        else:  # pragma: no cover - no pidfd
            while _alive(launcher):
                time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="end-with-launcher").start()


def _run_worker(rank: int, world_size: int, folder: str, worker: Callable, args: tuple, kwargs: dict, threads: int,
                timeout: float, backend: str, launcher: int, environ: dict) -> None:
    """The body of each launched process (rank given by torch.multiprocessing)."""
    _end_with_launcher(launcher)
    os.environ.clear()  # the launcher's environment now, not the fork server's from its start
    os.environ.update(environ)
    log = open(Path(folder) / f"rank{rank}.log", "w")
    os.dup2(log.fileno(), 1)  # everything this process prints, Python or C++, goes to the log
    os.dup2(log.fileno(), 2)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR=HOST)
    loopback = _loopback_interface()
    if loopback:
        os.environ["GLOO_SOCKET_IFNAME"] = loopback
    if backend == "nccl":
        torch.cuda.set_device(rank)
    torch.set_num_threads(threads)
    wait = datetime.timedelta(seconds=timeout)
    store = dist.FileStore(str(Path(folder) / "rendezvous"), world_size)  # a file: no port to listen on
    store.set_timeout(wait)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=wait)
    try:
        result = worker(*args, **kwargs)
        dist.barrier()
        torch.save(result, Path(folder) / f"rank{rank}.pt")
    except BaseException:  # noted with the time, so that the parent can tell which rank failed first
        (Path(folder) / f"rank{rank}.error").write_text(f"{time.time()}\n{traceback.format_exc()}")
        raise
    finally:
        dist.destroy_process_group()


def worker_device(device: str | torch.device | None = None) -> torch.device:
    """The device a worker computes on: the CPU by default; for "cuda", GPU `LOCAL_RANK` (one GPU
    a process, as NCCL wants and as `torchrun` numbers them)."""
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def all_reduce_worker(x: torch.Tensor, device: str | torch.device | None = None) -> dict:
    """Send row `rank` of x (one row per process) into an all-reduce (a sum) and return who this
    process is, what it sent and what it received (on the CPU)."""
    rank = dist.get_rank()
    sent = x[rank].to(worker_device(device))
    received = sent.clone()
    dist.all_reduce(received)  # in place: every process ends with the sum of every process's tensor
    return {"rank": rank, "world_size": dist.get_world_size(), "backend": dist.get_backend(),
            "address": os.environ["MASTER_ADDR"], "sent": sent.cpu(), "received": received.cpu()}
