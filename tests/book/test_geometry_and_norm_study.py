
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib.book import geometry, norm_study, viz  # noqa: E402


def test_convex_hull_of_a_square_with_inner_and_edge_points():
    pts = torch.tensor([[0., 0.], [2., 0.], [2., 2.], [0., 2.], [1., 1.], [1., 0.], [0.5, 1.5]])
    hull = geometry.convex_hull(pts)
    assert sorted(map(tuple, hull.tolist())) == [(0., 0.), (0., 2.), (2., 0.), (2., 2.)]
    # counter-clockwise: the shoelace area is positive
    x, y = hull[:, 0], hull[:, 1]
    assert 0.5 * (x * y.roll(-1) - x.roll(-1) * y).sum().item() == pytest.approx(4.0)


def test_convex_hull_contains_every_point():
    torch.manual_seed(0)
    pts = torch.randn(40, 2, dtype=torch.float64)
    hull = geometry.convex_hull(pts)
    edges = hull.roll(-1, 0) - hull
    for p in pts:                          # every point is left of (or on) every edge
        rel = p - hull
        assert (edges[:, 0] * rel[:, 1] - edges[:, 1] * rel[:, 0] >= -1e-12).all()


def test_convex_hull_rejects_bad_shapes():
    with pytest.raises(ValueError, match="points"):
        geometry.convex_hull(torch.zeros(4, 3))
    with pytest.raises(TypeError, match="points"):
        geometry.convex_hull([[0, 0], [1, 1]])


def test_running_mean():
    assert norm_study.running_mean([1, 2, 3, 4], k=2) == [1.0, 1.5, 2.5, 3.5]
    assert norm_study.running_mean([5.0], k=10) == [5.0]
    with pytest.raises(ValueError, match="k"):
        norm_study.running_mean([1.0], k=0)


def test_reverse_batch_targets_are_reversed():
    x, y = norm_study.reverse_batch(torch.Generator().manual_seed(0), batch_size=4)
    assert x.shape == y.shape == (4, 8)
    assert torch.equal(y, x.flip(1)) and int(x.max()) < 8


def test_reverse_tagger_shapes_and_pre_norm_final_norm():
    model = norm_study.ReverseTagger(n_layers=2, norm_first=True)
    assert model(torch.zeros(3, 8, dtype=torch.long)).shape == (3, 8, 8)
    assert model.encoder.norm is not None


def test_train_reverse_learns_with_one_layer():
    losses = norm_study.train_reverse(n_layers=1, norm_first=True, warmup=0, steps=60)
    assert len(losses) == 60
    assert losses[0] > 1.8                       # starts near chance, ln 8 = 2.08
    assert sum(losses[-10:]) / 10 < losses[0] - 0.5
    with pytest.raises(ValueError, match="warmup"):
        norm_study.train_reverse(1, True, warmup=-1, steps=1)


def test_draw_offset_turns_and_draw_mask():
    fig, (a, b) = plt.subplots(1, 2)
    geometry.draw_offset_turns(a, omega=0.05, starts=[2, 10], offset=3)
    assert {t.get_text() for t in a.texts} - {""} == {"2→5", "10→13"}
    assert len(a.patches) == 2                   # one wedge per start
    causal = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    viz.draw_mask(b, causal, list("abc"), list("abc"), "causal")
    assert b.get_title() == "causal"
    assert b.images[0].get_array().tolist() == causal.float().tolist()  # 1 = may attend (blue)
    assert [t.get_text() for t in b.get_xticklabels()] == list("abc")
    with pytest.raises(ValueError, match="mask"):
        viz.draw_mask(b, torch.ones(2, 3, dtype=torch.bool), list("abc"), list("abc"), "x")
    plt.close(fig)
