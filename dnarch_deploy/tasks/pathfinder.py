"""PathFinder, re-implemented with numpy/scipy after drewlinsley/pathfinder (snakes2.py) with
the Long Range Arena "Pathfinder-32" parameters (lra_benchmarks/data/pathfinder.py).

An image holds two target snakes and a few short distractor snakes. A snake is a chain of
short line segments ("paddles"): each next paddle starts `paddle_length + 2 margin` further
along the heading, its direction drawn with weight cos^2(min(|turn| * continuity, pi/2)) over
free positions. Occupancy masks (paddles widened by `margin`) keep snakes from touching. Two
round markers sit on snake tips: both on one target snake (label 1, connected) or one on each
(label 0). The label is a fair coin flip.

Differences from the original:
- drawing: anti-aliasing by supersampling and box averaging instead of PIL lines plus Lanczos
  resizing; occupancy masks are a linear coverage ramp instead of resized dilated lines (the
  original's thresholds, 0.3 and 1.8, are kept);
- snakes never cross: the gap between two paddles of a snake (its "link") blocks other paddles,
  and a new paddle's link must not cross anything. The original let a paddle sit in another
  snake's gap, so a distractor could pass through a target snake and make the label ambiguous;
- every snake blocks every other: the original missed the other target snake's newest paddle
  and never committed the first target snake's last paddle, so distractors could touch it.
Labels can therefore be checked by a flood fill along the snakes (tests do).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import numpy as np

from .base import CLASSIFICATION, Task, TaskError, make_task
from .cache import cached
from .options import build_options
from .parallel import default_workers, map_chunks

DIFFICULTY = {"easy": 6, "intermediate": 9, "hard": 14}  # LRA's contour lengths
CHUNK = 200  # images per work unit
LRA_PRESET = {"n_train": 160_000, "n_val": 20_000, "n_test": 20_000}
GENERATOR_VERSION = 1
ANCHORS = {
    "chance": 0.5,
    "transformer_lra_unverified": 0.7140,
    "s4_unverified": "0.8605 (ICLR'22) / 0.9420 (arXiv v3)",
    "note": "LRA numbers are for Pathfinder-32 hard, 200k images, flattened to length 1024",
}


@dataclass
class PathfinderOptions:
    n_train: int = 4_000
    n_val: int = 500
    n_test: int = 1_000
    lra: bool = False  # LRA's size: 200k images split 160k / 20k / 20k (hours on 2 cores)
    flatten: bool = False  # (N, 1, size*size) row by row, as LRA feeds it, instead of 2-D
    difficulty: str = "hard"  # easy / intermediate / hard: target snakes of 6 / 9 / 14 paddles
    size: int = 32
    padding: int = 1
    paddle_length: int = 2
    paddle_thickness: float = 0.5
    margin: int = 1
    marker_radius: float = 1.5
    seed_distance: int = 7  # pixels between the two target snakes' first paddles
    continuity: float = 1.0  # higher: straighter snakes
    snake_contrast: float = 2.0
    paddle_contrast: float = 0.75
    max_paddle_retrial: int = 2
    max_distractor_retrial: int = 4
    supersample: int = 4  # anti-aliasing: sub-pixel samples per axis
    workers: int = 0  # processes; 0 means automatic

    def __post_init__(self) -> None:
        if self.difficulty not in DIFFICULTY:
            raise ValueError(f"difficulty={self.difficulty!r} must be one of {list(DIFFICULTY)}")
        if min(self.n_train, self.n_test) < 1 or self.n_val < 0:
            raise ValueError("n_train and n_test must be >= 1 and n_val >= 0")
        if self.size <= 4 * self.seed_distance:
            # The first target snake starts at least 2 * seed_distance from every edge.
            raise ValueError(f"size={self.size} must exceed 4 * seed_distance")
        if self.paddle_length < 1 or self.margin < 0 or self.paddle_thickness <= 0:
            raise ValueError("paddle_length and paddle_thickness must be > 0, margin >= 0")

    @property
    def contour_length(self) -> int:
        return DIFFICULTY[self.difficulty]

    @property
    def distractor_length(self) -> int:
        return self.contour_length // 3

    @property
    def num_distractors(self) -> int:
        return 20 // self.distractor_length  # LRA: 20 // distractor_length


class _Failed(Exception):
    """A snake could not be placed; the caller retries or gives up on it."""


def _direction(theta: float) -> np.ndarray:
    return np.array([np.sin(theta), np.cos(theta)])  # (row, column)


def _step(point: np.ndarray, theta: float, dist: float) -> np.ndarray:
    """The original's translate_coord: move and round up to integer pixels."""
    return np.ceil(point + dist * _direction(theta)).astype(int)


