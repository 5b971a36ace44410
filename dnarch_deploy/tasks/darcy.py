"""2-D Darcy flow as in the FNO paper's data (data_generation/darcy: GRF.m, solve_gwf.m).

    -div(a grad u) = f on [0, 1]^2,  u = 0 on the boundary,  f = 1.

a: a Gaussian random field with covariance (-Laplacian + tau^2)^(-alpha) (alpha 2, tau 3),
thresholded to 12 where it is >= 0 and 3 elsewhere. Both live on a fine s x s grid of cell
centres; the solver interpolates them to the grid nodes (not-a-knot cubic splines, MATLAB's
interp2 'spline'), applies the 5-point finite-volume stencil with face coefficients averaged
from the two nodes, solves the sparse system (SuperLU), and interpolates back to the cell
centres. Input and target are then subsampled: FNO's 85 x 85 is [::5, ::5] of 421 x 421.

Task: x = coefficient a (1 channel, values 12 and 3), y = solution u (1 channel); metric is the
per-sample relative L2 error. The default solves on 169 x 169 (refine=2) to stay CPU-sized;
fno=True uses FNO's 421 x 421 and 1000 training samples (about 25 min on one core).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .base import DENSE, Task, make_task
from .cache import cached
from .options import build_options
from .parallel import default_workers, map_chunks

GENERATOR_VERSION = 1
CHUNK = 8  # samples per work unit
ANCHORS = {
    "fno_85_unverified": 0.0108,
    "fno_421_unverified": 0.0098,
    "train_mean_predictor": 0.25,
    "note": "FNO: 1000 train / 100 test at 85x85 from 421x421 solves, 500 epochs; "
    "expect ~0.02-0.05 from small CPU runs (a guess)",
}
FNO_PRESET = {"n_train": 1000, "n_val": 100, "n_test": 100, "refine": 5}


@dataclass
class DarcyOptions:
    n_train: int = 500
    n_val: int = 100
    n_test: int = 100
    size: int = 85  # grid of the task's inputs and targets
    refine: int = 2  # the solve runs on (size - 1) * refine + 1 points per side (FNO: 5)
    alpha: float = 2.0  # smoothness of the random field
    tau: float = 3.0  # inverse length scale of the random field
    a_high: float = 12.0  # coefficient where the field is >= 0
    a_low: float = 3.0  # coefficient elsewhere (FNO's released files; its demo.m uses 4)
    fno: bool = False  # FNO's setting: 421 x 421 solves, 1000 / 100 / 100 samples
    workers: int = 0  # processes; 0 means automatic (both cores unless the set is tiny)

    def __post_init__(self) -> None:
        if min(self.n_train, self.n_test) < 1 or self.n_val < 0:
            raise ValueError("n_train and n_test must be >= 1 and n_val >= 0")
        if self.size < 5 or self.refine < 1:
            raise ValueError(f"size={self.size} must be >= 5 and refine={self.refine} >= 1")

    @property
    def fine(self) -> int:
        return (self.size - 1) * self.refine + 1


def gaussian_random_field(rng: np.random.Generator, s: int, alpha: float, tau: float) -> np.ndarray:
    """GRF.m: Karhunen-Loeve expansion in the cosine basis (Neumann boundary), s x s."""
    from scipy.fft import idctn

    xi = rng.standard_normal((s, s))
    k1, k2 = np.meshgrid(np.arange(s), np.arange(s))
    coef = tau ** (alpha - 1) * (np.pi**2 * (k1**2 + k2**2) + tau**2) ** (-alpha / 2)
    spectrum = s * coef * xi
    spectrum[0, 0] = 0.0  # zero mean
    return idctn(spectrum, type=2, norm="ortho")  # MATLAB's idct2


def solve_nodes(coef: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Solve -div(coef grad u) = f on a K x K node grid of [0, 1]^2 with u = 0 on the boundary.

    5-point stencil; the coefficient on a face is the mean of its two nodes (solve_gwf.m).
    Second-order accurate for smooth coefficients.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.linalg import spsolve

    k = coef.shape[0]
    m = k - 2  # interior nodes per side
    c = coef
    centre = c[1:-1, 1:-1]
    faces = {  # neighbour offset -> face coefficient, for every interior node
        (-1, 0): (c[:-2, 1:-1] + centre) / 2,
        (1, 0): (c[2:, 1:-1] + centre) / 2,
        (0, -1): (c[1:-1, :-2] + centre) / 2,
        (0, 1): (c[1:-1, 2:] + centre) / 2,
    }
    index = np.arange(m * m).reshape(m, m)
    rows, cols, vals = [index.ravel()], [index.ravel()], [sum(faces.values()).ravel()]
    for (di, dj), face in faces.items():
        # Only neighbours that are interior nodes enter the matrix (boundary values are 0).
        i0, i1 = max(0, -di), m - max(0, di)
        j0, j1 = max(0, -dj), m - max(0, dj)
        rows.append(index[i0:i1, j0:j1].ravel())
        cols.append(index[i0 + di : i1 + di, j0 + dj : j1 + dj].ravel())
        vals.append(-face[i0:i1, j0:j1].ravel())
    matrix = coo_matrix(
        (np.concatenate(vals) * (k - 1) ** 2, (np.concatenate(rows), np.concatenate(cols))),
        shape=(m * m, m * m),
    ).tocsc()
    u = np.zeros_like(coef, dtype=np.float64)
    u[1:-1, 1:-1] = spsolve(matrix, f[1:-1, 1:-1].ravel()).reshape(m, m)
    return u


def _spline2(values: np.ndarray, x_from: np.ndarray, x_to: np.ndarray) -> np.ndarray:
    """Tensor-product not-a-knot cubic spline (MATLAB interp2 'spline'), extrapolating."""
    from scipy.interpolate import CubicSpline

    out = CubicSpline(x_from, values, axis=0)(x_to)
    return CubicSpline(x_from, out, axis=1)(x_to)


def solve_gwf(coef: np.ndarray, f: np.ndarray) -> np.ndarray:
    """solve_gwf.m: cell-centred coef and f in, cell-centred solution out (K x K)."""
    k = coef.shape[0]
    centres = (np.arange(k) + 0.5) / k
    nodes = np.linspace(0.0, 1.0, k)
    u = solve_nodes(_spline2(coef, centres, nodes), _spline2(f, centres, nodes))
    return _spline2(u, nodes, centres)


def sample(opts: DarcyOptions, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One (coefficient, solution) pair on the task grid."""
    s, r = opts.fine, opts.refine
    field = gaussian_random_field(rng, s, opts.alpha, opts.tau)
    coef = np.where(field >= 0, opts.a_high, opts.a_low)
    u = solve_gwf(coef, np.ones((s, s)))
    return coef[::r, ::r], u[::r, ::r]


