"""Export the book's trained models to ONNX, for the attention explorer in the reader's browser.

    python scripts/export_onnx.py              # export both models, then check each export
    python scripts/export_onnx.py --if-stale   # only those whose checkpoint or files changed (make book)
    python scripts/export_onnx.py --check      # exit 1 if any export is stale; writes nothing
    python scripts/export_onnx.py --train-lm   # first (re)train the character model, then export

What it exports (transformer_lib/book/explorer_browser.py describes the graphs):

- the date Transformer of chapters 11 and 12, transformer_lib/checkpoints/transformer_dates.pt,
  as an encoder graph and a decoder-step graph (next-token logits and every attention weight);
- the character language model of chapter 14, transformer_lib/checkpoints/char_lm.pt: the run
  chapter 14 trains the first steps of and then loads. `--train-lm` makes it with
  `transformer_lib.book.char_lm` (the chapter's config, texts, schedule and 1,000 steps; seed 0,
  one thread), recording what the chapter plots.

How: `torch.onnx.export` (the torch.export-based exporter) traces the library's own modules,
the same embeddings, attention and layers the chapters run, into a graph of ONNX operations;
small wrappers choose the inputs and outputs and build the masks as `masks.padding_mask` and
`masks.causal_mask` do. While tracing, the library's input checks that read tensor values
(finite numbers, ids inside the vocabulary) are switched off: a graph has no Python to raise
their errors, and the explorer's JavaScript checks the reader's text before it runs a model.

The check (written into each manifest): onnxruntime runs the exported files next to PyTorch.
Dates: all 3,652 test dates, the largest difference of the logits and attention weights of
one teacher-forced pass, and greedy answers, which must be equal. Character model: 64
windows of the corpus and 20 prompts' greedy continuations of 20 characters, likewise. The
script exits with status 1 if an answer differs or a logit differs by more than 1e-4.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib import _checks, lm
from transformer_lib.attention import record_attention
from transformer_lib.book import char_lm
from transformer_lib.book import explorer_browser as eb
from transformer_lib.data import make_date_splits
from transformer_lib.vocab import Vocab, collate

ROOT = Path(__file__).resolve().parent.parent
OUT = eb.MODELS_DIR
DATES_CKPT = tl.CHECKPOINTS / "transformer_dates.pt"
LM_CKPT = tl.CHECKPOINTS / "char_lm.pt"
OPSET = 20
TOLERANCE = 1e-4  # the largest logit difference the check accepts (float32)
MAX_OUT = 12  # greedy decoding's max_len for dates, as in chapter 12 (YYYY-MM-DD and <eos>)
LM_CONTINUE = 20  # characters the explorer's language model writes after a prompt
LM_MAX_PROMPT = 40  # the longest prompt the explorer accepts (the maps then hold 60 characters)
DATE_MAX_CHARS = 40  # the longest date the explorer accepts (the model's table holds 128)
LM_PROMPTS = ["The attention ", "A Transformer ", "The decoder reads", "Each head ", "In this chapter ",
              "The mask ", "We train the model ", "The softmax of ", "Positional encoding ", "The loss ",
              "Beam search ", "The encoder ", "Queries and keys ", "Every layer ", "The model writes ",
              "Greedy decoding ", "A language model ", "The gradient ", "Cross-attention ", "The first "]

# -- the character model: chapter 14's recipe (transformer_lib.book.char_lm) --------------------


def lm_data():
    """Chapter 14's data: the vocabulary of the corpus, the training ids and each measured
    text's windows (`char_lm.split`, `char_lm.every_window`; the later chapters last)."""
    text = lm.load_corpus()
    vocab = Vocab.from_texts([text])
    train_text, texts, _ = char_lm.split(text)
    windows = {name: char_lm.every_window(vocab, part) for name, part in texts.items()}
    return vocab, torch.tensor(vocab.encode(train_text)), windows


