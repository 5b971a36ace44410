"""PathFinder: labels, markers and connectivity checked by flood fill."""

import numpy as np
import pytest
from scipy import ndimage

from dnarch_deploy.tasks import load_task, pathfinder

N_IMAGES = 60
FINE = 8  # the test's own rendering runs at 8x the image resolution


@pytest.fixture(scope="module")
def samples():
    opts = pathfinder.resolve_options("pathfinder", {})
    rng = np.random.default_rng(123)
    return opts, [pathfinder.sample_image(opts, rng) for _ in range(N_IMAGES)]


def draw_polyline(canvas: np.ndarray, points: list[np.ndarray], half_width: float) -> None:
    """Mark fine pixels within half_width (image pixels) of the polyline through points."""
    for a, b in zip(points[:-1], points[1:], strict=True):
        lo = np.maximum(np.floor((np.minimum(a, b) - 1) * FINE).astype(int), 0)
        hi = np.minimum(np.ceil((np.maximum(a, b) + 2) * FINE).astype(int), canvas.shape[0])
        fy, fx = np.mgrid[lo[0] : hi[0], lo[1] : hi[1]]
        py, px = (fy + 0.5) / FINE - 0.5, (fx + 0.5) / FINE - 0.5  # fine pixel centres
        d = b - a
        t = np.clip(((py - a[0]) * d[0] + (px - a[1]) * d[1]) / max(d @ d, 1e-12), 0, 1)
        near = np.hypot(py - a[0] - t * d[0], px - a[1] - t * d[1]) <= half_width
        canvas[lo[0] : hi[0], lo[1] : hi[1]] |= near


def snake_paths(geometry: dict) -> list[list[np.ndarray]]:
    """Each snake as the path back0, front0, back1, front1, ... (paddles and the gaps)."""
    snakes = geometry["targets"] + geometry["distractors"]
    return [[p for paddle in snake for p in paddle] for snake in snakes]


def fine_index(point: np.ndarray) -> tuple[int, int]:
    return tuple(int(v) * FINE + FINE // 2 for v in point)


@pytest.mark.slow
def test_labels_are_balanced(samples):
    _, items = samples
    labels = np.array([label for _, label, _ in items])
    assert 0 < labels.sum() < len(labels)
    assert abs(labels.mean() - 0.5) < 0.2


def test_markers_are_drawn_on_target_tips(samples):
    opts, items = samples
    for image, _, geometry in items:
        assert image.shape == (32, 32) and image.dtype == np.uint8 and image.max() == 255
        origin, end = geometry["markers"]
        ends = [p for snake in geometry["targets"] for p in (snake[0][0], snake[-1][1])]
        for marker in (origin, end):
            assert any(np.array_equal(marker, p) for p in ends)
            r, c = marker.astype(int)
            # The marker disk (radius 1.5) covers its pixel and the four neighbours.
            block = image[r - 1 : r + 2, c - 1 : c + 2]
            assert block[1, 1] >= 100 and (block[[0, 1, 1, 2], [1, 0, 2, 1]] >= 100).all()
        # Target snakes have their full length; distractors a third of it.
        assert [len(s) for s in geometry["targets"]] == [opts.contour_length] * 2
        assert all(len(d) == opts.distractor_length for d in geometry["distractors"])


def test_flood_fill_connects_markers_exactly_when_label_is_one(samples):
    for _, label, geometry in samples[1]:
        canvas = np.zeros((32 * FINE, 32 * FINE), bool)
        paths = snake_paths(geometry)
        for path in paths:
            draw_polyline(canvas, path, half_width=0.25)  # the paddles' own thickness
        components, count = ndimage.label(canvas)
        # Snakes never touch one another: one component per snake.
        assert count == len(paths)
        a, b = (components[fine_index(m)] for m in geometry["markers"])
        assert a > 0 and b > 0
        assert (a == b) == (label == 1)


def test_image_shows_the_snakes_and_nothing_else(samples):
    for image, _, geometry in samples[1]:
        drawn = np.zeros((32 * FINE, 32 * FINE), bool)
        for path in snake_paths(geometry):
            for a, b in zip(path[0::2], path[1::2], strict=True):  # paddles, not the gaps
                draw_polyline(drawn, [a, b], half_width=1.5)
        for marker in geometry["markers"]:
            draw_polyline(drawn, [marker, marker], half_width=2.0)
        near_geometry = drawn.reshape(32, FINE, 32, FINE).any(axis=(1, 3))
        assert not (image > 0)[~near_geometry].any()
        for path in snake_paths(geometry):
            for a, b in zip(path[0::2], path[1::2], strict=True):
                r, c = np.floor((a + b) / 2 + 0.5).astype(int)
                assert image[r - 1 : r + 2, c - 1 : c + 2].max() > 0


def test_task_layout_flatten_and_cache(tmp_path):
    small = dict(n_train=10, n_val=2, n_test=4, cache_dir=tmp_path)
    task = load_task("pathfinder", **small)
    assert task.spatial == (32, 32) and task.out_channels == 2 and task.sizes() == (10, 2, 4)
    assert task.x_train.dtype == np.float32 and 0 <= task.x_train.min() < task.x_train.max() <= 1
    flat = load_task("pathfinder1d", **small)
    assert flat.info["cache"]["hit"]  # same images, read back from the 2-D task's cache
    assert flat.spatial == (1024,) and flat.name == "pathfinder1d:n_test=4,n_train=10,n_val=2"
    np.testing.assert_array_equal(flat.x_test, task.x_test.reshape(4, 1, 1024))
    easy = load_task("pathfinder", difficulty="easy", **small)
    assert easy.info["contour_length"] == 6 and not easy.info["cache"]["hit"]
