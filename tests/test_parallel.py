"""transformer_lib.parallel: processes joined through a file store, talking over 127.0.0.1
(gloo), bounded in time and cleaned up, and each kind of parallelism equal to the same
computation in one process.

One launch of two processes runs every equivalence check (`_all_checks`, a module-scoped
fixture); the other launches check ring attention on three processes and what happens when a
worker fails or hangs, or its launcher is killed. The worker functions live at the top level of
this module, so that the launched processes can import them by name (they get this process's
sys.path). On a torch older than `parallel.MIN_TORCH` the whole module is skipped,
with the reason the import gives.
"""
from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.data import date_vocabs, make_date_splits
from transformer_lib.positional import RotaryEmbedding
from transformer_lib.runtime import TorchTooOld

try:
    from transformer_lib import parallel
except TorchTooOld as too_old:  # chapter 17 needs a newer torch than the rest of the book
    pytest.skip(str(too_old), allow_module_level=True)

pytestmark = pytest.mark.slow  # launches processes (on Linux forked from a fork server)

STEPS, BATCH = 6, 16


# --------------------------------------------------------------------------- workers (run in the launched processes)


def _listening() -> list[str]:
    """The local addresses of the TCP sockets this process listens on (Linux: /proc/net/tcp and
    tcp6, matched to this process's open sockets by inode)."""
    mine = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    addresses = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in mine:  # 0A: LISTEN
                addresses.append(_address(local))
    return addresses


def _address(hex_address: str) -> str:
    """'0100007F:1F90' -> '127.0.0.1'; IPv6 '0000...0001:...' -> '::1' (the port is dropped)."""
    host = hex_address.split(":")[0]
    if len(host) == 8:
        return ".".join(str(int(host[i:i + 2], 16)) for i in (6, 4, 2, 0))
    words = [host[i:i + 8] for i in range(0, 32, 8)]
    import ipaddress

    return str(ipaddress.IPv6Address(bytes.fromhex("".join(w[6:8] + w[4:6] + w[2:4] + w[0:2] for w in words))))


def _report() -> dict:
    total = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(total)
    listening = _listening() if sys.platform.startswith("linux") else None
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "pid": os.getpid(),
            "addr": os.environ["MASTER_ADDR"], "sum": total.item(), "listening": listening}


def _all_checks(ddp_args: tuple, tp_args: tuple, ring_args: tuple) -> dict:
    return {**_report(), "ddp": parallel.data_parallel_worker(*ddp_args, timing_steps=1, timing_rounds=1),
            "fsdp": parallel.sharded_worker(*ddp_args),
            "tp": parallel.tensor_parallel_worker(*tp_args),
            "ring": parallel.ring_attention_worker(*ring_args, memory_lengths=(64, 128, 256), block_size=16),
            "ring_meta_default": _ring_with_the_default_device_elsewhere(*ring_args)}


