"""The checks of the chapters' exercises, one module per chapter (`ch05`, `ch12`, ...).

A check takes the reader's answer (a function or a value), runs it on inputs it makes itself,
and returns a one-line verdict when the answer is right; when it is wrong it raises an
AssertionError whose message says what is wrong (not only that it is). Each check is tested in
`tests/book/test_exercises_chNN.py`: the reference solution passes, at least three plausible
wrong answers fail with their message, and at least one other right answer passes (float32 for
float64, a list for a tensor, an equivalent formula).
"""