def train_lm(seed: int = 0) -> None:
    tl.runtime.setup(seed=seed, threads=1)
    vocab, train_ids, windows = lm_data()
    model = lm.CausalLM(lm.CausalLMConfig(vocab_size=len(vocab), **char_lm.CONFIG))
    start = time.perf_counter()
    history, curves = char_lm.train_measured(model, train_ids, windows, seed)
    record = {
        "command": "python scripts/export_onnx.py --train-lm", "seed": seed, "threads": 1,
        "recipe": "chapter 14: lm.CausalLM, random windows of 64 characters, batches of 32, 1,000 steps",
        "config": char_lm.CONFIG, "train": char_lm.RECIPE,
        "eval_step": history.eval_step, "later_chapters_loss": [round(v, 4) for v in history.eval_loss],
        # what chapter 14 plots, unrounded (the chapter compares its own steps with them):
        # each text's loss at step 0 and every eval_every steps, the training loss of every step
        "curves": curves, "loss": history.loss,
        "seconds": round(time.perf_counter() - start, 1), "torch": torch.__version__.split("+")[0],
    }
    tl.checkpoints.save(LM_CKPT, model, vocab, vocab, record)
    print(f"trained {LM_CKPT.relative_to(ROOT)}: later-chapters loss {history.eval_loss[-1]:.3f} nats per "
          f"character after {history.eval_step[-1]} steps ({record['seconds']} s)")


# -- the graphs ------------------------------------------------------------------------------------


class DateEncoder(nn.Module):
    """src (B, S) -> memory (B, S, d_model) and each encoder layer's self-attention (B, h, S, S)."""

    def __init__(self, model: tl.Transformer):
        super().__init__()
        self.model = model

    def forward(self, src):
        m = self.model
        src_mask = (src != eb.PAD_ID)[:, None, None, :]  # masks.padding_mask
        with record_attention(m.encoder) as weights:
            memory = m.encoder(m.src_embed(src), src_mask)
        return (memory, *weights.values())


class DateDecoderStep(nn.Module):
    """tgt (B, T), memory (B, S, d_model), src (B, S) -> next-token logits (B, V), then each
    decoder layer's self-attention (B, h, T, T), then each layer's cross-attention (B, h, T, S)."""

    def __init__(self, model: tl.Transformer):
        super().__init__()
        self.model = model

    def forward(self, tgt, memory, src):
        m = self.model
        pad = eb.PAD_ID
        src_mask = (src != pad)[:, None, None, :]
        t = tgt.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt.device).tril()  # masks.causal_mask
        tgt_mask = (tgt != pad)[:, None, None, :] & causal  # masks.target_mask
        with record_attention(m.decoder) as weights:
            h = m.decoder(m.tgt_embed(tgt), memory, tgt_mask, src_mask)
        own = [w for name, w in weights.items() if name.endswith("self_attn")]
        cross = [w for name, w in weights.items() if name.endswith("cross_attn")]
        return (m.out(h[:, -1]), *own, *cross)


class CharLM(nn.Module):
    """ids (B, T) -> logits (B, T, V) and each layer's causal self-attention (B, h, T, T):
    `lm.CausalLM.forward` without a cache."""

    def __init__(self, model: lm.CausalLM):
        super().__init__()
        self.model = model

    def forward(self, ids):
        m = self.model
        t = ids.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=ids.device).tril()
        with record_attention(m) as weights:
            h = m.embed(ids, 0)
            for layer in m.layers:
                h = layer(h, causal)
        return (m.out(m.norm(h)), *weights.values())


@contextlib.contextmanager
def value_checks_off():
    """Switch off the library's checks that read tensor values while a graph is traced."""
    names = ("check_finite", "check_token_ids")
    patched = []
    for module in [m for n, m in sys.modules.items() if n == "transformer_lib" or n.startswith("transformer_lib.")]:
        for name in names:
            if getattr(module, name, None) is getattr(_checks, name):
                patched.append((module, name))
    originals = {name: getattr(_checks, name) for name in names}
    for module, name in patched:
        setattr(module, name, lambda *args, **kwargs: None)
    try:
        yield
    finally:
        for module, name in patched:
            setattr(module, name, originals[name])