def _ring_with_the_default_device_elsewhere(q, k, v) -> torch.Tensor:
    """ring_attention on CPU inputs while PyTorch's default device is `meta`: a tensor that it
    made without naming the input's device would land on `meta` and fail to mix with the rest."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mine = [t.chunk(world_size, dim=-2)[rank].contiguous() for t in (q, k, v)]
    torch.set_default_device("meta")
    try:
        return parallel.ring_attention(*mine, causal=True, block_size=16)
    finally:
        torch.set_default_device(None)


def _note_pid_then_sleep(folder: str, seconds: float) -> None:
    (Path(folder) / f"{dist.get_rank()}.parent").write_text(str(os.getppid()))  # the fork server, on Linux
    (Path(folder) / f"{dist.get_rank()}.pid").write_text(str(os.getpid()))
    time.sleep(seconds)


def _where_and_what() -> dict:
    parent = os.getppid()
    parent_maps = Path(f"/proc/{parent}/maps").read_text()  # the libraries the parent has loaded
    return {"pid": os.getpid(), "parent": parent, "parent_has_torch": "libtorch" in parent_maps,
            "mark": os.environ.get("TL_LAUNCH_MARK")}


def _rank_1_gives_up() -> dict:
    info = _report()
    if dist.get_rank() == 1:
        raise ValueError("rank 1 gives up")
    dist.barrier()  # rank 0 waits here for a rank that will never come
    return info


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


# --------------------------------------------------------------------------- helpers


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _date_setup():
    src_vocab, tgt_vocab = date_vocabs()
    config = dict(src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab), **tl.recipes.DATE_MODEL)
    torch.manual_seed(0)
    state = parallel.build_model(config, dtype=torch.float64).state_dict()
    pairs = tl.recipes.evenly_spaced(make_date_splits(seed=0).train, STEPS * BATCH)
    random.Random(0).shuffle(pairs)
    cfg = tl.recipes.recipe_config(max_steps=STEPS, warmup=STEPS, target_accuracy=None)
    return config, state, pairs, (src_vocab, tgt_vocab), cfg


def _layers_and_inputs():
    g = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    enc = tl.EncoderLayer(16, 4, 32, dropout=0.0).double()
    dec = tl.DecoderLayer(16, 4, 32, dropout=0.0).double()
    x, y = (torch.randn(3, n, 16, generator=g, dtype=torch.float64) for n in (7, 5))
    ids = torch.ones(3, 7, dtype=torch.long)
    ids[1, 4:] = 0
    src_mask, tgt_mask = tl.padding_mask(ids, 0), tl.causal_mask(5)
    # Grouped-query attention with rotary positions: 4 query heads, 2 key/value heads.
    gqa = tl.EncoderLayer(16, 4, 32, dropout=0.0).double()
    gqa.self_attn = tl.MultiHeadAttention(16, 4, n_kv_heads=2, rotary=RotaryEmbedding(4)).double()
    inputs = {"enc": (x, src_mask, torch.randn_like(x)), "dec": (y, x, tgt_mask, src_mask, torch.randn_like(y)),
              "gqa": (x, src_mask, torch.randn_like(x))}
    return {"enc": enc, "dec": dec, "gqa": gqa}, inputs


def _qkv(T: int, seed: int = 2):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 3, T, 8, generator=g, dtype=torch.float64) for _ in range(3))


@pytest.fixture(scope="module")
def checks():
    date = _date_setup()
    config, state, pairs, vocabs, cfg = date
    layers, inputs = _layers_and_inputs()
    started = time.monotonic()
    results = parallel.launch(_all_checks, (config, state, pairs, vocabs, cfg, BATCH), (layers, inputs), _qkv(40),
                              timeout=300)
    return {"results": results, "date": date, "layers": layers, "inputs": inputs, "seconds": time.monotonic() - started}


@pytest.fixture(scope="module")
def one_process(checks):
    """The date model trained in this process on the whole batches: the reference."""
    config, state, pairs, (src_vocab, tgt_vocab), cfg = checks["date"]
    model = parallel.build_model(config, state, torch.float64)
    tl.train(model, tl.vocab.make_loader(pairs, src_vocab, tgt_vocab, batch_size=BATCH, shuffle=False), None, cfg)
    return model


# --------------------------------------------------------------------------- launching


def test_launch_gives_each_rank_its_place_on_loopback(checks):
    results = checks["results"]
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world_size"] == 2 and r["addr"] == "127.0.0.1" and r["sum"] == 3.0 for r in results)
    assert len({r["pid"] for r in results}) == 2 and os.getpid() not in {r["pid"] for r in results}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the listening sockets from /proc (Linux)")
def test_nothing_a_worker_listens_on_is_reachable_from_another_machine(checks):
    # The rendezvous is a file: no store listens at all. gloo's own connections listen, on the
    # loopback interface only. (The address check can fail: see the test below.)
    for r in checks["results"]:
        assert r["listening"], "gloo listens for its peers: the list cannot be empty"
        assert all(a in ("127.0.0.1", "::1") for a in r["listening"]), r["listening"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the listening sockets from /proc (Linux)")
def test_the_listening_check_sees_a_socket_open_to_every_interface():
    import socket

    with socket.create_server(("0.0.0.0", 0)) as everyone, socket.create_server(("127.0.0.1", 0)):
        assert {"0.0.0.0", "127.0.0.1"} <= set(_listening()), everyone


def test_processes_are_gone_after_a_launch(checks):
    results = checks["results"]
    assert not any(_alive(r["pid"]) for r in results), "a worker process outlived launch()"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is used on Linux only")
def test_launches_on_linux_fork_workers_from_one_server_that_has_imported_torch(monkeypatch):
    from transformer_lib.parallel.launch import START_METHOD

    monkeypatch.delenv("TL_LAUNCH_MARK", raising=False)
    first = parallel.launch(_where_and_what)
    monkeypatch.setenv("TL_LAUNCH_MARK", "set after the server started")  # the launcher's environment counts
    second = parallel.launch(_where_and_what)
    assert [r["mark"] for r in first] == [None, None]
    assert [r["mark"] for r in second] == ["set after the server started"] * 2
    parents = {r["parent"] for r in first + second}
    assert START_METHOD == "forkserver"
    assert len(parents) == 1 and os.getpid() not in parents, "the workers were not forked by one fork server"
    assert len({r["pid"] for r in first + second}) == 4
    assert all(r["parent_has_torch"] for r in first + second), "the fork server had not imported torch"


def test_a_failing_worker_raises_and_everything_is_cleaned_up():
    started = time.monotonic()
    with pytest.raises(parallel.WorkerError, match="rank 1 gives up") as caught:
        parallel.launch(_rank_1_gives_up, timeout=120)
    assert time.monotonic() - started < 100, "the waiting rank was not stopped promptly"
    err = caught.value
    assert len(err.pids) == 2 and not any(_alive(pid) for pid in err.pids), "a worker survived the failure"


def test_a_hanging_worker_is_stopped_at_the_timeout():
    started = time.monotonic()
    with pytest.raises(parallel.WorkerTimeout) as caught:
        parallel.launch(_sleep, 600, timeout=4)
    elapsed = time.monotonic() - started
    assert isinstance(caught.value, TimeoutError)
    assert 4 <= elapsed < 30, f"launch returned after {elapsed:.1f} s"
    assert not any(_alive(pid) for pid in caught.value.pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server and pidfds are Linux's")
def test_workers_end_when_their_launcher_is_killed(tmp_path):
    # A script launches two sleeping workers and is killed by SIGKILL: no `finally` of it runs,
    # and without a guard its daemonic workers would sleep on for ten minutes. Their parent is
    # the fork server, which must end too once they have.
    code = ("import sys; sys.path[:0] = sys.argv[1:3]; import test_parallel as t; "
            "t.parallel.launch(t._note_pid_then_sleep, sys.argv[3], 600, timeout=900)")
    here = str(Path(__file__).resolve().parent)
    script = subprocess.Popen([sys.executable, "-c", code, here, str(Path(here).parent), str(tmp_path)])
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline and script.poll() is None:
            time.sleep(0.2)
        pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
        assert len(pids) == 2, "the workers did not start"
        assert all(_alive(pid) for pid in pids)
        servers = {int(p.read_text()) for p in tmp_path.glob("*.parent")}
        assert len(servers) == 1 and script.pid not in servers, "the workers were not forked by a fork server"
    finally:
        script.send_signal(signal.SIGKILL)
        script.wait()
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in pids), "a worker outlived its killed launcher"
    while any(_alive(pid) for pid in servers) and time.monotonic() < deadline + 10:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in servers), "the fork server outlived its killed launcher and workers"


def test_launch_checks_its_arguments():
    def local_worker():
        return 1

    with pytest.raises(TypeError, match="top level of an importable module"):
        parallel.launch(local_worker)
    with pytest.raises(TypeError, match="top level"):
        parallel.launch(lambda: 1)
    with pytest.raises(TypeError, match="worker must be a function"):
        parallel.launch(3)
    with pytest.raises(ValueError, match="world_size"):
        parallel.launch(_report, world_size=0)
    with pytest.raises(ValueError, match="timeout"):
        parallel.launch(_report, timeout=0)
    with pytest.raises(ValueError, match="backend"):
        parallel.launch(_report, backend="mpi")
    if torch.cuda.device_count() < 2:
        with pytest.raises(ValueError, match="needs a CUDA GPU per process"):
            parallel.launch(_report, backend="nccl")


# --------------------------------------------------------------------------- data parallel and sharded state


def test_ddp_trains_the_same_weights_as_one_process(checks, one_process):
    expected = one_process.state_dict()
    for r in checks["results"]:
        got = r["ddp"]["state"]
        assert set(got) == set(expected)
        worst = max((got[k] - expected[k]).abs().max().item() for k in expected)
        assert worst < 1e-9, f"rank {r['rank']}: DDP and one process differ by {worst:.2e}"
    a, b = (r["ddp"]["state"] for r in checks["results"])
    assert all(torch.equal(a[k], b[k]) for k in a), "the replicas drifted apart"
    assert checks["results"][0]["ddp"]["all_reduced"] == tl.count_parameters(one_process)
    moved = max((expected[k] - checks["date"][1][k]).abs().max().item() for k in expected)
    assert moved > 1e-3, "the weights hardly moved: the comparison would prove little"


def test_ddp_times_one_process_on_the_whole_batch_and_on_its_shard(checks):
    first, second = (r["ddp"] for r in checks["results"])
    for key in ("single_seconds_per_step", "shard_seconds_per_step", "seconds_per_step", "all_reduce_seconds"):
        assert first[key] > 0, key
    assert second["single_seconds_per_step"] is None and second["shard_seconds_per_step"] is None
    assert second["seconds_per_step"] > 0
    assert first["load"] is None or len(first["load"]) == 3


def test_fsdp_trains_the_same_weights_and_holds_half_the_state(checks, one_process):
    expected = one_process.state_dict()
    results = checks["results"]
    worst = max((results[0]["fsdp"]["state"][k] - expected[k]).abs().max().item() for k in expected)
    assert worst < 1e-9, f"FSDP and one process differ by {worst:.2e}"
    n_bytes = 8 * tl.count_parameters(one_process)  # float64
    sharded = [r["fsdp"]["bytes"]["sharded"] for r in results]
    replicated = [r["fsdp"]["bytes"]["replicated"] for r in results]
    assert all(b["parameters"] == b["gradients"] == n_bytes for b in replicated)
    assert sum(b["parameters"] for b in sharded) == n_bytes, "the shards do not add up to the model"
    assert sum(b["gradients"] for b in sharded) == n_bytes
    for s, rep in zip(sharded, replicated):
        assert 2 * n_bytes <= rep["optimizer"] < 2 * n_bytes + 1024  # Adam's two moments (+ step counters)
        assert s["optimizer"] < 0.6 * rep["optimizer"] and s["parameters"] < 0.6 * rep["parameters"]


# --------------------------------------------------------------------------- tensor parallel


def _reference(layer, args, grad_output):
    args = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    out = layer(*args)
    out.backward(grad_output)
    grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    layer.zero_grad(set_to_none=True)
    return out.detach(), [a.grad for a in args if a.is_floating_point()], grads


@pytest.mark.parametrize("name, forward, backward", [("enc", 2, 2), ("dec", 3, 4), ("gqa", 2, 2)])
def test_tensor_parallel_layer_equals_the_layer(checks, name, forward, backward):
    layer, (*args, grad_output) = checks["layers"][name], checks["inputs"][name]
    out, input_grads, grads = _reference(layer, args, grad_output)
    for rank, result in enumerate(r["tp"][name] for r in checks["results"]):
        torch.testing.assert_close(result["output"], out, rtol=0, atol=1e-12)
        for got, want in zip(result["input_grads"], input_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        mine = parallel.shard_like(parallel.tensor_parallel(layer, rank, 2), grads)
        assert set(result["grads"]) == set(mine)
        for n in mine:
            torch.testing.assert_close(result["grads"][n], mine[n], rtol=0, atol=1e-12, msg=n)
        assert (result["forward_all_reduces"], result["backward_all_reduces"]) == (forward, backward)


def test_pytorch_tensor_parallel_feed_forward_agrees(checks):
    layer, (x, *_) = checks["layers"]["enc"], checks["inputs"]["enc"]
    for r in checks["results"]:
        pt = r["tp"]["pytorch_ff"]
        torch.testing.assert_close(pt["output"], layer.ff(x).detach(), rtol=0, atol=1e-12)
        assert (pt["forward_all_reduces"], pt["backward_all_reduces"]) == (1, 1)


def test_each_process_holds_its_share_of_a_layer():
    layers, _ = _layers_and_inputs()
    for layer in layers.values():
        full = dict(layer.named_parameters())
        parts = [parallel.tensor_parallel(layer, r, 2) for r in range(2)]
        for part in parts:
            mine = parallel.shard_like(part, full)
            assert {n: p.shape for n, p in part.named_parameters()} == {n: t.shape for n, t in mine.items()}
            assert all(torch.equal(p, mine[n]) for n, p in part.named_parameters())
        w_q = torch.cat([p.self_attn.w_q.weight for p in parts])  # heads side by side: the whole W^Q
        w_o = torch.cat([p.self_attn.w_o.weight for p in parts], dim=1)
        torch.testing.assert_close(w_q, layer.self_attn.w_q.weight, rtol=0, atol=0)
        torch.testing.assert_close(w_o, layer.self_attn.w_o.weight, rtol=0, atol=0)
        assert parts[0].self_attn.n_heads == 2 and parts[1].self_attn.first_head == 2


@settings(max_examples=25)
@given(d_in=st.integers(1, 6), out_per=st.integers(1, 4), P=st.sampled_from([1, 2, 3, 4]), seed=st.integers(0, 99))
def test_column_then_row_parallel_is_the_two_layer_product(d_in, out_per, P, seed):
    """relu(X A) B = sum_r relu(X A_r) B_r: column-split A, row-split B (Megatron's MLP)."""
    g = torch.Generator().manual_seed(seed)
    a, b = torch.nn.Linear(d_in, out_per * P).double(), torch.nn.Linear(out_per * P, 3).double()
    x = torch.randn(5, d_in, generator=g, dtype=torch.float64)
    total = b.bias.detach().clone()
    for r in range(P):
        col, row = parallel.ColumnParallelLinear(a, r, P), parallel.RowParallelLinear(b, r, P)
        total = total + torch.nn.functional.linear(torch.relu(col(x)), row.weight)  # what g adds up
    torch.testing.assert_close(total, b(torch.relu(a(x))))


def test_tensor_parallel_checks_its_arguments():
    with pytest.raises(ValueError, match="out_features=5 must be divisible"):
        parallel.ColumnParallelLinear(torch.nn.Linear(4, 5), 0, 2)
    with pytest.raises(ValueError, match="in_features=5 must be divisible"):
        parallel.RowParallelLinear(torch.nn.Linear(5, 4), 0, 2)
    with pytest.raises(ValueError, match="rank must be an integer in"):
        parallel.ColumnParallelLinear(torch.nn.Linear(4, 4), 2, 2)
    with pytest.raises(ValueError, match="n_heads=4 must be divisible"):
        parallel.ParallelAttention(tl.MultiHeadAttention(12, 4), 0, 3)
    with pytest.raises(TypeError, match="EncoderLayer or DecoderLayer"):
        parallel.tensor_parallel(torch.nn.Linear(4, 4), 0, 2)
    with pytest.raises(ValueError, match="n_kv_heads=1 must be divisible"):
        parallel.ParallelAttention(tl.MultiHeadAttention(16, 4, n_kv_heads=1), 0, 2)


# --------------------------------------------------------------------------- ring attention


def _exact(q, k, v, causal):
    return tl.scaled_dot_product_attention(q, k, v, tl.causal_mask(q.shape[-2]) if causal else None)[0]


def test_ring_attention_equals_exact_attention(checks):
    q, k, v = _qkv(40)
    for key, causal in (("output", False), ("causal_output", True)):
        got = torch.cat([r["ring"][key] for r in checks["results"]], dim=-2)
        torch.testing.assert_close(got, _exact(q, k, v, causal), rtol=0, atol=1e-12)


def test_ring_attention_memory_per_process_grows_linearly(checks):
    for r in checks["results"]:
        peak = r["ring"]["peak_bytes"]
        assert list(peak) == [64, 128, 256]
        for T in (64, 128):
            assert 1.8 < peak[2 * T] / peak[T] < 2.2, f"doubling T from {T}: {peak}"


def test_ring_attention_on_three_processes():
    q, k, v = _qkv(30, seed=5)
    results = parallel.launch(parallel.ring_attention_worker, q, k, v, block_size=4, world_size=3, timeout=120)
    for key, causal in (("output", False), ("causal_output", True)):
        got = torch.cat([r[key] for r in results], dim=-2)
        torch.testing.assert_close(got, _exact(q, k, v, causal), rtol=0, atol=1e-12)


def test_ring_attention_makes_its_tensors_on_its_inputs_device(checks):
    for r in checks["results"]:  # run while the default device was `meta`: equal, so nothing went there
        assert r["ring_meta_default"].device.type == "cpu"
        torch.testing.assert_close(r["ring_meta_default"], r["ring"]["causal_output"], rtol=0, atol=0)


def test_ring_attention_checks_shapes_before_communicating():
    q = torch.zeros(1, 2, 4, 8)
    with pytest.raises(ValueError, match="same leading shape and length"):
        parallel.ring_attention(q, torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 5, 8))
    with pytest.raises(TypeError, match="floating-point"):
        parallel.ring_attention(q.long(), q, q)


