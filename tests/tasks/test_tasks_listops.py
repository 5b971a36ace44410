"""ListOps: labels, lengths, operators and the label skew of LRA's generator."""

import numpy as np
import pytest

from search.tasks import load_task

# Token ids as documented in dnarch_deploy/tasks/listops.py (0 is padding).
SYMBOLS = {**{d + 1: str(d) for d in range(10)}, 11: "MIN", 12: "MAX", 13: "MED", 14: "SM",
           15: "]"}


def evaluate(ids: np.ndarray) -> tuple[int, int, int]:
    """Evaluate one padded token sequence with a stack, independently of the generator.

    Returns (value, operator nesting depth, largest argument count).
    """
    stack: list = []
    depth = max_depth = max_args = 0
    for t in ids[ids != 0]:
        sym = SYMBOLS[int(t)]
        if sym in ("MIN", "MAX", "MED", "SM"):
            stack.append(sym)
            depth += 1
            max_depth = max(max_depth, depth)
        elif sym == "]":
            args = []
            while not isinstance(stack[-1], str):
                args.append(stack.pop())
            op = stack.pop()
            depth -= 1
            max_args = max(max_args, len(args))
            assert len(args) >= 2, "an operator needs at least two arguments"
            if op == "MIN":
                value = min(args)
            elif op == "MAX":
                value = max(args)
            elif op == "SM":
                value = sum(args) % 10
            else:  # median, truncated toward zero as LRA's int(np.median(...))
                s = sorted(args)
                n = len(s)
                value = s[n // 2] if n % 2 else int((s[n // 2 - 1] + s[n // 2]) / 2)
            stack.append(value)
        else:
            stack.append(int(sym))
    assert len(stack) == 1 and isinstance(stack[0], int), "expression must reduce to one value"
    return stack[0], max_depth, max_args


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    cache = tmp_path_factory.mktemp("listops")
    return load_task("listops", seed=0, cache_dir=cache, n_train=2500, n_val=250, n_test=250)


def all_splits(task):
    return (np.concatenate([task.x_train, task.x_val, task.x_test]),
            np.concatenate([task.y_train, task.y_val, task.y_test]))


def test_labels_equal_an_independent_evaluation(task):
    x, y = all_splits(task)
    results = [evaluate(row) for row in x]
    assert [r[0] for r in results] == y.tolist()
    opts = task.info["options"]
    assert max(r[1] for r in results) <= opts["max_depth"] - 1  # leaves only at max_depth
    assert max(r[2] for r in results) <= opts["max_args"]


def test_length_window_padding_and_vocabulary(task):
    x, _ = all_splits(task)
    assert task.tokens and task.vocab_size == 16 and task.in_channels == 1
    assert x.dtype == np.int64 and x.shape[1] == 200 and task.spatial == (200,)
    lengths = (x != 0).sum(1)
    assert lengths.min() > 50 and lengths.max() < 200
    # Padding only at the end.
    first_pad = np.where((x == 0).any(1), (x == 0).argmax(1), x.shape[1])
    assert np.array_equal(first_pad, lengths)
    # Exactly the four LRA operators, digits and the closing bracket.
    assert set(np.unique(x)) == set(range(16))
    np.testing.assert_array_equal(task.x_mean, [0.0])
    np.testing.assert_array_equal(task.x_std, [1.0])


def test_samples_are_distinct(task):
    x, _ = all_splits(task)
    assert len({r.tobytes() for r in x}) == len(x)


def test_label_distribution_has_lra_skew(task):
    _, y = all_splits(task)
    share = np.bincount(y, minlength=10) / len(y)
    assert set(np.argsort(share)[-2:]) == {0, 9}
    assert 0.12 < share[0] < 0.21 and 0.12 < share[9] < 0.21
    assert share[1:9].max() < 0.12


def test_lra_setting_and_seeds(tmp_path):
    lra = load_task("listops", cache_dir=tmp_path, lra=True, n_train=40, n_val=5, n_test=5)
    lengths = (lra.x_train != 0).sum(1)
    assert lra.spatial == (2000,) and lengths.min() > 500 and lengths.max() < 2000
    assert [evaluate(r)[0] for r in lra.x_test] == lra.y_test.tolist()
    small = dict(n_train=50, n_val=5, n_test=5, cache_dir=tmp_path)
    a = load_task("listops", seed=1, **small)
    b = load_task("listops", seed=1, cache_dir=tmp_path / "other", n_train=50, n_val=5, n_test=5)
    c = load_task("listops", seed=2, **small)
    np.testing.assert_array_equal(a.x_train, b.x_train)  # regenerated, not read from a cache
    assert not np.array_equal(a.x_train, c.x_train)