# The exporter logs a warning for each torchvision operator it cannot register (not installed).
logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)


def export(module: nn.Module, args: tuple, path: Path, inputs: list[str], outputs: list[str], dims: dict) -> None:
    module.eval()
    with value_checks_off(), torch.no_grad(), warnings.catch_warnings(), \
            contextlib.redirect_stdout(sys.stderr if "-v" in sys.argv else io.StringIO()):
        warnings.simplefilter("ignore")  # the exporter's notes (record_attention's attributes, torchvision)
        program = torch.onnx.export(module, args, input_names=inputs, output_names=outputs,
                                    dynamic_shapes=dims, dynamo=True, opset_version=OPSET, verbose=False)
    program.save(str(path))
    # Keep each node's "namespace" (the library module it comes from: a viewer such as Netron
    # shows it) and drop the exporter's other notes (stack traces, FX nodes: a third of the file).
    graph = onnx.load(str(path))
    for node in graph.graph.node:
        keep = [(p.key, p.value) for p in node.metadata_props if p.key == "namespace"]
        del node.metadata_props[:]
        for key, value in keep:
            entry = node.metadata_props.add()
            entry.key, entry.value = key, value
    del graph.graph.value_info[:]
    onnx.checker.check_model(graph)
    onnx.save(graph, str(path))


def names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}_{i}" for i in range(n)]


def export_dates() -> dict:
    model, src_vocab, tgt_vocab, record = tl.checkpoints.load(DATES_CKPT)
    c = model.config
    batch, src_len, tgt_len = (torch.export.Dim("batch", max=4096), torch.export.Dim("src_len", max=c.max_len),
                               torch.export.Dim("tgt_len", max=c.max_len))
    src, tgt = collate([("14 juillet 1989", "1989-07-14"), ("3/4/98", "1998-04-03")], src_vocab, tgt_vocab)
    enc_out = ["memory", *names("encoder_attention", c.n_layers)]
    step_out = ["logits", *names("decoder_attention", c.n_layers), *names("cross_attention", c.n_layers)]
    files = {"encoder": "transformer_dates.encoder.onnx", "decoder_step": "transformer_dates.decoder_step.onnx"}
    export(DateEncoder(model), (src,), OUT / files["encoder"], ["src"], enc_out, {"src": {0: batch, 1: src_len}})
    with torch.no_grad():
        memory = model.encode(src)
    export(DateDecoderStep(model), (tgt[:, :4], memory, src), OUT / files["decoder_step"], ["tgt", "memory", "src"],
           step_out, {"tgt": {0: batch, 1: tgt_len}, "memory": {0: batch, 1: src_len}, "src": {0: batch, 1: src_len}})
    return {
        "name": "transformer_dates", "kind": "encoder-decoder",
        "label": "the date Transformer of chapters 11 and 12",
        "about": ("The model in your browser is the one chapter 11 trained and this chapter loads "
                  "(transformer_dates.pt), exported to ONNX: a graph of the same operations with the same weights, "
                  "run by onnxruntime-web."),
        "checkpoint": {"path": DATES_CKPT.relative_to(ROOT).as_posix()},
        "files": {part: {"path": f} for part, f in files.items()},
        "inputs": {"encoder": ["src"], "decoder_step": ["tgt", "memory", "src"]},
        "outputs": {"encoder": enc_out, "decoder_step": step_out},
        "src_tokens": src_vocab.tokens, "tgt_tokens": tgt_vocab.tokens,
        "pad_id": eb.PAD_ID, "bos_id": eb.BOS_ID, "eos_id": eb.EOS_ID,
        "n_layers": c.n_layers, "n_heads": c.n_heads, "max_len": c.max_len,
        "max_chars": DATE_MAX_CHARS, "max_out": MAX_OUT,
        "placeholder": "type a date, e.g. 14 juillet 1989",
    }