def test_ring_attention_refuses_to_train_without_a_backward_pass():
    q = torch.zeros(1, 2, 4, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match="no backward pass"):
        parallel.ring_attention(q, q.detach(), q.detach())


def test_a_sequence_is_cut_into_equal_blocks_or_refused():
    x = torch.arange(2 * 12 * 3.0).view(2, 12, 3)
    blocks = [parallel.sequence_block(x, r, 3) for r in range(3)]
    assert all(b.shape == (2, 4, 3) for b in blocks) and torch.equal(torch.cat(blocks, dim=-2), x)
    with pytest.raises(ValueError, match="T=12 must be divisible by the number of processes 5"):
        parallel.sequence_block(x, 0, 5)


@settings(max_examples=40)
@given(q_len=st.integers(1, 6), cuts=st.lists(st.integers(1, 4), min_size=1, max_size=5),
       masked=st.floats(0, 1), seed=st.integers(0, 999))
def test_online_softmax_fold_over_any_blocks_is_the_softmax(q_len, cuts, masked, seed):
    """Folding keys in blocks of any sizes, with any keys masked (whole rows included), gives
    masked_softmax(scores) @ values: chapter 13's equation (2), as ring attention uses it."""
    g = torch.Generator().manual_seed(seed)
    k_len = sum(cuts)
    scores = 5 * torch.randn(2, q_len, k_len, generator=g, dtype=torch.float64)
    values = torch.randn(2, k_len, 3, generator=g, dtype=torch.float64)
    allowed = torch.rand(2, q_len, k_len, generator=g) >= masked
    m = torch.full((2, q_len, 1), float("-inf"), dtype=torch.float64)
    ell, o, start = torch.zeros_like(m), torch.zeros(2, q_len, 3, dtype=torch.float64), 0
    for size in cuts:
        block = scores[..., start:start + size].masked_fill(~allowed[..., start:start + size], float("-inf"))
        m, ell, o = parallel.online_softmax_fold(m, ell, o, block, values[:, start:start + size])
        start += size
    got = o / ell.masked_fill(ell == 0, 1.0)
    expected = tl.masks.masked_softmax(scores, allowed) @ values
    torch.testing.assert_close(got, expected)
    assert torch.isfinite(got).all()


