"""A UCR/UEA classification set in sktime's ``.ts`` format -> the ``npz:`` task's arrays.

The search reads a user's own data as ``--task npz:PATH`` (x_train, y_train, x_test, y_test).
This turns a ``NAME_TRAIN.ts`` / ``NAME_TEST.ts`` pair, as the UCR/UEA archive and the aeon and
sktime wheels ship them, into that file: series as (N, channels, length) float32, labels as
0..K-1 in the sorted order of the training labels (numbers numerically). Only equal-length
sets without missing values (aeon ships ``_eq`` versions of the unequal ones).

    pip download aeon==1.6.0 --no-deps -d /tmp/aeon && unzip -q /tmp/aeon/aeon-*.whl -d /tmp/aeon
    D=/tmp/aeon/aeon/datasets/data/PickupGestureWiimoteZ
    python -m benchmarks.ts_to_npz $D/PickupGestureWiimoteZ_eq_TRAIN.ts \\
        $D/PickupGestureWiimoteZ_eq_TEST.ts /tmp/pickup.npz
    python -m benchmarks.ucr_quality --tasks npz:/tmp/pickup.npz --seeds 3
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from benchmarks import harness


def read_ts(path: Path) -> tuple[np.ndarray, list[str]]:
    """(x (N, C, L) float32, labels as strings) of one ``.ts`` file; a ValueError names it."""
    try:
        from sktime.datasets import load_from_tsfile
    except ImportError:
        raise ValueError("reading .ts files needs sktime: pip install -e '.[data]'") from None
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        x, y = load_from_tsfile(str(path), return_data_type="numpy3d")
    except Exception as e:  # sktime raises several kinds for unequal lengths and bad headers
        raise ValueError(f"{path}: not an equal-length .ts classification file ({e})") from None
    if np.isnan(x).any():
        raise ValueError(f"{path}: has missing values")
    return x.astype(np.float32), [str(label) for label in y]


def _label_order(label: str) -> tuple:
    """Numbers in numeric order ("2" before "10"), then any other labels as text."""
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def convert(train: Path, test: Path, out: Path) -> dict:
    """Write ``out`` (refusing to overwrite it) and return its shapes and classes."""
    if out.suffix != ".npz":  # np.savez would add it, and --task npz: names the file as written
        raise ValueError(f"{out}: the output must end in .npz")
    if out.exists():
        raise ValueError(f"{out}: exists; remove it or choose another name")
    x_train, y_train = read_ts(train)
    x_test, y_test = read_ts(test)
    classes = sorted(set(y_train), key=_label_order)
    unknown = sorted(set(y_test) - set(classes))
    if unknown:
        raise ValueError(f"{test}: labels {unknown} are not in {train}")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise ValueError(f"{train} and {test}: series of shapes {x_train.shape[1:]} and "
                         f"{x_test.shape[1:]}")
    index = {c: i for i, c in enumerate(classes)}
    with open(out, "xb") as f:  # "x": never over a file that appeared meanwhile
        np.savez(f, x_train=x_train, y_train=np.array([index[c] for c in y_train]),
                 x_test=x_test, y_test=np.array([index[c] for c in y_test]))
    return {"train": list(x_train.shape), "test": list(x_test.shape), "classes": classes}


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("train", type=Path, help="NAME_TRAIN.ts")
    parser.add_argument("test", type=Path, help="NAME_TEST.ts")
    parser.add_argument("out", type=Path, help="the .npz to write")
    args = parser.parse_args(argv)
    try:
        info = convert(args.train, args.test, args.out)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: train {info['train']}, test {info['test']}, "
          f"{len(info['classes'])} classes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