def export_lm() -> dict:
    if not LM_CKPT.is_file():
        raise SystemExit(f"{LM_CKPT.relative_to(ROOT)} is missing: run `python scripts/export_onnx.py --train-lm`")
    model, vocab, _, record = tl.checkpoints.load(LM_CKPT)
    c = model.config
    ids = torch.tensor([vocab.encode("The attention "), vocab.encode("A Transformer ")])
    out = ["logits", *names("attention", c.n_layers)]
    path = "char_lm.onnx"
    export(CharLM(model), (ids,), OUT / path, ["ids"], out,
           {"ids": {0: torch.export.Dim("batch", max=4096), 1: torch.export.Dim("length", max=c.max_len)}})
    return {
        "name": "char_lm", "kind": "causal-lm",
        "label": "a character language model trained by chapter 14's recipe",
        "about": ("The model in your browser is the run this chapter loads after training its first steps "
                  "(this chapter's recipe: the same data, settings and 1,000 steps, by scripts/export_onnx.py "
                  "--train-lm), exported to ONNX: a graph of the same operations with the same weights, run by "
                  "onnxruntime-web. It continues your prompt greedily."),
        "checkpoint": {"path": LM_CKPT.relative_to(ROOT).as_posix()},
        "files": {"lm": {"path": path}},
        "inputs": {"lm": ["ids"]}, "outputs": {"lm": out},
        "tokens": vocab.tokens, "pad_id": eb.PAD_ID, "bos_id": eb.BOS_ID, "eos_id": eb.EOS_ID,
        "n_layers": c.n_layers, "n_heads": c.n_heads, "max_len": c.max_len,
        "max_chars": LM_MAX_PROMPT, "continue": LM_CONTINUE,
        "placeholder": "type the start of a sentence, e.g. The attention",
        "training": {k: record[k] for k in ("command", "seed", "eval_step", "later_chapters_loss") if k in record},
    }


# -- the check -------------------------------------------------------------------------------------


def max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


def check_dates() -> dict:
    model, src_vocab, tgt_vocab, _ = tl.checkpoints.load(DATES_CKPT)
    parts = eb.sessions("transformer_dates")
    test = make_date_splits(seed=0).test
    src, tgt = collate(test, src_vocab, tgt_vocab)
    tgt_in = tgt[:, :-1]
    with torch.no_grad(), record_attention(model) as weights:
        logits = model(src, tgt_in)
    enc = parts["encoder"].run(None, {"src": src.numpy()})
    memory = enc[0]
    n = model.config.n_layers
    enc_diff = max(max_diff(enc[1 + i], weights[f"encoder.layers.{i}.self_attn"]) for i in range(n))
    # the decoder step's logits at every prefix length of the teacher-forced targets
    logit_diff = attn_diff = 0.0
    for t in range(1, tgt_in.shape[1] + 1):
        step = parts["decoder_step"].run(None, {"tgt": tgt_in[:, :t].numpy(), "memory": memory, "src": src.numpy()})
        logit_diff = max(logit_diff, max_diff(step[0], logits[:, t - 1]))
    for i in range(n):  # the last step saw the whole target: its weights are the pass's
        attn_diff = max(attn_diff, max_diff(step[1 + i], weights[f"decoder.layers.{i}.self_attn"]),
                        max_diff(step[1 + n + i], weights[f"decoder.layers.{i}.cross_attn"]))
    ours = eb.greedy_dates(parts, src.numpy(), MAX_OUT)
    theirs = tl.decoding.greedy_decode(model, src, max_len=MAX_OUT).tokens.numpy()
    same = sum(tgt_vocab.decode(a.tolist()) == tgt_vocab.decode(b.tolist()) for a, b in zip(ours, theirs))
    return {"what": "all 3,652 test dates: one teacher-forced pass, and greedy decoding",
            "dates": len(test), "greedy_answers_equal": same,
            "max_logit_difference": float(f"{logit_diff:.2g}"),
            "max_attention_difference": float(f"{max(enc_diff, attn_diff):.2g}")}