# --------------------------------------------------------------------------- batches and communication


@settings(max_examples=25)
@given(n_batches=st.integers(1, 4), per_process=st.integers(1, 5), P=st.integers(1, 4))
def test_shards_of_a_global_batch_are_the_global_batch(n_batches, per_process, P):
    pairs = [(f"{i} janvier 2001", f"2001-01-{1 + i % 28:02d}") for i in range(n_batches * per_process * P)]
    src_vocab = tl.vocab.Vocab.from_texts(s for s, _ in pairs)
    tgt_vocab = tl.vocab.Vocab("-0123456789")
    global_batch = per_process * P
    whole = list(tl.vocab.make_loader(pairs, src_vocab, tgt_vocab, batch_size=global_batch, shuffle=False))
    shards = [list(parallel.shard_loader(pairs, src_vocab, tgt_vocab, global_batch, r, P)) for r in range(P)]
    assert all(len(s) == len(whole) == n_batches for s in shards)
    for i, (src, tgt) in enumerate(whole):
        rows = {tuple(row.tolist()) for row in tgt}
        shard_rows = [tuple(row.tolist()) for s in shards for row in s[i][1]]
        assert len(shard_rows) == global_batch and set(shard_rows) == rows


def test_shard_loader_checks_the_batch():
    src_vocab, tgt_vocab = tl.vocab.Vocab("12"), tl.vocab.Vocab("12")
    with pytest.raises(ValueError, match="global_batch=5 must be divisible"):
        parallel.shard_loader([("1", "2")] * 10, src_vocab, tgt_vocab, 5, 0, 2)