def _generate_chunk(job: tuple) -> tuple[np.ndarray, np.ndarray]:
    opts, seed, start, count = job
    pairs = [sample(opts, np.random.default_rng([seed, i])) for i in range(start, start + count)]
    return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def generate(opts: DarcyOptions, seed: int) -> dict[str, np.ndarray]:
    """Samples in order (sample i always uses the stream [seed, i]); train, val, test."""
    total = opts.n_train + opts.n_val + opts.n_test
    starts = list(range(0, total, CHUNK))
    counts = [min(CHUNK, total - s) for s in starts]
    workers = opts.workers or (default_workers() if total >= 64 else 1)
    jobs = [(opts, seed, s, c) for s, c in zip(starts, counts, strict=True)]
    parts = map_chunks(_generate_chunk, jobs, sizes=counts, workers=workers, desc="darcy")
    x = np.concatenate([p[0] for p in parts])[:, None].astype(np.float32)
    y = np.concatenate([p[1] for p in parts])[:, None].astype(np.float32)
    a, b = opts.n_train, opts.n_train + opts.n_val
    return {"x_train": x[:a], "y_train": y[:a], "x_val": x[a:b], "y_val": y[a:b],
            "x_test": x[b:], "y_test": y[b:]}


def resolve_options(options: dict) -> DarcyOptions:
    options = dict(options)
    if str(options.get("fno", "false")).lower() in ("1", "true", "yes"):
        options = {**FNO_PRESET, **options}
    return build_options(DarcyOptions, options, "darcy")


def cache_params(opts: DarcyOptions, seed: int) -> dict:
    params = {k: v for k, v in asdict(opts).items() if k not in ("workers", "fno")}
    return {**params, "seed": seed, "version": GENERATOR_VERSION}


def load(seed: int, cache_dir, options: dict) -> Task:
    opts = resolve_options(options)
    arrays, path, hit = cached("darcy", cache_params(opts, seed),
                               lambda: generate(opts, seed), cache_dir)
    info = {
        "source": "generated like FNO's Darcy data (GRF.m, solve_gwf.m), f = 1",
        "anchors": ANCHORS,
        "options": asdict(opts),
        "fine_grid": opts.fine,
        "cache": {"path": str(path), "hit": hit},
    }
    return make_task("darcy", DENSE, arrays, info=info)


def describe(seed: int, cache_dir, options: dict) -> dict:
    """Shapes, sizes and cache state without generating anything."""
    from .cache import cache_path

    opts = resolve_options(options)
    path = cache_path("darcy", cache_params(opts, seed), cache_dir)
    return {"kind": DENSE, "input": str((1, opts.size, opts.size)), "out": 1,
            "sizes": (opts.n_train, opts.n_val, opts.n_test),
            "metric": "rel_l2", "cache": "cached" if path.exists() else "not generated"}
