"""The seed lists the benchmark scripts take on their command lines: "0-4", "0,3,7-9"."""
from __future__ import annotations


def parse_seeds(text: str) -> list[int]:
    """"0-4" -> [0, 1, 2, 3, 4]; "0,3,7-9" -> [0, 3, 7, 8, 9]."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds
