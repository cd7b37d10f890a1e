"""Chapter 15's exercise checks: the reader's mask test (exercise 1) and cache test (exercise
2). The solutions and other right tests pass; tests that are too weak or too strict, among
them every one the reviews name, fail with a message that says what is wrong."""
import copy

import pytest
import torch

import transformer_lib as tl
from transformer_lib.attention import use_attention
from transformer_lib.book import bughunt as bh
from transformer_lib.book.exercises import ch15


# --- exercise 1: a test of the attention rule alone --------------------------------------

def _future_changed(attention_fn, query, key, compare=slice(0, 1), atol=None):
    T = query.shape[-2]
    value = torch.randn(1, 1, T, query.shape[-1], generator=torch.Generator().manual_seed(0))
    changed = value.clone()
    changed[..., 1:, :] += 1.0  # the future of position 0
    mask = tl.causal_mask(T)
    before = attention_fn(query, key, value, mask)[0][..., compare, :]
    after = attention_fn(query, key, changed, mask)[0][..., compare, :]
    return torch.allclose(before, after) if atol is None else torch.allclose(before, after, atol=atol)


def mask_solution(attention_fn):
    query = torch.full((1, 1, 4, 8), 100.0)
    return _future_changed(attention_fn, query, -query)


def mask_keys_large_queries_negative(attention_fn):
    """Right, the other way round: negative queries, positive keys, and torch.equal."""
    query = torch.full((1, 1, 6, 8), -50.0)
    key = torch.full((1, 1, 6, 8), 200.0)
    value = torch.randn(1, 1, 6, 8)
    changed = value.clone()
    changed[..., 3:, :] = 0.0  # the future of positions 0-2
    mask = tl.causal_mask(6)
    before = attention_fn(query, key, value, mask)[0][..., :3, :]
    after = attention_fn(query, key, changed, mask)[0][..., :3, :]
    return bool((before == after).all())


def mask_tensor_verdict(attention_fn):
    """Right, returning a 0-dim boolean tensor."""
    query = torch.full((1, 1, 4, 8), 100.0)
    value = torch.randn(1, 1, 4, 8)
    def out(v):
        return attention_fn(query, -query, v, tl.causal_mask(4))[0][..., 0, :]
    return (out(value) - out(value + torch.arange(4.0)[:, None])).abs().max() < 1e-6


def ordinary_scores(attention_fn):  # the review's too-weak test: scores of order 1
    g = torch.Generator().manual_seed(0)
    return _future_changed(attention_fn, torch.randn(1, 1, 4, 8, generator=g),
                           torch.randn(1, 1, 4, 8, generator=g))


def positive_scores(attention_fn):  # large, but positive: the fill is never reached
    query = torch.full((1, 1, 4, 8), 100.0)
    return _future_changed(attention_fn, query, query)


def compares_the_last_position(attention_fn):  # the last query sees every key it changes
    query = torch.full((1, 1, 4, 8), 100.0)
    return _future_changed(attention_fn, query, -query, compare=slice(3, 4))


def exact_comparison_of_a_changed_key(attention_fn):  # too strict: changes an allowed key
    query = torch.full((1, 1, 4, 8), 100.0)
    key = -query
    moved = key.clone()
    moved[..., 0, 0] += 1e-3
    value = torch.randn(1, 1, 4, 8)
    mask = tl.causal_mask(4)
    return torch.equal(attention_fn(query, key, value, mask)[0], attention_fn(query, moved, value, mask)[0])


def test_the_mask_test_solution_and_other_right_tests_pass():
    for test in (mask_solution, mask_keys_large_queries_negative, mask_tensor_verdict):
        assert ch15.check_mask_test(test).startswith("Correct")


@pytest.mark.parametrize("test, message", [
    (ordinary_scores, "passes a fill of -1e4: make every allowed score"),
    (positive_scores, "passes a fill of -1e4"),
    (compares_the_last_position, "fails the library.s attention, which is correct"),
    (lambda attention_fn: True, "passes a fill of -1e4"),
    (lambda attention_fn: False, "fails the library's attention, which is correct"),
    (exact_comparison_of_a_changed_key, "which is correct"),
    (lambda attention_fn: "yes", "should return True or False"),
])
def test_wrong_mask_tests_fail_and_say_what_is_wrong(test, message):
    with pytest.raises(AssertionError, match=message):
        ch15.check_mask_test(test)


def test_a_test_with_a_query_that_has_no_allowed_key_is_told_why_the_plain_reference_fails():
    """An independent reader's test: sound for the library, but one query row is fully
    blocked, where the plain reference spreads its weight over the blocked keys."""
    def one_row_fully_blocked(attention_fn):
        query = torch.full((1, 1, 4, 8), 100.0)
        value = torch.randn(1, 1, 4, 8, generator=torch.Generator().manual_seed(0))
        changed = value.clone()
        changed[..., 1:, :] += 1.0
        mask = tl.causal_mask(4).clone()
        mask[1, :] = False  # query 1 may attend to nothing
        before = attention_fn(query, -query, value, mask)[0][..., :2, :]
        after = attention_fn(query, -query, changed, mask)[0][..., :2, :]
        return torch.allclose(before, after)

    assert one_row_fully_blocked(tl.scaled_dot_product_attention)
    with pytest.raises(AssertionError, match="the plain reference .*no allowed key at all"):
        ch15.check_mask_test(one_row_fully_blocked)


def test_a_test_that_catches_only_the_1e4_fill_is_told_about_the_tiny_fill():
    def only_1e4(attention_fn):  # passes everything except a rule named like bug 8
        return attention_fn is not bh.attention_fill_1e4

    with pytest.raises(AssertionError, match="-1e-9"):
        ch15.check_mask_test(only_1e4)


# --- exercise 2: a test of the cached step ----------------------------------------------

def cache_solution(model):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.vocab_size, (2, 9), generator=g)
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache(2)
        pieces = [model(ids[:, a:b], cache=cache) for a, b in [(0, 5), (5, 8), (8, 9)]]
    return torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-5)


def one_token_at_a_time(model):
    """Right: a prompt of 1, then one token per step, compared step by step."""
    ids = torch.randint(0, model.vocab_size, (1, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache(1)
        for t in range(7):
            if not torch.allclose(model(ids[:, t:t + 1], cache=cache), full[:, t:t + 1], atol=1e-5):
                return False
    return True


def square_only(model):  # the review's wrong answer: never leaves the square case
    ids = torch.randint(0, model.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return torch.allclose(model(ids), model(ids), atol=1e-5)


def one_piece_through_the_cache(model):  # the whole sequence as one piece: square again
    ids = torch.randint(0, model.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return torch.allclose(model(ids, cache=model.new_cache(2)), model(ids), atol=1e-5)


def fresh_cache_per_piece(model):  # each piece in a new cache: never fewer queries than keys
    ids = torch.randint(0, model.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        pieces = [model(ids[:, a:b], cache=model.new_cache(2)) for a, b in [(0, 5), (5, 9)]]
        return torch.allclose(pieces[0], model(ids[:, :5]), atol=1e-5) and torch.allclose(
            pieces[1], model(ids[:, 5:9]), atol=1e-5)


def exact_comparison(model):  # too strict: cached and full passes round differently
    ids = torch.randint(0, model.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache(2)
        pieces = [model(ids[:, a:b], cache=cache) for a, b in [(0, 5), (5, 8), (8, 9)]]
    return torch.equal(torch.cat(pieces, dim=1), full)


def test_the_cache_test_solution_and_other_right_tests_pass():
    for test in (cache_solution, one_token_at_a_time):
        assert ch15.check_cache_test(test).startswith("Correct")


@pytest.mark.parametrize("test, message", [
    (square_only, "passes the top-left causal mask"),
    (one_piece_through_the_cache, "passes the top-left causal mask"),
    (fresh_cache_per_piece, "passes the top-left causal mask"),
    (lambda model: False, "fails the library's model"),
    (lambda model: None, "should return True or False"),
    # cached and full passes add in different orders: exact equality fails the right model
    # (measured under this machine's kernels, default and avx2)
    (exact_comparison, "with a tolerance"),
])
def test_wrong_cache_tests_fail_and_say_what_is_wrong(test, message):
    with pytest.raises(AssertionError, match=message):
        ch15.check_cache_test(test)


def test_the_shortcut_equals_the_library_on_square_passes_only():
    model = bh.small_lm()
    flagged = use_attention(copy.deepcopy(model), bh.attention_causal_flag)
    ids = torch.randint(0, bh.VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(flagged(ids), model(ids))
    assert cache_solution(model) and not cache_solution(flagged)


def test_the_checks_refuse_what_is_not_a_function():
    with pytest.raises(TypeError, match="test"):
        ch15.check_mask_test("mask_solution")
    with pytest.raises(TypeError, match="test"):
        ch15.check_cache_test("cache_solution")
