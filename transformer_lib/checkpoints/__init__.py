"""Checkpoints: the one file format of the book's models (`format`: `save`, `load`) and, in this
package's folder (`CHECKPOINTS`), the small trained models the chapters load, each with the
script, seed and command that made it (README.md).
"""
from .format import CHECKPOINTS, FORMAT, MODELS, load, save

__all__ = ["CHECKPOINTS", "FORMAT", "MODELS", "load", "save"]