def segment_distance(py: np.ndarray, px: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance from points (py, px) to the segment a-b."""
    d = b - a
    length2 = float(d @ d)
    t = 0.0
    if length2 > 0:
        t = np.clip(((py - a[0]) * d[0] + (px - a[1]) * d[1]) / length2, 0.0, 1.0)
    return np.hypot(py - (a[0] + t * d[0]), px - (a[1] + t * d[1]))


def _paddle(back: np.ndarray, front: np.ndarray, reach: float, size: int | None) -> tuple:
    """(back, front, window, mask): the paddle's soft mask (half-width reach) in a window
    around it, cut to a size x size image unless size is None."""
    lo = np.floor(np.minimum(back, front) - reach - 1).astype(int)
    hi = np.ceil(np.maximum(back, front) + reach + 1).astype(int) + 1
    if size is not None:
        lo, hi = np.maximum(lo, 0), np.minimum(hi, size)
    py, px = np.mgrid[lo[0] : hi[0], lo[1] : hi[1]]
    d = segment_distance(py, px, back, front)
    window = (slice(lo[0], hi[0]), slice(lo[1], hi[1]))
    return back, front, window, np.clip(reach + 0.5 - d, 0.0, 1.0)


@functools.lru_cache(maxsize=8)
def _ring(paddle_length: int, margin: int, reach: float) -> tuple:
    """Geometry shared by all images: the original's dilation disk, the candidate heads
    around an (integer) pivot, one per pixel of arc, their headings, and the paddle ending at
    each candidate (relative to it)."""
    dy, dx = np.mgrid[-margin : margin + 1, -margin : margin + 1]
    disk = np.argwhere(dy**2 + dx**2 <= margin**2) - margin
    radius = paddle_length + margin
    angles = np.deg2rad(np.arange(0, 360, 360 / (2 * np.pi * radius)))
    ring = np.unique(
        np.floor(radius * np.stack([np.sin(angles), np.cos(angles)], axis=1)).astype(int), axis=0
    )
    headings = np.arctan2(ring[:, 0], ring[:, 1])
    paddles = [_paddle(-paddle_length * _direction(h), np.zeros(2), reach, None) for h in headings]
    return disk, ring, headings, paddles


class _Canvas:
    """Occupancy of one image while its snakes are placed.

    Like the original's resized masks, occupancy is soft: each pixel holds how much of it a
    paddle widened by `margin` covers (a linear ramp across the edge pixel). The original's
    thresholds follow: a pixel is taken above 0.3, and a new paddle collides where its mask and
    the occupancy add up to 1.8 or more. A paddle is (back, front, window, mask in window).
    """

    def __init__(self, opts: PathfinderOptions, rng: np.random.Generator) -> None:
        self.o, self.rng = opts, rng
        n, p = opts.size, opts.padding
        self.occupied = np.zeros((n, n))
        self.occupied[:p] = self.occupied[-p:] = 1.0
        self.occupied[:, :p] = self.occupied[:, -p:] = 1.0
        self.reach = opts.margin + opts.paddle_thickness / 2  # half-width of a paddle's mask
        self.disk, self.ring, self.ring_headings, self.ring_paddles = _ring(
            opts.paddle_length, opts.margin, self.reach
        )

    def inside(self, p: np.ndarray) -> bool:
        return bool(0 <= p[0] < self.o.size and 0 <= p[1] < self.o.size)

    def paddle(self, back: np.ndarray, front: np.ndarray) -> tuple:
        return _paddle(back, front, self.reach, self.o.size)

    def _ring_paddle(self, k: int, front: np.ndarray) -> tuple:
        """Ring paddle k moved to end at the integer point front, cut to the image."""
        back, _, (rows, cols), mask = self.ring_paddles[k]
        n = self.o.size
        y0, y1 = rows.start + front[0], rows.stop + front[0]
        x0, x1 = cols.start + front[1], cols.stop + front[1]
        cy0, cy1, cx0, cx1 = max(y0, 0), min(y1, n), max(x0, 0), min(x1, n)
        cut = mask[cy0 - y0 : cy1 - y0, cx0 - x0 : cx1 - x0]
        f = front.astype(float)
        return back + f, f, (slice(cy0, cy1), slice(cx0, cx1)), cut

    @staticmethod
    def add(occupancy: np.ndarray, paddle: tuple) -> np.ndarray:
        view = occupancy[paddle[2]]
        np.maximum(view, paddle[3], out=view)
        return occupancy

    @staticmethod
    def collides(occupancy: np.ndarray, paddle: tuple) -> bool:
        return bool((occupancy[paddle[2]] + paddle[3]).max() >= 1.8)

    def free_tails(self, blocked: np.ndarray, theta: float) -> np.ndarray:
        """Pixels where a paddle starting there along theta keeps its core off taken pixels."""
        n, length = self.o.size, self.o.paddle_length
        pad = int(np.ceil(length + self.reach)) + 1
        window = np.mgrid[-pad : pad + 1, -pad : pad + 1].astype(float)
        d = segment_distance(*window, np.zeros(2), length * _direction(theta))
        core = np.argwhere(d <= self.reach - 0.5)  # fully covered pixels, offsets + pad
        padded = np.zeros((n + 2 * pad, n + 2 * pad), bool)
        padded[pad : pad + n, pad : pad + n] = blocked > 0.3
        hit = np.zeros((n, n), bool)
        for oy, ox in core:
            hit |= padded[oy : oy + n, ox : ox + n]
        return np.argwhere(~hit)

    def seed(self, blocked: np.ndarray) -> tuple:
        """First paddle of a snake on free space: (pivot, heading, paddle)."""
        for _ in range(self.o.max_paddle_retrial + 1):
            theta = np.deg2rad(self.rng.integers(-180, 180))
            tails = self.free_tails(blocked, theta)
            if len(tails) == 0:
                raise _Failed
            tail = tails[self.rng.integers(len(tails))]
            if self._paddle_fits(tail, theta):
                return self._first_paddle(tail, theta)
        raise _Failed

    def seed_near(self, other_tail: np.ndarray) -> tuple:
        """The second target snake starts seed_distance away from the first (any direction)."""
        o = self.o
        for _ in range(o.max_paddle_retrial + 1):
            theta = np.deg2rad(self.rng.integers(-180, 180))
            phi = np.deg2rad(self.rng.integers(0, 360))
            tail = np.round(other_tail + o.seed_distance * _direction(phi)).astype(int)
            if self._paddle_fits(tail, theta):
                return self._first_paddle(tail, theta)
        raise _Failed

    def _paddle_fits(self, tail: np.ndarray, theta: float) -> bool:
        head = _step(tail, theta, self.o.paddle_length)
        pivot = _step(head, theta + np.pi, self.o.paddle_length + self.o.margin)
        return self.inside(tail) and self.inside(head) and self.inside(pivot)

    def _first_paddle(self, tail: np.ndarray, theta: float) -> tuple:
        o = self.o
        head = _step(tail, theta, o.paddle_length)
        pivot = _step(head, theta + np.pi, o.paddle_length + o.margin)
        front = tail + o.paddle_length * _direction(theta)
        return pivot, theta, self.paddle(tail.astype(float), front)

    def extend(self, pivot: np.ndarray, theta: float, front: np.ndarray,
               blocked: np.ndarray) -> tuple:
        """Next paddle after the paddle (pivot, theta, front): (new pivot, heading, paddle, link).

        The link is the gap from the last paddle's front to the new paddle's back: it must not
        cross anything either, and it blocks later paddles like a paddle does.
        """
        o = self.o
        new_pivot = _step(pivot, theta, o.paddle_length + 2 * o.margin)
        heads = new_pivot + self.ring
        keep = np.all((heads >= 0) & (heads < o.size), axis=1)
        if not keep.any():
            raise _Failed
        index = np.flatnonzero(keep)
        heads, headings = heads[index], self.ring_headings[index]
        turn = np.abs(headings - theta)
        turn = np.minimum(np.minimum(turn, 2 * np.pi - turn) * o.continuity, np.pi / 2)
        # The original weighs candidates by 1 - (occupancy dilated by a disk of radius margin).
        around = heads[:, None, :] + self.disk[None]
        valid = np.all((around >= 0) & (around < o.size), axis=2)
        around = np.minimum(np.maximum(around, 0), o.size - 1)
        near = np.where(valid, blocked[around[..., 0], around[..., 1]], 0.0).max(axis=1)
        cmf = np.cumsum(np.cos(turn) ** 2 * np.maximum(1.0 - near, 0.0))
        if cmf[-1] < 1e-4:
            raise _Failed
        for _ in range(o.max_paddle_retrial + 1):
            k = min(int(np.searchsorted(cmf, self.rng.random() * cmf[-1], side="right")),
                    len(cmf) - 1)
            paddle = self._ring_paddle(index[k], heads[k])
            if self.collides(blocked, paddle):
                continue
            link = self.paddle(front, paddle[0])
            if not self.collides(blocked, link):
                return new_pivot, float(headings[k]), paddle, link
        raise _Failed

    def snake(self, n_paddles: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """A free-standing snake (a distractor): its paddles, committed to the occupancy."""
        if (self.occupied <= 0.3).mean() < 0.01:  # the original's stop_with_availability
            raise _Failed
        pivot, theta, paddle = self.seed(self.occupied)
        paddles, pending = [paddle], [paddle]
        committed = self.occupied.copy()
        for _ in range(n_paddles - 1):
            # The snake's newest paddle and link do not block yet: the next paddle sits next
            # to them.
            pivot, theta, paddle, link = self.extend(pivot, theta, paddles[-1][1], committed)
            for p in pending:
                self.add(committed, p)
            pending = [paddle, link]
            paddles.append(paddle)
        for p in pending:
            self.add(committed, p)
        self.occupied = committed
        return [p[:2] for p in paddles]

    def two_snakes(self) -> list[list[tuple[np.ndarray, np.ndarray]]]:
        """The two target snakes, grown in turns from seeds seed_distance apart."""
        o = self.o
        band = self.occupied.copy()
        edge = 2 * o.seed_distance  # the first seed stays in the centre, as in the original
        band[:edge] = band[-edge:] = 1.0
        band[:, :edge] = band[:, -edge:] = 1.0
        pivot0, theta0, paddle0 = self.seed(band)
        pivot1, theta1, paddle1 = self.seed_near(paddle0[0].astype(int))
        if self.collides(self.add(self.occupied.copy(), paddle0), paddle1):
            raise _Failed
        state = [(pivot0, theta0), (pivot1, theta1)]
        snakes, pending = [[paddle0], [paddle1]], [[paddle0], [paddle1]]
        committed = self.occupied.copy()
        for _ in range(o.contour_length - 1):
            for s in (0, 1):
                blocked = committed.copy()
                for p in pending[1 - s]:  # the other snake's newest paddle and link block
                    self.add(blocked, p)
                pivot, theta, paddle, link = self.extend(*state[s], snakes[s][-1][1], blocked)
                for p in pending[s]:
                    self.add(committed, p)
                pending[s] = [paddle, link]
                snakes[s].append(paddle)
                state[s] = (pivot, theta)
        for p in pending[0] + pending[1]:
            self.add(committed, p)
        self.occupied = committed
        return [[p[:2] for p in snake] for snake in snakes]


def _render(size: int, ss: int, shapes: list[tuple]) -> np.ndarray:
    """Anti-aliased drawing of round-capped segments (a, b, half width, value); a disk is a
    segment with a == b. Each pixel gets max over shapes of value * covered fraction, with the
    fraction measured on ss x ss sub-pixel samples."""
    sub = (np.arange(ss) + 0.5) / ss - 0.5
    image = np.zeros((size, size))
    for a, b, half_width, value in shapes:
        lo = np.maximum(np.floor(np.minimum(a, b) - half_width - 1).astype(int), 0)
        hi = np.minimum(np.ceil(np.maximum(a, b) + half_width + 1).astype(int) + 1, size)
        py = (np.arange(lo[0], hi[0])[:, None] + sub).ravel()
        px = (np.arange(lo[1], hi[1])[:, None] + sub).ravel()
        gy, gx = np.meshgrid(py, px, indexing="ij")
        inside = segment_distance(gy, gx, a, b) <= half_width
        h, w = hi - lo
        coverage = inside.reshape(h, ss, w, ss).mean(axis=(1, 3))
        window = image[lo[0] : hi[0], lo[1] : hi[1]]
        np.maximum(window, value * coverage, out=window)
    return image


def sample_image(opts: PathfinderOptions, rng: np.random.Generator) -> tuple[np.ndarray, int, dict]:
    """One image as uint8 (size, size), its label, and its geometry (for tests and plots).

    geometry: "targets" (two lists of (back, front) paddle end points, in chain order),
    "distractors" (lists of paddles), "markers" (two tip points), "origin" (which target
    snake carries the first marker).
    """
    label = int(rng.integers(0, 2))
    for _ in range(1000):
        canvas = _Canvas(opts, rng)
        try:
            targets = canvas.two_snakes()
            break
        except _Failed:
            continue
    else:
        raise TaskError("pathfinder: cannot place two target snakes; the image is too crowded")
    distractors = []
    for _ in range(opts.num_distractors):
        for _ in range(opts.max_distractor_retrial + 1):
            try:
                distractors.append(canvas.snake(opts.distractor_length))
                break
            except _Failed:
                continue
    origin = int(rng.integers(0, 2))
    end = origin if label == 1 else 1 - origin
    markers = [targets[origin][0][0], targets[end][-1][1]]  # first tail, last head
    half = opts.paddle_thickness / 2
    # Contrasts as in the original: target paddles paddle x snake contrast, distractor paddles
    # the snake contrast, markers 1.
    shapes = [(a, b, half, opts.paddle_contrast * opts.snake_contrast)
              for snake in targets for a, b in snake]
    shapes += [(a, b, half, opts.snake_contrast) for snake in distractors for a, b in snake]
    shapes += [(m, m, opts.marker_radius, 1.0) for m in markers]
    image = _render(opts.size, opts.supersample, shapes)
    # The original saved with scipy.misc.imsave, which stretches to 0-255: do the same.
    image = np.round(255 * image / image.max()).astype(np.uint8)
    geometry = {"targets": targets, "distractors": distractors, "markers": markers,
                "origin": origin}
    return image, label, geometry


def _generate_chunk(job: tuple) -> tuple[np.ndarray, np.ndarray]:
    opts, seed, index, count = job
    rng = np.random.default_rng([seed, index])
    images, labels = zip(*(sample_image(opts, rng)[:2] for _ in range(count)), strict=True)
    return np.stack(images), np.array(labels, np.int64)


def generate(opts: PathfinderOptions, seed: int) -> dict[str, np.ndarray]:
    total = opts.n_train + opts.n_val + opts.n_test
    counts = [CHUNK] * (total // CHUNK) + ([total % CHUNK] if total % CHUNK else [])
    workers = opts.workers or (default_workers() if total > 2_000 else 1)
    jobs = [(opts, seed, i, c) for i, c in enumerate(counts)]
    parts = map_chunks(_generate_chunk, jobs, sizes=counts, workers=workers, desc="pathfinder")
    x = np.concatenate([p[0] for p in parts])  # uint8 keeps the cache small
    y = np.concatenate([p[1] for p in parts])
    a, b = opts.n_train, opts.n_train + opts.n_val
    return {"x_train": x[:a], "y_train": y[:a], "x_val": x[a:b], "y_val": y[a:b],
            "x_test": x[b:], "y_test": y[b:]}


def resolve_options(name: str, options: dict) -> PathfinderOptions:
    options = dict(options)
    if name == "pathfinder1d":
        options = {"flatten": True, **options}
    if str(options.get("lra", "false")).lower() in ("1", "true", "yes"):
        options = {**LRA_PRESET, **options}
    return build_options(PathfinderOptions, options, name)


def cache_params(opts: PathfinderOptions, seed: int) -> dict:
    params = {k: v for k, v in asdict(opts).items() if k not in ("workers", "flatten", "lra")}
    return {**params, "seed": seed, "version": GENERATOR_VERSION}


def load(name: str, seed: int, cache_dir, options: dict) -> Task:
    """name is "pathfinder" (2-D) or "pathfinder1d" (flattened)."""
    opts = resolve_options(name, options)
    arrays, path, hit = cached("pathfinder", cache_params(opts, seed),
                               lambda: generate(opts, seed), cache_dir)
    shape = (1, opts.size * opts.size) if opts.flatten else (1, opts.size, opts.size)
    splits = {}
    for part in ("train", "val", "test"):
        x = arrays[f"x_{part}"].astype(np.float32) / 255.0  # raw pixel intensities in [0, 1]
        splits[f"x_{part}"] = x.reshape(len(x), *shape)
        splits[f"y_{part}"] = arrays[f"y_{part}"]
    info = {
        "source": "generated like LRA Pathfinder-32 (drewlinsley/pathfinder snakes2.py)",
        "anchors": ANCHORS,
        "options": asdict(opts),
        "contour_length": opts.contour_length,
        "distractors": (opts.num_distractors, opts.distractor_length),
        "cache": {"path": str(path), "hit": hit},
    }
    task_name = "pathfinder1d" if opts.flatten else "pathfinder"
    return make_task(task_name, CLASSIFICATION, splits, num_classes=2, info=info)


def describe(name: str, seed: int, cache_dir, options: dict) -> dict:
    """Shapes, sizes and cache state without generating anything."""
    from .cache import cache_path

    opts = resolve_options(name, options)
    path = cache_path("pathfinder", cache_params(opts, seed), cache_dir)
    shape = (1, opts.size * opts.size) if opts.flatten else (1, opts.size, opts.size)
    return {"kind": CLASSIFICATION, "input": str(shape), "out": 2,
            "sizes": (opts.n_train, opts.n_val, opts.n_test),
            "metric": "accuracy", "cache": "cached" if path.exists() else "not generated"}
