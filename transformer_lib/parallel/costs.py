"""What each kind of parallelism sends per training step, computed from the model's sizes (the
picture of who holds what is `transformer_lib.book.parallel_layouts`).
"""
from __future__ import annotations

import torch

from ..model import Transformer, TransformerConfig


def communication_per_step(config: TransformerConfig, batch: int, src_len: int, tgt_len: int,
                           world_size: int = 2) -> dict[str, dict]:
    """Numbers each process sends per training step (forward and backward) with each kind of
    parallelism, for the encoder-decoder `config` on batches of `batch` pairs of `src_len` source
    and `tgt_len` decoder tokens, over `world_size` processes P. Ring algorithms: an
    all-reduce of n numbers sends 2 (P - 1) / P n of them per process, an all-gather or a
    reduce-scatter (P - 1) / P n (Li et al. 2020; Rajbhandari et al. 2020, section 7).

    - data parallel: the gradients, all-reduced: 2 (P-1)/P Psi for Psi parameters.
    - sharded (ZeRO-3 / FSDP): parameters all-gathered in the forward pass and again in the
      backward pass, gradients reduce-scattered: 3 (P-1)/P Psi.
    - tensor parallel (this module's layers): one all-reduce of a (batch, length, d_model)
      activation per sub-layer going forward (g) and one per distinct input going back (f):
      2 + 2 per encoder layer, 3 + 4 per decoder layer (cross-attention's f acts on the query
      and on the memory); the embeddings and output layer stay whole.
    - ring attention (sequence parallel, source and target both cut into P blocks): the key
      and value blocks, (P-1) times per attention layer going forward (cross-attention's are
      the source's), about twice that going back (the blocks travel again with their
      gradients), plus the gradient all-reduce of data parallelism, since every process holds
      every weight.

    Returns {kind: {"numbers": count, "what": description}}.
    """
    P, d = world_size, config.d_model
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        psi = sum(p.numel() for p in Transformer(config).parameters())
    ring = 2 * (P - 1) / P
    enc, dec = batch * src_len * d, batch * tgt_len * d  # one activation of each stack
    n_enc = n_dec = config.n_layers
    tp_all_reduces = n_enc * (2 + 2) * enc + n_dec * (3 * dec + 3 * dec + enc)
    kv_blocks = (P - 1) / P * 2 * (n_enc * enc + n_dec * (dec + enc))  # forward: K and V of every attention layer
    return {
        "data parallel": {"numbers": ring * psi, "what": "gradients, all-reduced once per step"},
        "sharded (FSDP)": {"numbers": 3 * (P - 1) / P * psi,
                           "what": "parameters all-gathered twice, gradients reduce-scattered"},
        "tensor parallel": {"numbers": ring * tp_all_reduces,
                            "what": "activations, all-reduced twice per sub-layer"},
        "ring attention": {"numbers": 3 * kv_blocks + ring * psi,
                           "what": "key/value blocks around the ring, plus the gradients"},
    }
