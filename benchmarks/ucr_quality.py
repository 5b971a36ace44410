"""Default search quality on every bundled set, against the tools a user would otherwise pick.

For each set of 1-D series (by default the bundled UCR/UEA ones; any UCR/UEA set, a user's
``npz:`` series or mnist1d too: :func:`is_series`) and each seed, on the same split (the task's
train/val/test):
- the default search, `python -m search.run --task T --seed S`, no tuning flag (DNArch(K,R,W,D));
- the base CCNN with the same recipe (`--learn none`);
- MiniRocket as its authors ship it, sktime's own classifier (:func:`minirocket_classifier`:
  MiniRocket's features, ``StandardScaler(with_mean=False)``, ``RidgeClassifierCV``), fitted on
  train + val (no selection needed), timed here;
- a plain 1-D CNN, the FCN of Wang et al. (2017), trained here on train + val (:func:`fcn`);
- the published 1-NN (Euclidean) and InceptionTime figures of the task table (search/tasks/ucr.py).
On images (mnist5k, digits, a user's ``npz:`` images) a LeNet-style CNN trained here on the
same split stands in for the peers. Runs are real `search.run` processes, two at a time, one
thread each, reused when their run directory is complete (benchmarks.harness.run_jobs); each
peer fit is a process of its own too (:func:`in_own_process`), and cached in the --out directory
under its configuration (:func:`peer_config`: a MiniRocket fitted another way is not reused).

    python -m benchmarks.ucr_quality --seeds 3                      # the table in README
    python -m benchmarks.ucr_quality --tasks ucr:GunPoint --seeds 1 --out /tmp/uq   # one set
    python -m benchmarks.ucr_quality --variants --no-fcn --out /tmp/uq   # the peers alone

Writes benchmarks/results/ucr_quality.md (and prints it).
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import importlib.util
import json
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import code_state, fmt
from benchmarks.search_quality import describe_arch
from dnarch_deploy.rundir import METRICS, read_jsonl
from search.jobs import Run

UCR = ["ucr:GunPoint", "ucr:ItalyPowerDemand", "ucr:ArrowHead", "ucr:OSULeaf", "ucr:ACSF1",
       "ucr:BasicMotions", "ucr:JapaneseVowels", "ucr:PLAID"]
IMAGES = ["digits", "mnist5k"]
VARIANTS = {"search": "KRWD", "base": "none"}
NAMES = {"search": "default search", "base": "base CCNN", "peer": "peer (MiniRocket / LeNet)",
         "fcn": "plain CNN (FCN)"}


def plan_runs(out: Path, tasks: list[str], seeds: int, variants: list[str],
              extra: list[str]) -> list[Run]:
    runs = []
    for task in tasks:
        slug = harness.slug(task)
        for seed in range(seeds):
            for variant in variants:
                if variant == "base" and not is_series(task):  # images: LeNet stands in
                    continue
                learn = VARIANTS[variant]
                flags = ["--task", task, "--seed", str(seed), *extra]
                if learn != "KRWD":
                    flags += ["--learn", learn]
                runs.append(Run(task, variant, seed, out / f"{slug}-{learn}-s{seed}", flags))
    return runs


# MiniRocket's classifier: RidgeClassifierCV choosing its penalty by leave-one-out among
# np.logspace(*RIDGE_PENALTIES), on features scaled by StandardScaler(with_mean=False), as
# sktime's RocketClassifier (and aeon's MiniRocketClassifier) fit it; benchmarks.ridge_head
# fits the same penalties on a run's standardised features
RIDGE_PENALTIES = (-3, 3, 10)


def minirocket_classifier(seed: int):
    """The MiniRocket peer as its authors ship it: sktime's
    ``RocketClassifier(rocket_transform="minirocket")``, the pipeline MiniRocket (univariate
    sets) or MiniRocketMultivariate (several channels), 10,000 kernels, then
    ``StandardScaler(with_mean=False)``, then ``RidgeClassifierCV(alphas=np.logspace(-3, 3,
    10))``. The ridge on unscaled features, as this peer once was, gave PigCVP 0.774 against
    0.955 scaled, OSULeaf 0.916 against 0.952, ArrowHead 0.890 against 0.855 (3 seeds;
    results/ucr_quality.md)."""
    from sktime.classification.kernel_based import RocketClassifier

    return RocketClassifier(rocket_transform="minirocket", random_state=seed, n_jobs=1)


def sktime_version() -> str:
    try:
        return importlib.metadata.version("sktime")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def minirocket_config() -> str:
    """What the MiniRocket peer is, as its cached fits are keyed: the estimator, sktime's version,
    and that its features are scaled (the fits of an older script, raw features into the ridge,
    are keyed :data:`LEGACY_PEERS`' way and never served for it)."""
    return f"minirocket-sktime-{sktime_version()}-scaled"


LENET_CONFIG = "lenet"
# peers.json once keyed its fits by (task, seed) alone: MiniRocket's on raw features, LeNet's as
# today's
LEGACY_PEERS = {"MiniRocket": "minirocket-raw-features", "LeNet": LENET_CONFIG}


def peer_config(task: str) -> str:
    """The configuration of the set's peer (:func:`peer`), part of its cache key."""
    return minirocket_config() if is_series(task) else LENET_CONFIG


def read_peer_cache(path: Path) -> dict:
    """{(task, seed, configuration): [name, accuracy, seconds]} of a peers.json (empty if none);
    an entry of the old (task, seed) keys gets the configuration it was fitted with. A damaged
    file raises ValueError, TypeError, AttributeError or KeyError."""
    if not path.exists():
        return {}
    cache = {}
    for key, value in json.loads(path.read_text()).items():
        key = tuple(json.loads(key))
        if len(key) == 2:
            key = (*key, LEGACY_PEERS[value[0]])
        if len(key) != 3:
            raise ValueError(f"a key of {len(key)} fields: {key}")
        cache[key] = value
    return cache


def minirocket(task_name: str, seed: int) -> tuple[float, float]:
    """(test accuracy, seconds) of :func:`minirocket_classifier`, fitted on train + val."""
    import numpy as np

    from search.tasks import load_task

    task = load_task(task_name, seed=seed)
    x = np.concatenate([task.x_train, task.x_val]).astype(np.float64)
    y = np.concatenate([task.y_train, task.y_val])
    t0 = time.perf_counter()
    classifier = minirocket_classifier(seed).fit(x, y)
    accuracy = float(classifier.score(task.x_test.astype(np.float64), task.y_test))
    return accuracy, time.perf_counter() - t0


def lenet(task_name: str, seed: int, epochs: int = 30) -> tuple[float, float]:
    """(test accuracy, seconds) of a LeNet-style CNN (two 3x3 conv-BN-ReLU-pool stages, two linear
    layers), AdamW with cosine decay, the best validation epoch's weights on test."""
    import copy

    import torch
    from torch import nn

    from search.tasks import load_task

    task = load_task(task_name, seed=seed)
    mean, std = float(task.x_train.mean()), float(task.x_train.std())

    def tensor(x):
        return (torch.as_tensor(x, dtype=torch.float32) - mean) / std

    xtr, ytr = tensor(task.x_train), torch.as_tensor(task.y_train)
    xval, yval = tensor(task.x_val), torch.as_tensor(task.y_val)
    xte, yte = tensor(task.x_test), torch.as_tensor(task.y_test)
    side = xtr.shape[-1]
    torch.manual_seed(seed)  # the weights and the dropout's draws
    net = nn.Sequential(
        nn.Conv2d(xtr.shape[1], 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * (side // 4) ** 2, 128), nn.ReLU(), nn.Dropout(0.3),
        nn.Linear(128, task.out_channels))
    g = torch.Generator().manual_seed(seed)  # the batches' order
    steps = epochs * (len(xtr) // 64)
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)

    def accuracy(x, y) -> float:
        net.eval()
        with torch.no_grad():
            return float((net(x).argmax(1) == y).float().mean())

    t0 = time.perf_counter()
    best, best_state = -1.0, None
    for _ in range(epochs):
        net.train()
        order = torch.randperm(len(xtr), generator=g)
        for i in range(len(xtr) // 64):
            idx = order[i * 64 : (i + 1) * 64]
            loss = nn.functional.cross_entropy(net(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        val = accuracy(xval, yval)
        if val >= best:
            best, best_state = val, copy.deepcopy(net.state_dict())
    net.load_state_dict(best_state)
    return accuracy(xte, yte), time.perf_counter() - t0


# The plain CNN peer: the fully convolutional network of Wang et al. (2017), the usual deep
# baseline of time-series classification (three conv-BN-ReLU layers of 8, 5 and 3 taps, global
# average pooling, a linear head). The published one has 128 / 256 / 128 channels and trains for
# 2000 epochs; here half the width and the default search's floor of 2000 steps, so that a run
# takes about a search's CPU time (ACSF1 367 s against 261, PLAID 374 against 454).
FCN_WIDTH = 64
FCN_STEPS = 2000


def fcn(task_name: str, seed: int, steps: int = FCN_STEPS,
        width: int = FCN_WIDTH) -> tuple[float, float]:
    """(test accuracy, seconds) of the FCN above, fitted like MiniRocket on train + val with no
    selection (:func:`fit_cnn`)."""
    import torch

    data = cnn_data(task_name, seed)
    torch.manual_seed(seed)
    return fit_cnn(fcn_net(data.in_channels, data.classes, width), data, steps, seed)


def fcn_net(in_channels: int, classes: int, width: int = FCN_WIDTH):
    from torch import nn

    layers, channels = [], in_channels
    for taps, out in ((8, width), (5, 2 * width), (3, width)):
        layers += [nn.ConstantPad1d(((taps - 1) // 2, taps // 2), 0.0),  # 'same', even taps
                   nn.Conv1d(channels, out, taps), nn.BatchNorm1d(out), nn.ReLU()]
        channels = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                         nn.Linear(width, classes))


@dataclass
class CNNData:
    """A task's train + val and test splits as float tensors, normalised for a peer CNN."""
    x: object
    y: object
    x_test: object
    y_test: object
    in_channels: int
    classes: int


def cnn_data(task_name: str, seed: int) -> CNNData:
    """Train + val and test, normalised as the default search's ``--input-norm auto`` would."""
    import numpy as np
    import torch

    from dnarch_deploy.model import SAMPLE_NORM_FLOOR, standardise
    from search.config import SearchConfig
    from search.resolve import input_norm
    from search.tasks import load_task

    task = load_task(task_name, seed=seed)
    x = torch.as_tensor(np.concatenate([task.x_train, task.x_val]), dtype=torch.float32)
    y = torch.as_tensor(np.concatenate([task.y_train, task.y_val]))
    x_test = torch.as_tensor(task.x_test, dtype=torch.float32)
    x_std = torch.as_tensor(task.x_std, dtype=torch.float32)
    if input_norm(SearchConfig(), task) == "sample":
        def normalise(v):
            return standardise(v, (SAMPLE_NORM_FLOOR * x_std) ** 2)
    else:
        mean = torch.as_tensor(task.x_mean, dtype=torch.float32)[:, None]

        def normalise(v):
            return (v - mean) / x_std[:, None]
    return CNNData(normalise(x), y, normalise(x_test), torch.as_tensor(task.y_test),
                   task.in_channels, task.out_channels)


def fit_cnn(net, data: CNNData, steps: int, seed: int, lr: float = 1e-3,
            weight_decay: float = 0.0) -> tuple[float, float]:
    """(test accuracy, seconds): ``net`` fitted on train + val with no selection, Adam (AdamW
    with a weight decay) with cosine decay from ``lr``, batches of 16 drawn by the seed, its
    last weights on test."""
    import torch
    from torch import nn

    opt = (torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay) if weight_decay
           else torch.optim.Adam(net.parameters(), lr=lr))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    batch, g = min(16, len(data.y)), torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    net.train()
    for _ in range(steps):
        idx = torch.randint(len(data.y), (batch,), generator=g)
        loss = nn.functional.cross_entropy(net(data.x[idx]), data.y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    net.eval()
    with torch.no_grad():
        accuracy = float((net(data.x_test).argmax(1) == data.y_test).float().mean())
    return accuracy, time.perf_counter() - t0


def peer(task: str, seed: int) -> tuple[str, float, float]:
    """(name, test accuracy, seconds) of the set's peer: MiniRocket on series, LeNet on images."""
    if is_series(task):
        return ("MiniRocket", *minirocket(task, seed))
    return ("LeNet", *lenet(task, seed))


def fcn_job(task: str, seed: int, width: int = FCN_WIDTH) -> tuple[str, float, float]:
    return ("FCN", *fcn(task, seed, width=width))


def _one_thread(job, *args):
    import torch

    torch.set_num_threads(1)
    try:  # numpy's BLAS and OpenMP pools too (MiniRocket's ridge), as a search run's env sets
        from threadpoolctl import threadpool_limits
    except ImportError:  # no scikit-learn, so no MiniRocket: only torch computes
        return job(*args)
    with threadpool_limits(1):
        return job(*args)


def in_own_process(job, *args):
    """``job(*args)`` in a fresh process with one thread, as each search run is. Peers seed and
    draw global RNGs (torch's, numpy's in MiniRocket's fit), and Python-bound ones hold the GIL:
    two in threads of one process would change each other's results and times."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_one_thread, job, *args).result()


@functools.cache
def task_at_seed_0(task: str):
    """The task loaded once per process at seed 0, for what does not depend on the seed (its
    shape, its test split's size); a wrong name raises TaskError."""
    from search.tasks import load_task

    return load_task(task, seed=0)


def is_series(task: str) -> bool:
    """Classification of 1-D signals (the UCR/UEA sets, a user's ``npz:`` series, mnist1d): the
    base CCNN, MiniRocket and the FCN run on it; images get the LeNet instead."""
    if task.startswith("ucr:"):
        return True
    loaded = task_at_seed_0(task)
    return loaded.kind == "classification" and not loaded.tokens and len(loaded.spatial) == 1


def has_fcn(task: str) -> bool:
    """The FCN peer runs on 1-D signals; the images have the LeNet."""
    return is_series(task)


def anchors(task: str) -> dict:
    if not task.startswith("ucr:"):
        return {}
    from dnarch_deploy.tasks.ucr import ANCHORS

    return ANCHORS.get(task[4:], {})


def beyond_std(a: list[float], b: list[float]) -> int:
    """1 when the mean of ``a`` leads that of ``b`` by more than the larger of their stds, -1 when
    it trails by more, 0 for a tie (README's rule)."""
    spread = max(statistics.stdev(v) if len(v) > 1 else 0.0 for v in (a, b))
    diff = statistics.mean(a) - statistics.mean(b)
    return (diff > spread) - (diff < -spread)


def set_row(args, task: str, runs: list[Run], results: dict, peers: dict, fcns: dict
            ) -> tuple[str, dict[str, list[float]]]:
    """The accuracy table's row of one set, and its accuracies per seed by method."""
    cell, walls, restarts = {}, {}, []
    for variant in args.variants:
        rs = [results[r.run_dir] for r in runs
              if r.key == task and r.variant == variant and r.run_dir in results]
        cell[variant] = [s["test_metric"] for s in rs]
        # the kept attempt's training time plus that of any stalled attempt before it
        walls[variant] = [s["wall_seconds"] + sum(r["seconds"] for r in s.get("restarts", []))
                          for s in rs]
        restarts += [s.get("restarts", 0) for s in rs]
    peer_rows = [peers[(task, s)] for s in range(args.seeds) if (task, s) in peers]
    fcn_rows = [fcns[(task, s)] for s in range(args.seeds) if (task, s) in fcns]
    peer_acc, fcn_acc = [p[1] for p in peer_rows], [p[1] for p in fcn_rows]
    a = anchors(task)
    row = (f"| {task} | {_test_series(task)} | {fmt(cell.get('search', []))} "
           f"| {fmt(cell.get('base', []))} "
           f"| {f'{peer_rows[0][0]} {fmt(peer_acc)}' if peer_rows else '–'} "
           f"| {fmt(fcn_acc) if fcn_rows else '–'} "
           f"| {a.get('1nn_ed', '–')} | {a.get('inceptiontime_split0', '–')} "
           f"| {fmt(walls.get('search', []), 0)} | {fmt(walls.get('base', []), 0)} "
           f"| {fmt([p[2] for p in peer_rows], 1)} "
           f"| {fmt([p[2] for p in fcn_rows], 0) if fcn_rows else '–'} "
           f"| {sum(1 for r in restarts if r)} of {len(restarts)} |")
    accs = {key: values for key, values in (
        ("search", cell.get("search")), ("base", cell.get("base")), ("peer", peer_acc),
        ("fcn", fcn_acc)) if values}
    return row, accs


def accuracy_table(args, runs: list[Run], results: dict, peers: dict, fcns: dict
                   ) -> tuple[list[str], dict[str, dict[str, list[float]]], list[str]]:
    """The table, per set its accuracies by method, and the first seed's architectures."""
    lines = ["| set | test series | default search | base CCNN | peer | plain CNN (FCN) | 1-NN "
             "| InceptionTime | search s/run | base s/run | peer s/run | FCN s/run "
             "| stalled runs (restarted) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    accs, archs = {}, []  # set -> {"search": [accuracy per seed], "base": ..., "peer": ...}
    for task in args.tasks:
        row, accs[task] = set_row(args, task, runs, results, peers, fcns)
        lines.append(row)
        done = [r for r in runs if r.key == task and r.variant == "search"
                and r.run_dir in results]
        if done:
            archs.append(f"- {task} (seed {done[0].seed}): {describe_arch(done[0].run_dir)}")
    return lines, accs, archs


def summary_lines(accs: dict[str, dict[str, list[float]]]) -> list[str]:
    """Means per method, each pair of methods on the sets with both, the search against 1-NN,
    and the seed std where the test split is large."""
    means = {task: {v: statistics.mean(acc) for v, acc in cell.items()}
             for task, cell in accs.items()}
    out = []
    for v in ("search", "base", "peer", "fcn"):  # what an ablation (one variant) is compared by
        done = [m[v] for m in means.values() if v in m]
        if done:
            sets = f"{len(done)} set" + ("s" if len(done) > 1 else "")
            out.append(f"- Mean of the {NAMES[v]} over its {sets}: {statistics.mean(done):.3f}.")
    for (a, b) in (("search", "base"), ("search", "peer"), ("search", "fcn")):
        both = [task for task, m in means.items() if a in m and b in m]
        if both:
            clear = [beyond_std(accs[t][a], accs[t][b]) for t in both
                     if min(len(accs[t][a]), len(accs[t][b])) > 1]  # one seed has no std
            out.append(f"- Mean over the {len(both)} sets with both: {NAMES[a]} "
                       f"{statistics.mean(means[t][a] for t in both):.3f}, {NAMES[b]} "
                       f"{statistics.mean(means[t][b] for t in both):.3f}; the {NAMES[a]} is "
                       f"ahead on {sum(means[t][a] > means[t][b] for t in both)} of {len(both)} "
                       "by the mean" + (f", by more than one std on {clear.count(1)} of the "
                                        f"{len(clear)} with several seeds, behind by more on "
                                        f"{clear.count(-1)}" if clear else "") + ".")
    searched = {task: cell["search"] for task, cell in accs.items() if "search" in cell}
    one_nn = [statistics.mean(acc) >= anchors(task)["1nn_ed"] for task, acc in searched.items()
              if "1nn_ed" in anchors(task)]
    if one_nn:
        out.append(f"- Default search ≥ 1-NN on {sum(one_nn)} of {len(one_nn)} sets.")
    stds = [(task, statistics.stdev(acc)) for task, acc in searched.items()
            if len(acc) > 1 and _test_series(task) >= 100]
    if stds:
        out.append("- Seed std on sets with ≥ 100 test series: "
                   + ", ".join(f"{t} {s:.3f}" for t, s in stds) + ".")
    return out


def header_lines(args, seconds: float, argv: list[str]) -> list[str]:
    """The title, what each cell is, the command, machine, versions and code."""
    path = Path(args.out) / "invocations.json"
    invocations = json.loads(path.read_text()) if path.exists() else []
    return [
        "# Default search quality on the bundled sets",
        "",
        "Each cell: test accuracy, mean ± std over seeds (a CCNN's as export ships it: "
        "BatchNorm calibrated on the training inputs), same split for every method (the task's "
        f"train / val / test; MiniRocket and the FCN, {args.fcn_width} / {2 * args.fcn_width} / "
        f"{args.fcn_width} channels, fit train + val). *default search* is "
        "`python -m search.run --task T --seed S` with no other flag; *base CCNN* adds "
        "`--learn none`; s/run is a run's training time (summary.json wall_seconds, plus the "
        "seconds of a stalled attempt it restarted after)." + (
            f" MiniRocket is sktime {sktime_version()}'s own classifier, "
            "`RocketClassifier(rocket_transform=\"minirocket\")`: MiniRocket's features (its "
            "univariate transform on one channel, MiniRocketMultivariate on several), "
            "`StandardScaler(with_mean=False)`, then `RidgeClassifierCV(alphas=np.logspace(-3, "
            "3, 10))`; cached as " + f"`{minirocket_config()}`."
            if any(is_series(task) for task in args.tasks) else ""),
        "",
        *harness.header(__file__, argv, machine_note=f", {args.jobs} runs at a time, 1 thread "
                        f"each; this invocation {seconds / 60:.0f} min wall"),
        "Code the runs were trained with: " + ("; ".join(
            f"{i['code']} ({i['trained']} runs or peer fits from {i['started']}, "
            f"{i['seconds'] / 60:.0f} min "
            "wall)" for i in invocations)
            or code_state()) + "." + (f"  \n**Every run also** `{args.extra}`." if args.extra
                                      else ""),
        "",
    ]


def every_run_lines(runs: list[Run], results: dict) -> list[str]:
    return ["", "## Every run", "",
            "Its test accuracy (the shipped network's: BatchNorm calibrated on the training "
            "inputs, as export ships it); the same network scored as the search scores its "
            "validation rounds, BatchNorm on each test batch's own statistics (– for runs written "
            "before summary.json recorded it); the validation round the result rule chose "
            "(0-based); and the training objective of its last round (the mean over that round's "
            "steps, augmentation and label smoothing included: near 0, or near the smoothing's "
            "floor, the network fits its training split).", "",
            "| set | variant | seed | test accuracy | batch statistics | chosen round "
            "| last training loss |",
            "|---|---|---|---|---|---|---|",
            *(f"| {r.key} | {r.variant} | {r.seed} | {results[r.run_dir]['test_metric']:.3f} "
              f"| {fmt_batch_statistics(results[r.run_dir])} "
              f"| {results[r.run_dir]['best_epoch']} | {fmt_loss(results[r.run_dir])} |"
              for r in runs if r.run_dir in results)]


def report(args, runs: list[Run], results: dict, peers: dict, fcns: dict,
           seconds: float, argv: list[str] = ()) -> str:
    table, accs, archs = accuracy_table(args, runs, results, peers, fcns)
    return "\n".join([
        *header_lines(args, seconds, argv), *table, "", *summary_lines(accs),
        *every_run_lines(runs, results),
        "", "## Architectures found (default search, first seed)", "",
        "Per block: kernel size K and resolution R per axis, widths n_in/n_mid/n_out.", "",
        *archs]) + "\n"


def parse(argv: list[str]) -> tuple[argparse.Namespace, Path, tuple[dict, dict]]:
    """The arguments, --out made, and the peers already fitted there (:func:`read_caches`): a
    wrong task, a bad width, a place that cannot be written or a damaged cache is one parser
    error before any run."""
    parser = harness.parser(__doc__)
    harness.add_searches(parser, __file__, out="runs/ucr_quality")
    parser.add_argument("--tasks", nargs="*", default=UCR + IMAGES)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--no-peer", action="store_true",
                        help="skip the peers (MiniRocket / LeNet and the FCN)")
    parser.add_argument("--no-fcn", action="store_true",
                        help="skip the FCN peer only (29 min of the 8 UCR/UEA sets, 3 seeds, "
                        "2 jobs; ucr_quality_fcn.md)")
    parser.add_argument("--fcn-width", type=int, default=FCN_WIDTH,
                        help="the FCN peer's channels: WIDTH, 2 WIDTH, WIDTH (published: 128)")
    args = parser.parse_args(argv)
    if args.fcn_width < 1:
        parser.error(f"--fcn-width must be at least 1, got {args.fcn_width}")
    if not args.no_peer and importlib.util.find_spec("numba") is None:
        parser.error("MiniRocket needs numba: pip install -e '.[bench]' (or pass --no-peer)")
    from dnarch_deploy.tasks import TaskError

    for task in args.tasks:  # a wrong name: one message before any directory or report is made
        try:
            task_at_seed_0(task)
        except TaskError as e:
            parser.error(str(e))
    out = Path(args.out).resolve()
    # both places writable before any run: a bad --results would lose the report at the end
    harness.check_report(parser, args.results, "--results")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        parser.error(f"--out {args.out}: cannot write there ({e.strerror or e})")
    try:
        return args, out, read_caches(out, args.fcn_width)
    except (ValueError, AttributeError, TypeError, KeyError) as e:
        parser.error(f"a peer cache in {out} is damaged ({e}); delete it to fit the peers again")


def read_caches(out: Path, fcn_width: int) -> tuple[dict, dict]:
    """The peers already fitted in ``out``: MiniRocket / LeNet by (task, seed, configuration),
    the FCN of this width by (task, seed)."""
    peers = read_peer_cache(out / "peers.json")
    path = out / f"fcn_width{fcn_width}.json"
    fcns = ({tuple(json.loads(k)): v for k, v in json.loads(path.read_text()).items()}
            if path.exists() else {})
    return peers, fcns


def peer_jobs(args, peers: dict, fcns: dict, configs: dict) -> dict:
    """The peer fits not cached yet, as run_jobs' other jobs: (which, task, seed[, config])."""
    jobs = {}
    for task in [] if args.no_peer else args.tasks:
        for seed in range(args.seeds):
            if (task, seed, configs[task]) not in peers:
                jobs[("peer", task, seed, configs[task])] = (in_own_process, peer, task, seed)
            if not args.no_fcn and has_fcn(task) and (task, seed) not in fcns:
                jobs[("fcn", task, seed)] = (in_own_process, fcn_job, task, seed, args.fcn_width)
    return jobs


def record_invocation(out: Path, t0: float, code: str, trained: int) -> None:
    """invocations.json: this invocation's start, code, runs and peer fits trained, wall time."""
    path = out / "invocations.json"
    invocations = json.loads(path.read_text()) if path.exists() else []
    invocations.append({"started": harness.utc(t0), "code": code, "trained": trained,
                        "seconds": round(time.time() - t0)})
    path.write_text(json.dumps(invocations, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = harness.arguments(argv)
    args, out, (peers, fcns) = parse(argv)
    runs = plan_runs(out, args.tasks, args.seeds, args.variants, args.extra.split())
    configs = {task: peer_config(task) for task in args.tasks}
    t0, code = time.time(), code_state()  # at the start: the code the runs load
    timings: dict[str, float] = {}
    jobs = peer_jobs(args, peers, fcns, configs)

    def cache(key, value) -> None:  # each peer's fit kept as soon as it is done
        if isinstance(key, tuple) and not isinstance(value, Exception):
            mine, path = ((peers, out / "peers.json") if key[0] == "peer" else
                          (fcns, out / f"fcn_width{args.fcn_width}.json"))
            mine[key[1:]] = value
            path.write_text(json.dumps({json.dumps(k): v for k, v in mine.items()}))

    results, failed = harness.run_jobs(runs, args.jobs, timings, jobs, after=cache)
    results = {key: {**value, "train_loss": _last_train_loss(key)}
               for key, value in results.items() if isinstance(key, Path)}
    if timings or jobs:  # this invocation trained runs or peers: say with which code
        record_invocation(out, t0, code, len(timings) + len(jobs))
    shown = {(task, seed): peers[(task, seed, configs[task])] for task in args.tasks
             for seed in range(args.seeds) if (task, seed, configs[task]) in peers}
    text = report(args, runs, results, shown, fcns, time.time() - t0, argv)
    harness.publish(text, args.results)
    return 1 if failed else 0


def _last_train_loss(run_dir: Path) -> float | None:
    """The training objective of the run's last round (metrics.jsonl), None if it has none."""
    rows = [r for r in read_jsonl(run_dir / METRICS) if r["split"] == "train"]
    return rows[-1]["loss_obj"] if rows else None


def fmt_batch_statistics(summary: dict) -> str:
    """The batch-statistics test metric of a run's summary, – when it predates the field."""
    value = summary.get("test_metric_batch_statistics")
    return "–" if value is None else f"{value:.3f}"


def fmt_loss(result: dict) -> str:
    loss = result.get("train_loss")
    return "–" if loss is None else f"{loss:.3f}"


def _test_series(task: str) -> int:
    """Test series in the task's split."""
    return len(task_at_seed_0(task).y_test)


if __name__ == "__main__":
    sys.exit(main())
