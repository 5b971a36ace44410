"""benchmarks.ucr_quality: its peers, its report, and bad input refused through the command line
as a user runs it."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from benchmarks import ucr_quality as U
from tests.benchmarks.scripts import run


@pytest.mark.slow
def test_an_unknown_task_is_refused_before_any_run_or_report(tmp_path):
    out, results = tmp_path / "runs", tmp_path / "results.md"
    proc = run("ucr_quality", "--tasks", "ucr:GunPoint", "ucr:Nope", "--no-peer", "--out", out,
               "--results", results, timeout=300)
    assert proc.returncode == 2
    assert "error: ucr:Nope: no bundled set named 'Nope'" in proc.stderr
    assert not out.exists() and not results.exists()


@pytest.mark.slow
@pytest.mark.parametrize(("where", "says"), [
    ("out", "--out {out}: cannot write there"),  # --out under a file
    ("results", "--results {results}: cannot write a report there"),  # --results under a file
    ("results_dir", "--results {results}: cannot write a report there ({results} is a "
                    "directory)"),
])
def test_an_unwritable_out_or_results_is_refused_before_any_run(tmp_path, where, says):
    """One message and exit 2 before training, not a traceback (or a lost report) after it."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out, results = tmp_path / "runs", tmp_path / "results.md"
    if where == "out":
        out = blocker / "runs"
    elif where == "results":
        results = blocker / "results.md"
    else:
        results = tmp_path
    proc = run("ucr_quality", "--tasks", "ucr:GunPoint", "--seeds", "1", "--variants", "search",
               "--no-peer", "--out", out, "--results", results, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert says.format(out=out, results=results) in proc.stderr.splitlines()[-1]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results.md").exists()


@pytest.mark.slow
def test_an_fcn_width_below_one_is_refused_before_any_run(tmp_path):
    out, results = tmp_path / "runs", tmp_path / "results.md"
    proc = run("ucr_quality", "--tasks", "ucr:GunPoint", "--seeds", "1", "--fcn-width", "0",
               "--out", out, "--results", results, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--fcn-width must be at least 1, got 0" in proc.stderr.splitlines()[-1]
    assert not out.exists() and not results.exists()


@pytest.mark.slow
@pytest.mark.parametrize(("cache", "text"), [
    ("peers.json", "{broken"),
    ("fcn_width64.json", "{broken"),
    ("peers.json", '{"[\\"ucr:GunPoint\\", 0]": ["Nope", 0.5, 1.0]}'),  # an old key, no peer
    ("peers.json", '{"[\\"ucr:GunPoint\\"]": ["MiniRocket", 0.5, 1.0]}'),  # no seed
])
def test_a_damaged_peer_cache_is_refused_before_any_run(tmp_path, cache, text):
    out, results = tmp_path / "runs", tmp_path / "results.md"
    out.mkdir()
    (out / cache).write_text(text)
    proc = run("ucr_quality", "--tasks", "ucr:GunPoint", "--seeds", "1", "--variants",
               "--no-peer", "--out", out, "--results", results, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"a peer cache in {out} is damaged" in proc.stderr.splitlines()[-1]
    assert not results.exists() and (out / cache).read_text() == text


def test_the_report_lists_every_run_with_its_chosen_round(tmp_path):
    """The per-seed figures behind each mean ± std: accuracy and the round the result rule
    chose, one row per run, in plan order."""
    import argparse


    args = argparse.Namespace(tasks=["ucr:GunPoint"], variants=["base"], seeds=2,
                              out=str(tmp_path), extra="", jobs=2, fcn_width=64)
    runs = U.plan_runs(tmp_path, args.tasks, args.seeds, args.variants, [])
    results = {r.run_dir: {"test_metric": acc, "best_epoch": epoch, "wall_seconds": 10.0,
                           "train_loss": loss}
               for r, acc, epoch, loss in zip(runs, (0.9867, 0.5), (49, 4), (0.0123, None))}
    results[runs[0].run_dir]["test_metric_batch_statistics"] = 0.9733  # an older run has none
    fcns = {("ucr:GunPoint", 0): ["FCN", 0.98, 30.0], ("ucr:GunPoint", 1): ["FCN", 0.96, 34.0]}
    text = U.report(args, runs, results, {}, fcns, 1.0)
    assert "| ucr:GunPoint | 150 | – | 0.743 ± 0.344 |" in text  # the rows' mean ± std
    assert "| 0.970 ± 0.014 | 0.913 |" in text  # the FCN's two seeds, then the 1-NN anchor
    assert "| 32 ± 3 |" in text  # the FCN's seconds a run
    assert "- Mean of the base CCNN over its 1 set: 0.743." in text
    rows = text.split("## Every run")[1]
    assert "| ucr:GunPoint | base | 0 | 0.987 | 0.973 | 49 | 0.012 |" in rows
    assert "| ucr:GunPoint | base | 1 | 0.500 | – | 4 | – |" in rows  # no training round


def test_every_ucr_set_gets_its_base_and_the_images_do_not(tmp_path):
    """The base CCNN runs beside the search on any UCR/UEA set, bundled in the task table or
    not (ucr:UnitTest, sktime's other classification set); the images have the LeNet instead."""

    runs = U.plan_runs(tmp_path, ["ucr:UnitTest", "digits"], 1, ["search", "base"], [])
    assert [(r.key, r.variant) for r in runs] == [
        ("ucr:UnitTest", "search"), ("ucr:UnitTest", "base"), ("digits", "search")]


def test_a_users_npz_series_gets_the_series_peers_and_an_npz_image_the_lenet(tmp_path,
                                                                            monkeypatch):
    """A user's own arrays (``npz:``) are judged as their shape says: 1-D series get the base
    CCNN, MiniRocket and the FCN, as the UCR/UEA sets do; images get the LeNet. (The peers are
    stubbed: MiniRocket needs numba, which only the bench extra installs.)"""
    import numpy as np


    rng = np.random.default_rng(0)
    for name, shape in (("series", (40, 1, 30)), ("images", (40, 1, 8, 8))):
        np.savez(tmp_path / f"{name}.npz", x_train=rng.normal(size=shape).astype(np.float32),
                 y_train=np.arange(40) % 2, x_test=rng.normal(size=shape).astype(np.float32),
                 y_test=np.arange(40) % 2)
    series, images = f"npz:{tmp_path / 'series.npz'}", f"npz:{tmp_path / 'images.npz'}"
    runs = U.plan_runs(tmp_path, [series, images], 1, ["search", "base"], [])
    assert [(r.key, r.variant) for r in runs] == [
        (series, "search"), (series, "base"), (images, "search")]
    assert U.has_fcn(series) and not U.has_fcn(images)
    monkeypatch.setattr(U, "minirocket", lambda task, seed: (0.5, 0.0))
    monkeypatch.setattr(U, "lenet", lambda task, seed: (0.25, 0.0))
    assert U.peer(series, 0) == ("MiniRocket", 0.5, 0.0)
    assert U.peer(images, 0) == ("LeNet", 0.25, 0.0)
    assert U.peer_config(series) == U.minirocket_config() and U.peer_config(images) == "lenet"


def test_the_report_counts_a_lead_inside_one_std_as_a_tie(tmp_path, monkeypatch):
    """'Ahead on N' counts the means; a lead counts as clear only beyond the larger std."""
    import argparse


    assert U.beyond_std([0.9, 0.9], [0.8, 0.8]) == 1 and U.beyond_std([0.8], [0.9]) == -1
    assert U.beyond_std([0.90, 0.94], [0.89, 0.89]) == 1  # 0.03 ahead, std 0.028: beyond it
    assert U.beyond_std([0.90, 0.96], [0.89, 0.89]) == 0  # 0.04 ahead, std 0.042: a tie
    tasks = ["ucr:GunPoint", "ucr:ArrowHead"]
    args = argparse.Namespace(tasks=tasks, variants=["search"], seeds=2, out=str(tmp_path),
                              extra="", jobs=2, fcn_width=64)
    runs = U.plan_runs(tmp_path, tasks, 2, ["search"], [])
    search = {"ucr:GunPoint": (0.90, 0.96), "ucr:ArrowHead": (0.70, 0.72)}
    fcn = {"ucr:GunPoint": (0.89, 0.89), "ucr:ArrowHead": (0.80, 0.80)}
    results = {r.run_dir: {"test_metric": search[r.key][r.seed], "best_epoch": 1,
                           "wall_seconds": 1.0, "train_loss": 0.1} for r in runs}
    fcns = {(t, s): ["FCN", fcn[t][s], 1.0] for t in tasks for s in (0, 1)}
    monkeypatch.setattr(U, "describe_arch", lambda run_dir: "(no run directory here)")
    text = U.report(args, runs, results, {}, fcns, 1.0)
    assert ("the default search is ahead on 1 of 2 by the mean, by more than one std on 0 of "
            "the 2 with several seeds, behind by more on 1.") in text
    args.seeds = 1  # one seed a set: no std, so no claim beyond the means
    one = [r for r in runs if r.seed == 0]
    fcns = {key: value for key, value in fcns.items() if key[1] == 0}
    text = U.report(args, one, results, {}, fcns, 1.0)
    assert "the default search is ahead on 1 of 2 by the mean.\n" in text


def test_the_last_training_loss_is_the_last_train_rounds(tmp_path):
    """metrics.jsonl's last 'train' row, past later validation and test rows; None without one."""

    rows = [{"split": "train", "loss_obj": 0.9}, {"split": "val", "loss_obj": 0.5},
            {"split": "train", "loss_obj": 0.38}, {"split": "val", "loss_obj": 0.7},
            {"split": "test", "loss": 0.6}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert U._last_train_loss(tmp_path) == 0.38
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"split": "test", "loss": 0.6}) + "\n")
    assert U._last_train_loss(tmp_path) is None


@pytest.mark.slow
def test_the_fcn_peer_learns_a_bundled_set_on_its_split():
    """The plain CNN peer trains on train + val and scores the task's test split: on GunPoint
    (150 test series, two classes) 300 steps are far above chance; the same seed gives the same
    figure."""
    import torch

    torch.set_num_threads(1)
    accuracy, seconds = U.fcn("ucr:GunPoint", seed=0, steps=300, width=16)
    assert 0.8 <= accuracy <= 1.0 and seconds > 0
    # each peer trains in its own process: two seeds side by side give what each gives alone
    other = U.fcn("ucr:GunPoint", seed=1, steps=300, width=16)[0]
    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(U.in_own_process, U.fcn, "ucr:GunPoint", seed, 300, 16)
                for seed in (0, 1)]
        assert [job.result()[0] for job in jobs] == [accuracy, other]
    assert U.has_fcn("ucr:PLAID") and not U.has_fcn("digits")