SMALL = tl.TransformerConfig(20, 15, d_model=16, n_heads=4, d_ff=32, n_layers=2)
SMALL_PARAMETERS = tl.count_parameters(tl.Transformer(SMALL))


@settings(max_examples=15)
@given(P=st.integers(1, 8), batch=st.integers(1, 64), src_len=st.integers(1, 40), tgt_len=st.integers(1, 20))
def test_communication_per_step(P, batch, src_len, tgt_len):
    config = SMALL
    cost = parallel.communication_per_step(config, batch, src_len, tgt_len, P)
    psi = SMALL_PARAMETERS
    assert cost["data parallel"]["numbers"] == pytest.approx(2 * (P - 1) / P * psi)
    assert cost["sharded (FSDP)"]["numbers"] == pytest.approx(1.5 * cost["data parallel"]["numbers"])
    assert cost["ring attention"]["numbers"] >= cost["data parallel"]["numbers"]
    double = parallel.communication_per_step(config, 2 * batch, src_len, tgt_len, P)
    assert double["tensor parallel"]["numbers"] == pytest.approx(2 * cost["tensor parallel"]["numbers"])
    assert double["data parallel"] == cost["data parallel"]
    if P == 1:
        assert all(c["numbers"] == 0 for c in cost.values())



def test_the_ring_cost_for_a_small_model_counted_by_hand():
    # P = 2, batch 3, 7 source and 5 target positions, d_model 16, 2 layers per stack. Going forward
    # each process sends the other one K and V block of every attention layer (half the K and V of
    # the whole sequence): encoder self-attention 2 x (3 x 7 x 16) / 2 = 336 numbers a layer,
    # decoder self-attention 2 x (3 x 5 x 16) / 2 = 240, cross-attention the source's 336. Going
    # back the blocks travel again with their gradients: 2 x that. Then the gradient all-reduce.
    forward = 2 * (336 + 240 + 336)
    expected = 3 * forward + 2 * (2 - 1) / 2 * SMALL_PARAMETERS
    cost = parallel.communication_per_step(SMALL, batch=3, src_len=7, tgt_len=5, world_size=2)
    assert cost["ring attention"]["numbers"] == expected


def test_the_tensor_parallel_cost_counts_the_all_reduces_measured(checks):
    """communication_per_step's tensor-parallel row: per layer, as many activation all-reduces
    as the processes made (the decoder's cross-attention reduces one of source length)."""
    tp = checks["results"][0]["tp"]
    enc_count = tp["enc"]["forward_all_reduces"] + tp["enc"]["backward_all_reduces"]
    dec_count = tp["dec"]["forward_all_reduces"] + tp["dec"]["backward_all_reduces"]
    config = dataclasses.replace(SMALL, n_layers=1)
    batch, src_len, tgt_len = 3, 7, 5
    enc, dec = batch * src_len * config.d_model, batch * tgt_len * config.d_model
    expected = enc_count * enc + (dec_count - 1) * dec + enc  # P = 2: ring factor 1
    cost = parallel.communication_per_step(config, batch, src_len, tgt_len, 2)
    assert cost["tensor parallel"]["numbers"] == expected
