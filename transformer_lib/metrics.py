"""Metrics for sequence outputs: exact match (overall and by input length), character error
rate, and BLEU (via sacrebleu). Each takes strings: decode first (`decoding.translate`)."""
from __future__ import annotations

from typing import Sequence


def _check_pairs(predictions: Sequence[str], references: Sequence[str]) -> None:
    if isinstance(predictions, str) or isinstance(references, str):
        raise TypeError("predictions and references must be sequences of strings, not single strings")
    if len(predictions) != len(references):
        raise ValueError(f"predictions ({len(predictions)}) and references ({len(references)}) "
                         "must have the same length")
    if len(references) == 0:
        raise ValueError("references must not be empty")


def exact_match(predictions: Sequence[str], references: Sequence[str]) -> float:
    """The fraction of outputs equal to their reference, character for character."""
    _check_pairs(predictions, references)
    return sum(p == r for p, r in zip(predictions, references)) / len(references)


def accuracy_by_length(sources: Sequence[str], predictions: Sequence[str],
                       references: Sequence[str]) -> dict[int, float]:
    """Exact match grouped by the length of the source: ``{length: accuracy}``, sorted by length."""
    _check_pairs(predictions, references)
    if isinstance(sources, str) or len(sources) != len(references):
        raise ValueError(f"sources: expected a list of {len(references)} strings, one per reference")
    hits: dict[int, list[bool]] = {}
    for s, p, r in zip(sources, predictions, references):
        hits.setdefault(len(s), []).append(p == r)
    return {n: sum(h) / len(h) for n, h in sorted(hits.items())}


def edit_distance(a: Sequence, b: Sequence) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions turning a into b."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def character_error_rate(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Total edit distance divided by the total length of the references."""
    _check_pairs(predictions, references)
    total = sum(len(r) for r in references)
    return sum(edit_distance(p, r) for p, r in zip(predictions, references)) / max(total, 1)


def bleu(predictions: Sequence[str], references: Sequence[str], tokenize: str = "char") -> float:
    """Corpus BLEU (0-100) computed by sacrebleu, the standard implementation (Post 2018).

    tokenize="char" scores character n-grams, which suits short outputs such as dates;
    use "13a" for ordinary word-level BLEU on sentences."""
    _check_pairs(predictions, references)
    import sacrebleu

    return sacrebleu.corpus_bleu(list(predictions), [list(references)], tokenize=tokenize).score