def check_lm() -> dict:
    model, vocab, _, _ = tl.checkpoints.load(LM_CKPT)
    parts = eb.sessions("char_lm")
    _, _, windows = lm_data()
    x = windows["later chapters"][0][0]  # 64 windows of 64 characters of the later chapters
    with torch.no_grad(), record_attention(model) as weights:
        logits = model(x)
    out = parts["lm"].run(None, {"ids": x.numpy()})
    logit_diff = max_diff(out[0], logits)
    attn_diff = max(max_diff(out[1 + i], weights[f"layers.{i}.self_attn"]) for i in range(model.config.n_layers))
    same = 0
    for prompt in LM_PROMPTS:
        ids = torch.tensor([vocab.encode(prompt)])
        theirs = lm.generate(model, ids, LM_CONTINUE)[0].tolist()
        ours = eb.greedy_lm(parts, ids.numpy(), LM_CONTINUE)[0].tolist()
        same += ours == theirs
    return {"what": "64 windows of 64 characters of the later chapters, and 20 prompts continued greedily",
            "windows": int(x.shape[0]), "prompts": len(LM_PROMPTS), "greedy_continuations_equal": same,
            "max_logit_difference": float(f"{logit_diff:.2g}"), "max_attention_difference": float(f"{attn_diff:.2g}")}


def finish(m: dict, check) -> bool:
    """Hash the files, write the manifest, run the check, write it into the manifest."""
    import onnxruntime

    m = {"format": 1, **m}
    m["checkpoint"]["sha256"] = eb.sha256(ROOT / m["checkpoint"]["path"])
    for f in m["files"].values():
        f["bytes"] = (OUT / f["path"]).stat().st_size
        f["sha256"] = eb.sha256(OUT / f["path"])
    m["export"] = {"command": "python scripts/export_onnx.py", "exporter": "torch.onnx.export(..., dynamo=True)",
                   "torch": torch.__version__.split("+")[0], "opset": OPSET}
    path = OUT / f"{m['name']}.json"
    path.write_text(json.dumps(m, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    result = check()
    result["onnxruntime"] = onnxruntime.__version__
    m["check"] = result
    path.write_text(json.dumps(m, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    size = sum(f["bytes"] for f in m["files"].values())
    print(f"{m['name']}: {', '.join(f['path'] for f in m['files'].values())} ({size / 1e6:.2f} MB); check: {result}")
    equal = result.get("greedy_answers_equal", result.get("greedy_continuations_equal"))
    wanted = result.get("dates", result.get("prompts"))
    return equal == wanted and result["max_logit_difference"] <= TOLERANCE


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="report stale exports and exit 1 if any; write nothing")
    ap.add_argument("--if-stale", action="store_true", help="export only the models whose files are stale")
    ap.add_argument("--train-lm", action="store_true", help=f"train {LM_CKPT.name} with chapter 14's recipe first")
    ap.add_argument("-v", action="store_true", help="show the exporter's own output")
    args = ap.parse_args(argv)
    problems = {name: eb.stale(name, ROOT) for name in eb.MODELS}
    if args.check:
        for name, lines in problems.items():
            print(f"{name}: " + ("; ".join(lines) if lines else "up to date"))
        return 1 if any(problems.values()) else 0
    if args.train_lm:
        train_lm()
        problems["char_lm"] = ["retrained"]
    todo = [name for name in eb.MODELS if problems[name] or not args.if_stale]
    if not todo:
        print("the exported models are up to date")
        return 0
    tl.runtime.setup(seed=0, threads=1)
    OUT.mkdir(parents=True, exist_ok=True)
    ok = True
    for name in todo:
        start = time.perf_counter()
        ok &= finish(export_dates(), check_dates) if name == "transformer_dates" else finish(export_lm(), check_lm)
        print(f"  ({time.perf_counter() - start:.0f} s)")
    if not ok:
        print(f"error: an export differs from PyTorch (greedy answers, or logits by more than {TOLERANCE})",
              file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