@pytest.mark.slow
def test_the_lenet_peer_gives_a_seed_the_same_figure_beside_another():
    """The images' peer draws dropout from torch's global RNG at every step: two seeds side by
    side, each in its own process, give what each gives alone (in threads of one process, as
    peers once ran, they drew from one RNG and each changed the other's figure). Alone is in a
    fresh process too: this one's global settings are those of whichever tests ran before."""
    import torch

    torch.set_num_threads(1)
    alone = [U.in_own_process(U.lenet, "digits", seed, 3)[0] for seed in (0, 1)]
    assert min(alone) >= 0.5  # 10 classes: far above chance after 3 epochs
    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(U.in_own_process, U.lenet, "digits", seed, 3) for seed in (0, 1)]
        assert [job.result()[0] for job in jobs] == alone


def _series_npz(path, seed=0):
    """Two classes of noisy sines, one frequency each: a series set any peer separates."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, 64)

    def split(n):
        y = np.arange(n) % 2
        x = np.sin(2 * np.pi * (3 + 4 * y)[:, None] * t) + 0.3 * rng.normal(size=(n, 64))
        return x[:, None, :].astype(np.float32), y

    (x_train, y_train), (x_test, y_test) = split(40), split(40)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return f"npz:{path}"


@pytest.mark.slow
def test_the_minirocket_peer_is_sktimes_classifier_scaling_its_features_before_the_ridge():
    """The peer is MiniRocket as sktime ships it (RocketClassifier, as aeon's
    MiniRocketClassifier too): its features through StandardScaler(with_mean=False), then
    RidgeClassifierCV over ucr_quality's penalties, for one channel and for several. (Built, not
    fitted: numba, which fitting needs, is only in the bench extra.)"""
    pytest.importorskip("sktime")
    import warnings

    import numpy as np
    from sklearn.linear_model import RidgeClassifierCV
    from sklearn.preprocessing import StandardScaler


    with warnings.catch_warnings():  # sktime warns at construction when numba is missing
        warnings.simplefilter("ignore")
        classifier = U.minirocket_classifier(seed=3)
    assert type(classifier).__name__ == "RocketClassifier"
    assert classifier.rocket_transform == "minirocket" and classifier.random_state == 3
    for pipeline, transform in ((classifier.univar_rocket_, "MiniRocket"),
                                (classifier.multivar_rocket_, "MiniRocketMultivariate")):
        rocket, scale = pipeline.transformers
        assert type(rocket).__name__ == transform and rocket.random_state == 3
        assert rocket.num_kernels == 10_000
        assert isinstance(scale.transformer, StandardScaler)
        assert scale.transformer.with_mean is False and scale.transformer.with_std is True
        ridge = pipeline.classifier
        assert isinstance(ridge, RidgeClassifierCV)
        np.testing.assert_array_equal(ridge.alphas, np.logspace(*U.RIDGE_PENALTIES))
    config = U.minirocket_config()
    assert config == f"minirocket-sktime-{U.sktime_version()}-scaled"


def test_the_minirocket_peer_fits_offline_and_its_ridge_sees_scaled_features(tmp_path):
    """Fitted (numba present): far above chance on a separable set, the same figure for the same
    seed, and the ridge's inputs are MiniRocket's features each scaled to unit variance over the
    training series, not centred (they stay non-negative proportions)."""
    pytest.importorskip("numba")
    import numpy as np

    from search.tasks import load_task

    task = _series_npz(tmp_path / "series.npz")
    accuracy, seconds = U.minirocket(task, 0)
    assert accuracy >= 0.9 and seconds > 0
    assert U.minirocket(task, 0)[0] == accuracy
    loaded = load_task(task, seed=0)
    x = np.concatenate([loaded.x_train, loaded.x_val]).astype(np.float64)
    y = np.concatenate([loaded.y_train, loaded.y_val])
    fitted = U.minirocket_classifier(0).fit(x, y).estimator_
    features = np.asarray(fitted.transformers_.transform(x))
    spread = features.std(axis=0)
    varying = spread > 1e-6
    assert varying.sum() > features.shape[1] // 2
    np.testing.assert_allclose(spread[varying], 1.0, rtol=1e-6)
    assert features.min() >= 0.0


@pytest.mark.slow
def test_an_out_folder_serves_only_peers_fitted_as_today(tmp_path):
    """peers.json keys each fit by its configuration: an old folder's MiniRocket (raw features
    into the ridge, keyed (task, seed) alone) is not reported as today's peer, its LeNet (unchanged)
    is; a fit under today's configuration is; another sktime version is another key."""

    out, results = tmp_path / "runs", tmp_path / "results.md"
    out.mkdir()
    old = {json.dumps(["ucr:GunPoint", 0]): ["MiniRocket", 0.5, 1.0],
           json.dumps(["digits", 0]): ["LeNet", 0.25, 2.0]}
    (out / "peers.json").write_text(json.dumps(old))
    assert U.read_peer_cache(out / "peers.json") == {
        ("ucr:GunPoint", 0, "minirocket-raw-features"): ["MiniRocket", 0.5, 1.0],
        ("digits", 0, "lenet"): ["LeNet", 0.25, 2.0]}
    command = ["--tasks", "ucr:GunPoint", "digits", "--seeds", "1", "--variants", "--no-peer",
               "--out", out, "--results", results]
    proc = run("ucr_quality", *command, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = results.read_text()
    assert "| ucr:GunPoint | 150 | – | – | – |" in text  # the unscaled figure is not served
    assert "| digits | 899 | – | – | LeNet 0.250 |" in text
    assert f"cached as `{U.minirocket_config()}`" in text
    assert "`StandardScaler(with_mean=False)`, then `RidgeClassifierCV(" in text

    today = {**old, json.dumps(["ucr:GunPoint", 0, U.minirocket_config()]):
             ["MiniRocket", 0.75, 1.0]}
    (out / "peers.json").write_text(json.dumps(today))
    proc = run("ucr_quality", *command, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "| ucr:GunPoint | 150 | – | – | MiniRocket 0.750 |" in results.read_text()


def test_the_minirocket_cache_key_changes_with_sktimes_version(monkeypatch):

    monkeypatch.setattr(U.importlib.metadata, "version", lambda name: "9.9.9")
    assert U.minirocket_config() == "minirocket-sktime-9.9.9-scaled"
    assert U.peer_config("ucr:GunPoint") == "minirocket-sktime-9.9.9-scaled"
    assert U.peer_config("digits") == "lenet"
