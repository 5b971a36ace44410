"""search.run end to end: the run directory contract, refusal to overwrite, bad input."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from dnarch_deploy import Architecture, DNArch, ModelConfig
from dnarch_deploy import rundir as R
from dnarch_deploy.cost import architecture_cost
from dnarch_deploy.params import architecture_params
from search.budget import latency_check_steps, scheduled_target
from search.config import SearchConfig, build_parser, parse_args
from search.jobs import set_flag
from search.resolve import in_effect, label_smoothing, learned, smoothed_entropy
from search.result import RESULT_WINDOW, is_result, result_fits, smoothed, stalled
from search.train import objective, trained_params

from .conftest import TINY, run_search


def test_run_directory_has_every_file_and_key(tiny_run):
    for name in (R.CONFIG, R.METRICS, R.ARCHITECTURES, R.ARCHITECTURE, R.SUMMARY,
                 R.BEST_WEIGHTS, R.LAST_WEIGHTS):
        assert (tiny_run / name).is_file(), name
    config = R.read_config(tiny_run)
    assert config.task == "ucr:GunPoint" and config.seed == 0
    assert config.model["learn"] == "KRWD" and config.model["depth"] == 1
    assert {"python", "torch"} <= set(config.versions)
    summary = R.read_summary(tiny_run)
    assert summary.metric_name == "accuracy" and 0.0 <= summary.test_metric <= 1.0
    # the summary's MACs are the cost model evaluated on the saved architecture
    assert math.isclose(summary.macs, architecture_cost(R.read_architecture(tiny_run)))


def test_metrics_and_snapshots_one_per_epoch(tiny_run):
    rows = R.read_jsonl(tiny_run / R.METRICS)
    for split in ("train", "val"):
        assert [r["epoch"] for r in rows if r["split"] == split] == [0, 1, 2]
    train = [r for r in rows if r["split"] == "train"]
    assert all(r["loss"] >= r["loss_obj"] >= 0 and r["complexity_ratio"] > 0 for r in train)
    assert [r["step"] for r in train] == [5, 10, 15]  # 40 training samples, batch 8: 5 steps
    test = [r for r in rows if r["split"] == "test"]
    assert len(test) == 1 and test[0]["accuracy"] == R.read_summary(tiny_run).test_metric
    snapshots = R.read_architectures(tiny_run)
    assert [a.epoch for a in snapshots] == [0, 1, 2]
    assert all(isinstance(a, Architecture) for a in snapshots)


def test_result_is_the_latest_epoch_within_one_standard_error_of_the_best(tiny_run):
    """summary.json reports, among the epochs whose network costs at most (1 + budget_tolerance)
    C_target (all epochs if none does), the latest whose validation accuracy, averaged over the
    last RESULT_WINDOW epochs, is within one plus-four binomial standard error of the best
    average."""
    tol = R.read_config(tiny_run).train["budget_tolerance"]
    val = [r for r in R.read_jsonl(tiny_run / R.METRICS) if r["split"] == "val"]
    means = [statistics.mean(r["metric"] for r in val[max(0, i - RESULT_WINDOW + 1):i + 1])
             for i in range(len(val))]
    fits = [i for i, r in enumerate(val) if r["complexity_ratio"] <= 1 + tol]
    rounds = fits or range(len(val))
    top = max(means[i] for i in rounds)
    n_val = len(R.load_run(tiny_run).task.y_val)
    p = (top * n_val + 2) / (n_val + 4)
    close = [i for i in rounds if means[i] >= top - math.sqrt(p * (1 - p) / n_val)]
    summary = R.read_summary(tiny_run)
    assert summary.best_epoch == val[close[-1]]["epoch"]
    assert summary.within_budget == bool(fits)


def _rounds(rounds, higher=True, standard_error=lambda v: 0.0):
    """The result epoch after feeding (metric, fits) rounds to is_result."""
    best, result = None, None
    for epoch, (metric, fits) in enumerate(rounds):
        chosen, best = is_result(metric, fits, best, higher, standard_error)
        result = epoch if chosen else result
    return result


def test_an_epoch_within_the_budget_beats_any_over_it():
    assert _rounds([(0.5, True)]) == 0 and _rounds([(0.5, False)]) == 0  # the first is a result
    assert _rounds([(0.9, False), (0.5, True)]) == 1  # fits beats better over budget
    assert _rounds([(0.5, True), (0.99, False)]) == 0  # over never replaces fit
    assert _rounds([(0.5, False), (0.9, False)]) == 1  # both over: the metric decides
    assert _rounds([(0.5, True), (0.5, True)]) == 1  # a tie: the later round
    assert _rounds([(0.5, True), (0.4, True)]) == 0
    assert _rounds([(0.2, True), (0.1, True)], higher=False) == 1  # lower is better (rel_l2)


def test_without_a_budget_every_round_within_the_parameter_limit_counts_as_fitting(tiny_run):
    """--lam 0 holds the search to no budget: a round at 3x C_target still counts as fitting for
    the result rule (else the rule picks a round from before the network grew); --max-params
    still binds."""
    arch = Architecture.load(tiny_run / R.ARCHITECTURE)
    params = architecture_params(arch)
    tol = SearchConfig().budget_tolerance
    for lam, ratio, max_params, expected in [
            (5.0, 1.0 + tol, 0, True), (5.0, 1.0 + 2 * tol, 0, False), (0.0, 3.0, 0, True),
            (0.0, 3.0, params, True), (0.0, 3.0, params - 1, False), (5.0, 1.0, params - 1, False)]:
        cfg = SearchConfig(lam=lam, max_params=max_params)
        assert result_fits(cfg, ratio, arch) is expected, (lam, ratio, max_params)


def test_one_lucky_round_does_not_set_the_bar_for_the_rest_of_the_run():
    """OSULeaf, seed 0, on its 40-sample validation split: one round at 0.90 among rounds at
    0.75-0.82. Round by round it stays the result to the end; averaged over RESULT_WINDOW rounds
    the latest round is."""
    metrics = [0.68, 0.78, 0.65, 0.80, 0.70, 0.78, 0.75, 0.85, 0.68, 0.78, 0.78, 0.90] + [0.80] * 20
    se = lambda v: math.sqrt(v * (1 - v) / 40)  # noqa: E731
    assert _rounds([(m, True) for m in metrics], standard_error=se) == 11
    history, best, result = [], None, None
    for epoch, m in enumerate(metrics):
        history.append(m)
        chosen, best = is_result(smoothed(history), True, best, True, se)
        result = epoch if chosen else result
    assert result == len(metrics) - 1


def test_the_smoothed_metric_is_the_mean_of_the_last_rounds():
    assert smoothed([1.0]) == 1.0
    assert smoothed([0.0, 1.0, 0.5]) == 0.5  # fewer rounds than the window: all of them
    assert smoothed([9.0] + [1.0] * RESULT_WINDOW) == 1.0  # only the last RESULT_WINDOW


def test_the_latest_round_within_one_standard_error_of_the_top_is_the_result():
    se = 0.1  # e.g. accuracy 0.9 on 9 validation samples
    rounds = [(0.6, True), (0.9, True), (0.85, True), (0.7, True)]
    assert _rounds(rounds, standard_error=lambda v: se) == 2  # 0.85 >= 0.9 - 0.1; 0.7 is not
    assert _rounds(rounds) == 1  # no slack: the top round
    # the slack is taken at the top seen so far: a later, better round resets the bar
    assert _rounds([(0.5, True), (0.45, True), (1.0, True), (0.5, True)],
                   standard_error=lambda v: 0.1) == 2
    assert _rounds([(0.3, True), (0.35, True)], higher=False, standard_error=lambda v: 0.1) == 1


def test_the_standard_error_of_accuracy_is_binomial_at_the_plus_four_estimate(tiny_run):
    """sqrt(p (1 - p) / n) at p = (a n + 2) / (n + 4): a perfect score on 10 samples keeps a
    slack of about one sample (the plain estimate's is 0)."""
    task = R.load_run(tiny_run).task
    assert math.isclose(task.standard_error(0.8, 100), math.sqrt((82 / 104) * (22 / 104) / 100))
    assert math.isclose(task.standard_error(1.0, 10), math.sqrt((12 / 14) * (2 / 14) / 10))
    assert task.standard_error(1.0, 10) > 0.1  # one sample of ten


def test_checkpoints_load_with_weights_only(tiny_run):
    state_dirs = sorted((tiny_run / R.CHECKPOINTS).glob("epoch-*"))
    assert [d.name for d in state_dirs] == ["epoch-00002"]  # older ones are removed
    state = torch.load(state_dirs[0] / "state.pt", weights_only=True)
    assert state["epoch"] == 2 and state["step"] == 15
    weights = load_file(str(state_dirs[0] / "model.safetensors"))
    last = load_file(str(tiny_run / R.LAST_WEIGHTS))
    assert weights.keys() == last.keys()
    assert all(torch.equal(weights[k], last[k]) for k in weights)


def test_load_run_gives_the_trained_model(tiny_run):
    run = R.load_run(tiny_run)
    assert not run.model.training
    x = torch.as_tensor(run.task.x_test[:4])
    assert run.model(x).shape == (4, 2)
    assert run.summary.task == "ucr:GunPoint"


@pytest.mark.slow
def test_existing_run_dir_is_refused_and_untouched(tiny_run):
    before = {p: p.stat().st_mtime_ns for p in tiny_run.rglob("*")}
    proc = run_search(*TINY, "--out", str(tiny_run), check=False)
    assert proc.returncode == 2
    assert "already exists" in proc.stderr and "--resume" in proc.stderr
    assert {p: p.stat().st_mtime_ns for p in tiny_run.rglob("*")} == before


@pytest.fixture
def main_here(monkeypatch):
    """search.run.main, to call in this process: no progress bars, one process, and the
    process-wide settings main makes (its warning format, flushed denormals) left as they were."""
    import warnings

    from search import run

    monkeypatch.setenv("CI", "1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    monkeypatch.setattr("search.train.flush_denormals", lambda: None)
    return run.main


@pytest.mark.slow
def test_bad_input_gives_one_clear_message(tmp_path, capsys, main_here):
    """Each bad flag: exit status 2, one line naming it, nothing created. search.run.main runs in
    this process (an interpreter start per case took a minute); the first case also runs as the
    real command."""
    cases = [
        (["--task", "nosuchtask"], "nosuchtask"),
        (["--budget", "0"], "--budget"),
        (["--budget", "-1"], "--budget"),
        (["--learn", "XYZ"], "--learn"),
        (["--learn", "none", "--budget", "0.5"], "--budget"),
        (["--epochs", "-1"], "--epochs"),
        (["--steps", "-5"], "--steps"),
        (["--steps", "10", "--epochs", "2"], "not both"),
        (["--warmup", "1"], "--warmup"),
        (["--shift", "1.5"], "--shift"),
        (["--restarts", "-1"], "--restarts"),
        (["--device", "cuda"] if not torch.cuda.is_available() else ["--device", "tpu"],
         "--device"),
        (["--task-option", "oops"], "--task-option"),
        (["--budget-tolerance", "-0.1"], "--budget-tolerance"),
        (["--pool", "max"], "--pool must be one of avg, avgmax, got 'max'"),
        (["--width", "5000"], "--width must be <= 1024, got 5000"),  # checked by ModelConfig
        (["--tau-width", "0"], "--tau-width must be > 0, got 0.0"),
        (["--label-smoothing", "1"], "--label-smoothing must be in [0, 1), got 1.0"),
        (["--crop-min-length", "-1"], "--crop-min-length must be >= 0"),
        (["--crop-min-budget", "-1"], "--crop-min-budget must be >= 0 (0: at every budget), "
                                      "got -1.0"),
        (["--omega-0", "-1"], "--omega-0 must be >= 0 (0: automatic), got -1.0"),
        (["--jitter", "-0.1"], "--jitter must be >= 0 (0: off), got -0.1"),
    ]
    out = tmp_path / "never"
    proc = run_search(*cases[0][0], "--out", str(out), check=False)
    assert proc.returncode == 2 and cases[0][1] in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists(), proc.stderr
    for args, needle in cases:
        code = main_here([*args, "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2, (args, err)
        assert needle in err and "Traceback" not in err, (args, err)
        assert len(err.strip().splitlines()) == 1 and not out.exists(), (args, err)


@pytest.mark.slow
def test_unwritable_run_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = run_search(*TINY, "--out", str(blocker / "run"), check=False)
    assert proc.returncode == 2 and "cannot write" in proc.stderr
    assert blocker.read_text() == "not a directory"


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["cut", "text"])
def test_resume_of_a_damaged_checkpoint_is_refused(tiny_run, tmp_path, damage):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    (copy / R.SUMMARY).unlink()  # pretend it was cut short
    state = next((copy / R.CHECKPOINTS).glob("epoch-*")) / "state.pt"
    # cut short, or a file of another kind (torch.load's error is then a page long)
    state.write_bytes(state.read_bytes()[:100] if damage == "cut" else b"garbage\n")
    before = state.read_bytes()
    proc = run_search("--out", str(copy), "--resume", check=False)
    assert proc.returncode == 2 and "state.pt" in proc.stderr and "damaged" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1  # not torch.load's page of advice
    assert state.read_bytes() == before


@pytest.mark.slow
def test_resume_rejects_contradicting_flags(tiny_run, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    proc = run_search("--out", str(copy), "--resume", "--lr", "0.5", check=False)
    assert proc.returncode == 2 and "--lr" in proc.stderr


@pytest.mark.slow
def test_resume_accepts_learn_flags_that_learn_what_the_run_learned(tiny_run, tmp_path):
    """A run of '--learn KWD --budget 0.5' is the run '--learn KRWD --budget 0.5' gives (no R
    under a MAC budget below --crop-min-budget): resuming it with those flags, as a sweep's job
    does, goes on; flags that would learn R contradict it."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    config = json.loads((copy / R.CONFIG).read_text())
    config["train"].update(learn="KWD", budget=0.5)
    config["model"]["learn"] = "KWD"
    (copy / R.CONFIG).write_text(json.dumps(config))
    for typed in (["--learn", "KRWD", "--budget", "0.5"], ["--learn", "KRWD"]):
        agrees = run_search("--out", str(copy), "--resume", *typed, check=False)
        assert "contradict" not in agrees.stderr and "already complete" in agrees.stderr, typed
    proc = run_search("--out", str(copy), "--resume", "--learn", "KRWD", "--crop-min-budget",
                      "0", check=False)
    assert proc.returncode == 2
    assert ("flags contradict it: --crop-min-budget (saved 1.0, given 0.0), --learn (saved "
            "'KWD', given 'KRWD')") in proc.stderr


@pytest.mark.slow
def test_config_records_what_the_run_trained_with_and_resume_accepts_it(tiny_run, tmp_path):
    """--label-smoothing left out resolves per task (GunPoint: 150 samples, short); config.json
    keeps the flag as typed and, in ``in_effect``, the value used. On resume, typing that value
    agrees with the run; typing another contradicts it."""
    import shutil

    config = R.read_config(tiny_run)
    assert config.train["label_smoothing"] is None and config.train["shift"] is None
    assert config.train["jitter"] is None
    assert config.in_effect == {"shift": 0.1, "jitter": 0.1, "label_smoothing": 0.1}
    copy = tmp_path / "copy"
    shutil.copytree(tiny_run, copy)
    agrees = run_search("--out", str(copy), "--resume", "--label-smoothing", "0.1", check=False)
    assert "contradict" not in agrees.stderr and "already complete" in agrees.stderr  # got past
    proc = run_search("--out", str(copy), "--resume", "--label-smoothing", "0.2", check=False)
    assert proc.returncode == 2
    assert "--label-smoothing (saved None, given 0.2)" in proc.stderr


def test_every_config_field_is_a_documented_flag():
    parser = build_parser()
    flags = {a.dest: a for a in parser._actions}
    for name in SearchConfig.__dataclass_fields__:
        assert name in flags and flags[name].help, name
    assert json.dumps(SearchConfig().to_dict())  # serialisable for config.json


def test_model_flags_default_to_model_config_and_reach_the_model():
    """ModelConfig holds the model defaults: the flags it shares with the search start at them
    (but --input-norm and --omega-0, whose automatic values are resolved per task) and reach the
    model as given."""
    from search.resolve import model_config
    from search.tasks import load_task

    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    per_task = {"input_norm", "omega_0"}
    shared = [n for n in SearchConfig.__dataclass_fields__ if n in defaults]
    assert {"depth", "width", "learn", "dropout", "omega_0", "tau_resolution", "tau_width",
            "tau_depth"} <= set(shared)
    assert all(getattr(SearchConfig(), n) == defaults[n] for n in shared if n not in per_task)
    cfg, _ = parse_args(["--depth", "3", "--width", "8", "--learn", "wk", "--dropout", "0.1",
                         "--omega-0", "7", "--tau-resolution", "20", "--tau-width", "30",
                         "--tau-depth", "4"])
    model = model_config(cfg, load_task("ucr:GunPoint", seed=0))
    assert model.learn == "KW"  # canonical order
    assert all(getattr(model, n) == getattr(cfg, n) for n in shared
               if n != "learn" and n != "input_norm")


def _waves(length: int, *parts: tuple[int, float], samples: int = 3) -> np.ndarray:
    """(samples, 1, length): sum of cosines, (cycles over the axis, amplitude) each, shifted in
    phase from sample to sample, with an offset that the mean removal must ignore."""
    t = np.arange(length) / length
    return np.stack([[7.0 + sum(a * np.cos(2 * np.pi * k * t + i) for k, a in parts)]
                     for i in range(samples)])


def test_energy_frequency_is_where_the_energy_share_is_reached():
    """Energy 0.9 at 4 cycles and 0.1 at 40: 85 % lies at 4, 95 % needs 40. On 2-D inputs the
    higher axis wins."""
    from search.resolve import energy_frequency

    x = _waves(200, (4, 0.9 ** 0.5), (40, 0.1 ** 0.5))
    assert energy_frequency(x, 0.85) == 4
    assert energy_frequency(x, 0.95) == 40
    rows = _waves(32, (3, 1.0))[:, :, :, None] * np.ones(16)  # varies along the first axis only
    image = rows + np.cos(2 * np.pi * 6 * np.arange(16) / 16)  # and along the second at 6
    assert energy_frequency(image, 0.95) == 6
    assert energy_frequency(np.swapaxes(image, 2, 3), 0.95) == 6
    constant = np.full((3, 1, 50), 2.0)
    assert energy_frequency(constant, 0.95) == 0
    assert energy_frequency(np.concatenate([constant, _waves(50, (9, 1.0))]), 0.95) == 9


def test_automatic_frequency_prior_follows_the_training_spectrum():
    """--omega-0 0: a quarter of the frequency holding 95 % of the energy, at least 5; a given
    value is kept; token inputs (no spectrum) get 5."""
    from search.resolve import frequency_prior

    def task(x, tokens=False):
        return SimpleNamespace(x_train=x, tokens=tokens)

    assert frequency_prior(SearchConfig(), task(_waves(1460, (400, 1.0)))) == 100.0
    assert frequency_prior(SearchConfig(), task(_waves(1460, (12, 1.0)))) == 5.0
    assert frequency_prior(SearchConfig(), task(_waves(100, (30, 1.0)))) == 7.5
    assert frequency_prior(SearchConfig(omega_0=2.0), task(_waves(1460, (400, 1.0)))) == 2.0
    assert frequency_prior(SearchConfig(), task(np.zeros((3, 50), np.int64), tokens=True)) == 5.0


@pytest.mark.slow
def test_denormals_are_flushed_on_every_intra_op_thread():
    """flush_denormals, called before torch's first parallel operation (as search.run does), also
    holds in the threads torch starts later: a product that would be denormal is zero on every
    chunk of a tensor large enough to be split across 2 threads."""
    code = (
        "import torch\n"
        "from search.train import flush_denormals\n"
        "flush_denormals()\n"
        "torch.set_num_threads(2)\n"
        "x = torch.full((1 << 20,), 1e-37)\n"
        "print(int(((x * 0.01) != 0).sum()), int(((x * 10.0) != 0).sum()))\n"
    )
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout.split()
    assert out == ["0", str(1 << 20)]  # denormal results flushed; normal ones untouched


@pytest.mark.slow
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")
def test_freed_memory_is_reused_without_page_faults():
    """keep_freed_memory (as search.run calls it): a step's activations, freed together at its
    end and allocated again by the next, reuse the pages they had. With glibc's defaults each
    16 MB tensor of this loop is mapped fresh and zeroed by the kernel, 4096 page faults apiece
    (163 840 in all, measured). A fresh process: the setting is global."""
    code = (
        "import resource, torch\n"
        "from search.train import keep_freed_memory\n"
        "applied = keep_freed_memory()\n"
        "def faults():\n"
        "    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "    for _ in range(5):\n"
        "        kept = [torch.ones(4 << 20) for _ in range(8)]\n"
        "        del kept\n"
        "    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before\n"
        "faults()\n"
        "print(applied, faults())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out[0] == "True"
    assert int(out[1]) < 1000  # each tensor mapped fresh: 163 840


def test_training_length_in_steps_and_rounds():
    """--steps 0: AUTO_EPOCHS passes clipped to [MIN_STEPS, MAX_STEPS], validated ROUNDS times
    (at least one pass per round); --epochs: passes, one round each."""
    from search.config import AUTO_EPOCHS, MAX_STEPS, MIN_STEPS, ROUNDS, training_length

    tiny = training_length(SearchConfig(batch_size=16), 40)  # GunPoint: 2 batches per pass
    assert (tiny.steps, tiny.steps_per_epoch, tiny.per_round) == (MIN_STEPS, 2, MIN_STEPS // ROUNDS)
    mid = training_length(SearchConfig(batch_size=16), 400)  # 25 batches per pass
    assert MIN_STEPS < AUTO_EPOCHS * 25 < MAX_STEPS
    assert mid.steps == AUTO_EPOCHS * 25 and mid.per_round == math.ceil(mid.steps / ROUNDS)
    big = training_length(SearchConfig(batch_size=16), 3500)  # 218 batches per pass
    assert (big.steps, big.per_round) == (MAX_STEPS, 218)
    assert training_length(SearchConfig(steps=123), 40).steps == 123
    epochs = training_length(SearchConfig(epochs=3, batch_size=8), 41)  # 5 full batches
    assert (epochs.steps, epochs.steps_per_epoch, epochs.per_round) == (15, 5, 5)


def test_random_shift_moves_each_sample_and_fills_zeros():
    from search.augment import random_shift

    x = torch.arange(1, 11, dtype=torch.float32).repeat(64, 3, 1)  # (64, 3, 10), 1..10
    torch.manual_seed(0)
    y = random_shift(x, 0.2)  # at most 2 positions either way
    for sample in y:
        assert torch.equal(sample[0], sample[1]) and torch.equal(sample[0], sample[2])
        kept = sample[0][sample[0] > 0]
        shift = int(torch.nonzero(sample[0] == kept[0])[0]) - (int(kept[0]) - 1)
        assert abs(shift) <= 2 and torch.equal(kept, torch.roll(x[0, 0], shift)[sample[0] > 0])
        assert int((sample[0] == 0).sum()) == abs(shift)
    assert len({tuple(s[0].tolist()) for s in y}) == 5  # every shift in -2..2 was drawn
    image = torch.arange(16, dtype=torch.float32).view(1, 1, 4, 4).repeat(8, 1, 1, 1)
    assert torch.equal(random_shift(image, 0.1), image)  # round(0.4) = 0: nothing moves


def test_jitter_adds_noise_in_units_of_each_samples_own_spread():
    from search.augment import jitter

    scales = torch.tensor([1.0, 1000.0])  # a z-normalised series and a raw one 1000x larger
    x = scales.view(2, 1, 1) * torch.randn(2, 1, 50_000)
    x = torch.cat([x, torch.full((2, 1, 50_000), 7.0)], dim=1)  # channel 1: constant
    torch.manual_seed(0)
    y = jitter(x, 0.1)
    noise = y - x
    assert noise.shape == x.shape
    # std of the noise: 0.1 of each sample's own std on channel 0 (1 and 1000), none on the
    # constant channel, whatever the scale
    spread = x[:, 0].std(dim=-1, correction=0)
    assert torch.allclose(noise[:, 0].std(dim=-1), 0.1 * spread, rtol=0.02)
    assert torch.equal(noise[:, 1], torch.zeros(2, 50_000))
    image = torch.randn(4, 3, 8, 8)  # per sample and channel over both axes
    assert torch.equal(jitter(image, 0.0), image)


@pytest.mark.slow
def test_a_stalled_run_restarts_once_from_a_new_initialisation(tmp_path, capsys, monkeypatch,
                                                                main_here):
    """A run whose loss cannot fall (learning rate ~0) is stalled at 30% of its steps: it says
    so, starts again from another initialisation, and summary.json records the attempt. Runs of
    100 steps are judged here (STALL_MIN_STEPS lowered), so search.run.main runs in this process;
    the tiny_run fixture runs the real command."""
    monkeypatch.setattr("search.train.STALL_MIN_STEPS", 100)

    def search(*args: str) -> str:
        capsys.readouterr()
        assert main_here([*TINY, "--epochs", "0", "--steps", "100", "--lr", "1e-12",
                         "--mask-lr", "0", *args]) == 0
        return capsys.readouterr().err

    out = tmp_path / "stalled"
    assert "restarting from a new initialisation (1 of --restarts 1)" in search("--out", str(out))
    summary = R.read_summary(out)
    assert len(summary.restarts) == 1 and summary.restarts[0]["step"] >= 30
    rows = [r for r in R.read_jsonl(out / R.METRICS) if r["split"] == "val"]
    assert [r["epoch"] for r in rows] == list(range(len(rows)))  # the second attempt's only
    assert rows[-1]["step"] == 100
    never = tmp_path / "never"
    assert "restarting" not in search("--restarts", "0", "--out", str(never))
    assert R.read_summary(never).restarts == []
    short = tmp_path / "short"  # fewer steps than STALL_MIN_STEPS: not judged
    monkeypatch.setattr("search.train.STALL_MIN_STEPS", 101)
    assert "restarting" not in search("--out", str(short))
    assert R.read_summary(short).restarts == []


def test_budget_ramp_tightens_the_target_geometrically():
    """--budget-ramp 0.5 over 100 steps: C_target from the initial cost (8) to the budget's (2)
    geometrically over steps 0..50 (4 at step 25), then the budget's; 0: the budget's throughout."""
    cfg = SearchConfig(budget_ramp=0.5)
    got = [scheduled_target(cfg, 8.0, 2.0, s, 100) for s in (0, 25, 50, 99)]
    assert got == pytest.approx([8.0, 4.0, 2.0, 2.0], rel=1e-12)
    assert scheduled_target(SearchConfig(budget_ramp=0.0), 8.0, 2.0, 0, 100) == 2.0
    assert scheduled_target(cfg, 1.0, 2.0, 25, 100) == pytest.approx(2 ** 0.5)  # loosening too


@pytest.mark.slow
def test_the_search_trains_every_parameter(tiny_run):
    """summary.json's search_params counts what the search trains: every parameter of the
    maximum-size network (the masks included)."""
    run = DNArch(ModelConfig(**R.read_config(tiny_run).model))
    assert R.read_summary(tiny_run).search_params == trained_params(run)
    model = DNArch(ModelConfig(in_channels=1, out_channels=3, input_size=(16,), depth=2, width=4))
    assert trained_params(model) == sum(p.numel() for p in model.parameters())


def test_summary_says_how_far_the_search_went(tiny_run):
    vs = R.read_summary(tiny_run).vs_base
    arch = R.read_architecture(tiny_run)
    assert vs["depth"] == arch.depth and vs["base_depth"] == 1
    assert len(vs["resolution"]) == len(vs["kernel_size"]) == arch.depth
    assert vs["distance"] >= 0


def test_the_shipped_score_does_not_depend_on_how_the_test_split_is_batched(tiny_run):
    """evaluate_shipped scores each sample alone (population statistics), so the evaluation
    batch size cannot move it, and it is what summary.json reports."""
    from search.train import evaluate_shipped, split_tensors

    run = R.load_run(tiny_run)
    test = split_tensors(run.task, "test")
    scores = {b: evaluate_shipped(run.model, test, run.task, b) for b in (7, 64, 150)}
    assert scores[7] == pytest.approx(scores[150], rel=1e-6)
    assert scores[64] == pytest.approx(scores[150], rel=1e-6)
    summary = R.read_summary(tiny_run)
    assert scores[64][1] == summary.test_metric
    assert scores[64][0] == pytest.approx(summary.test_loss, rel=1e-6)
    assert summary.test_loss_batch_statistics != pytest.approx(summary.test_loss, rel=1e-6)


@pytest.mark.slow
def test_max_params_is_a_second_constraint_the_result_meets(tmp_path):
    """--max-params below the starting network's count: the search shrinks it under the limit
    (a term beside the budget's), the result meets it, summary.json says so. (Resolution is not
    learned here: at width 4 the resampling a crop adds costs more MACs than the whole block, so
    meeting the parameter limit by cropping the folded 2 S - 1-tap kernels breaks the budget.)"""
    out = tmp_path / "limited"
    run_search(*set_flag(TINY, "--epochs", "12"), "--learn", "KWD", "--max-params", "400",
               "--out", str(out))
    first = R.read_architectures(out)[0]
    assert architecture_params(first) > 400  # the limit was not met at the start
    summary = R.read_summary(out)
    assert summary.max_params == 400 and summary.within_budget is True
    assert summary.params <= 400
    assert summary.params == architecture_params(R.read_architecture(out))


@pytest.mark.slow
def test_cost_latency_budgets_predicted_milliseconds(tmp_path, local_latency_table):
    """--cost latency: the budget counts the table's predicted milliseconds of the deployed
    network, by default at batches 1 and 32 blended (a cost over the base's is the mean of the
    per-batch ratios), against the base network's milliseconds measured before training and
    kept in config.json, then re-priced by the latency checks (two by default); summary.json
    says which unit, and its ratio is the found network's cost over the target."""
    from dnarch_deploy.cost import Units
    from dnarch_deploy.latency import LatencyTable

    out = tmp_path / "latency"
    proc = run_search(*TINY, "--cost", "latency", "--budget", "0.5",
                      "--latency-table", str(local_latency_table), "--out", str(out))
    assert "warning" not in proc.stderr
    summary, config = R.read_summary(out), R.read_config(out)
    assert config.train["latency_batch"] == [1, 32]
    base_ms = config.train["base_ms"]
    assert len(base_ms) == 2 and 0 < base_ms[0] < base_ms[1]  # measured, batch 32 the longer
    # the note: measured here, and the share the budget is of, in the table's time
    assert re.search(r"the base network runs in \S+ ms at batch 1, \S+ ms at batch 32 here",
                     proc.stderr)
    assert f"the budget is a share of {base_ms[0]:.4g}, {base_ms[1]:.4g} ms" in proc.stderr
    table = LatencyTable.load(local_latency_table)
    one, large = Units(table, batch=1), Units(table, batch=32)
    assert summary.cost_unit == "ms" and config.cost_unit == "ms"
    assert config.base_cost == pytest.approx(base_ms[0], rel=1e-12)  # the blend's weights
    assert [c["step"] for c in summary.latency_checks] == [10, 15]  # rounds of steps 8, 12
    base_ms = summary.base_ms  # the last check's
    assert summary.target == pytest.approx(0.5 * base_ms[0], rel=1e-9)
    found = R.read_architecture(out)
    mean_ratio = sum(architecture_cost(found, u) / ms for u, ms in zip((one, large), base_ms)) / 2
    assert summary.complexity_ratio == pytest.approx(mean_ratio / 0.5, rel=1e-6)
    assert summary.macs == architecture_cost(found)  # MACs are still reported


def test_latency_checks_fall_evenly_from_the_budget_ramps_end():
    """--latency-checks N: N checks, from the step the budget's ramp ends, evenly to the last
    step; none where no budget is held to a measured base."""
    cfg = SearchConfig(cost="latency", base_ms=[0.2, 5.0], budget_ramp=0.5)
    assert latency_check_steps(cfg, "KRWD", 100) == [50, 75]  # the default, 2
    assert latency_check_steps(dataclasses.replace(cfg, latency_checks=3), "KRWD", 100) == [
        50, 67, 83]
    assert latency_check_steps(dataclasses.replace(cfg, budget_ramp=0.0), "KRWD", 10) == [1, 5]
    for off in (dict(cost="macs", base_ms=[]), dict(lam=0.0), dict(base_ms=[]),
                dict(latency_checks=0)):
        assert latency_check_steps(dataclasses.replace(cfg, **off), "KRWD", 100) == []
    assert latency_check_steps(cfg, "none", 100) == []


@pytest.mark.slow
def test_latency_checks_reprice_the_base_in_the_found_networks_time(tmp_path,
                                                                   local_latency_table):
    """Each check times the network the masks describe beside the base and sets the base's
    time to the base's measured time over that network's measured / predicted: the budget's
    target follows, summary.json lists the checks, and a resumed run keeps the last one."""
    out = tmp_path / "checked"
    proc = run_search(*TINY, "--cost", "latency", "--budget", "0.5", "--latency-checks", "1",
                      "--latency-table", str(local_latency_table), "--out", str(out))
    assert "the network the masks describe ran at" in proc.stderr
    summary, config = R.read_summary(out), R.read_config(out)
    (check,) = summary.latency_checks
    assert check["step"] == 10  # the round of step 8 (0.5 of 15) ends at step 10
    assert summary.base_ms == check["base_ms"] != config.train["base_ms"]
    assert summary.target == pytest.approx(0.5 * check["base_ms"][0], rel=1e-9)
    proc = run_search("--out", str(out), "--resume", "--epochs", "4")
    assert "the network the masks describe" not in proc.stderr  # the check was done
    resumed = R.read_summary(out)
    assert resumed.latency_checks == [check] and resumed.base_ms == check["base_ms"]
    assert resumed.target == pytest.approx(summary.target, rel=1e-12)


@pytest.mark.slow
def test_latency_checks_must_not_be_negative(tmp_path):
    proc = run_search(*TINY, "--latency-checks", "-1", "--out", str(tmp_path / "x"),
                      check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --latency-checks must be >= 0, got -1"
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_a_latency_table_that_cannot_be_read_warns_and_the_bundled_one_prices(tmp_path):
    """One warning line naming the file; the bundled table prices the network, and the base is
    timed only where that table was measured on this machine (else the table prices it too)."""
    from dnarch_deploy.latency import BUNDLED, LatencyTable

    out, broken = tmp_path / "latency", tmp_path / "broken.json"
    broken.write_text("{not json")
    proc = run_search(*TINY, "--cost", "latency", "--budget", "0.5",
                      "--latency-table", str(broken), "--out", str(out))
    assert f"warning: latency table {broken} cannot be used" in proc.stderr  # one line
    here = not LatencyTable.load(BUNDLED).differences(threads=1)
    assert bool(R.read_config(out).train["base_ms"]) == here
    assert R.read_config(out).cost_unit == "ms"


def test_another_machines_table_prices_the_base_too(monkeypatch):
    """A table measured elsewhere prices networks in that machine's milliseconds: the base is
    not timed here (a ratio would mix two machines), its cost is the table's prediction."""
    import search.config as C
    from dnarch_deploy.cost import Units, base_cost
    from dnarch_deploy.latency import BUNDLED, LatencyTable
    from search.distributed import World
    from search.run import with_base_time

    bundled = LatencyTable.load(BUNDLED)
    elsewhere = LatencyTable(header={**bundled.header, "cpu": "another CPU"},
                             points=bundled.points)
    monkeypatch.setattr(C, "_latency_table", lambda path, batches: elsewhere)
    cfg = SearchConfig(cost="latency", budget=0.5)
    mcfg = ModelConfig(in_channels=1, out_channels=2, input_size=(150,), learn="KRWD")
    assert not cfg.latency_table_here()
    kept = with_base_time(cfg, mcfg, World(rank=0, size=1))
    assert kept.base_ms == []
    assert base_cost(mcfg, kept.cost_units(mcfg)) == pytest.approx(
        base_cost(mcfg, Units(elsewhere, 1)), rel=1e-12)


def test_a_base_that_cannot_be_timed_is_one_usage_error(monkeypatch, local_latency_table):
    """When timing the base fails, the search stops with the command's message and the way
    around it (--base-ms), before anything is written."""
    import export.base_latency as B
    import search.config as C
    from dnarch_deploy.latency import LatencyTable
    from search.distributed import World
    from search.run import UsageError, with_base_time

    here = LatencyTable.load(local_latency_table)
    monkeypatch.setattr(C, "_latency_table", lambda path, batches: here)

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(B, "base_in_table_time", boom)  # the timing itself fails
    cfg = SearchConfig(cost="latency", budget=0.5)
    mcfg = ModelConfig(in_channels=1, out_channels=2, input_size=(150,), learn="KRWD")
    with pytest.raises(UsageError, match=r"^timing the base network for --cost latency failed: "
                                         r"boom \(--base-ms gives its times instead\)$"):
        with_base_time(cfg, mcfg, World(rank=0, size=1))


@pytest.mark.slow
def test_base_ms_pins_the_base_and_resume_keeps_it(tmp_path):
    """--base-ms gives the base's milliseconds instead of measuring them (with --latency-checks
    0, for the whole run); a resumed run keeps the ones config.json saved, typed or measured, so
    its budget does not move."""
    out = tmp_path / "pinned"
    proc = run_search(*TINY, "--cost", "latency", "--budget", "0.25", "--base-ms", "0.2",
                      "--base-ms", "5", "--latency-checks", "0", "--out", str(out))
    assert "base network runs in" not in proc.stderr  # nothing measured
    assert R.read_config(out).train["base_ms"] == [0.2, 5.0]
    assert R.read_summary(out).target == pytest.approx(0.05, rel=1e-12)
    proc = run_search("--out", str(out), "--resume", "--epochs", "4")
    assert "base network runs in" not in proc.stderr
    assert R.read_config(out).train["base_ms"] == [0.2, 5.0]
    assert R.read_summary(out).target == pytest.approx(0.05, rel=1e-12)


@pytest.mark.slow
def test_the_base_itself_measures_nothing(tmp_path):
    """--learn none trains the base: there is no budget to price against it, so nothing is
    timed and config.json has no base milliseconds."""
    out = tmp_path / "base"
    proc = run_search(*TINY, "--cost", "latency", "--learn", "none", "--out", str(out))
    assert "base network runs in" not in proc.stderr
    assert R.read_config(out).train["base_ms"] == []


@pytest.mark.slow
@pytest.mark.parametrize("flags, message", [
    (["--base-ms", "0.2"], "--base-ms is the base's time for --cost latency; this run counts "
     "--cost macs"),
    (["--cost", "latency", "--base-ms", "0.2"], "--base-ms needs one time per --latency-batch "
     "[1, 32], got [0.2]"),
    (["--cost", "latency", "--latency-batch", "1", "--base-ms", "0"], "every --base-ms must be "
     "a finite number > 0, got [0.0]"),
], ids=["macs", "count", "zero"])
def test_base_ms_must_fit_the_cost(tmp_path, flags, message):
    proc = run_search(*TINY, *flags, "--out", str(tmp_path / "x"), check=False)
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_a_run_saved_with_one_latency_batch_reads_as_that_batch():
    """config.json of runs made when --latency-batch took one number: resume reads it as a
    list of that one batch (it was priced there), not as the new default."""
    assert SearchConfig(latency_batch=32).latency_batch == [32]
    assert SearchConfig().latency_batch == [1, 32]
    assert SearchConfig(latency_batch=[32, 1, 32]).latency_batch == [32, 1]


@pytest.mark.slow
def test_latency_batch_must_be_positive(tmp_path):
    proc = run_search(*TINY, "--cost", "latency", "--latency-batch", "1", "--latency-batch", "0",
                      "--out", str(tmp_path / "x"), check=False)
    assert proc.returncode == 2
    assert "every --latency-batch must be >= 1, got [1, 0]" in proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_cost_must_be_macs_or_latency(tmp_path):
    proc = run_search(*TINY, "--cost", "flops", "--out", str(tmp_path / "x"), check=False)
    assert proc.returncode == 2 and "--cost must be macs or latency, got 'flops'" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_label_smoothing_is_cross_entropy_against_smoothed_targets():
    """(1 - e) CE(y) + e mean_k CE(k): the closed form of targets (1 - e) one_hot + e / K."""
    model = DNArch(ModelConfig(in_channels=1, out_channels=3, input_size=(16,), depth=1, width=4))
    out, y = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]]), torch.tensor([0, 2])
    nll = -torch.log_softmax(out, dim=-1)
    plain = nll.gather(1, y[:, None]).mean()
    assert torch.isclose(objective(model, out, y), plain)
    smoothed = 0.8 * plain + 0.2 * nll.mean()
    assert torch.isclose(objective(model, out, y, 0.2), smoothed)


def test_the_smoothed_targets_entropy_is_the_least_smoothed_loss():
    """At logits = log of the smoothed targets the objective is their entropy, and no logits do
    better: the floor the stall check counts from."""
    model = DNArch(ModelConfig(in_channels=1, out_channels=4, input_size=(16,), depth=1, width=4))
    y = torch.tensor([0, 3, 1])
    target = torch.full((3, 4), 0.2 / 4).scatter_(1, y[:, None], 1 - 0.2 + 0.2 / 4)
    best = objective(model, target.log(), y, 0.2)
    assert math.isclose(float(best), smoothed_entropy(0.2, 4), rel_tol=1e-6)
    assert objective(model, torch.randn(3, 4) * 3, y, 0.2) > best
    assert smoothed_entropy(0.0, 4) == 0.0


def test_the_stall_test_counts_from_the_smoothed_floor():
    """PLAID-like: 11 classes smoothed by 0.1 cannot go below their entropy, 0.514. A loss of 0.55
    after a first round of 1.0 is nearly there, not stalled; counted from 0 it would read as
    stalled (0.55 > 0.5 x 1.0), as all three PLAID runs of the label-smoothing trial did."""
    floor = smoothed_entropy(0.1, 11)
    assert math.isclose(floor, 0.5140, abs_tol=1e-4)
    assert stalled(0.55, 1.0) and not stalled(0.55, 1.0, floor)
    assert stalled(0.9, 1.0, floor)  # still most of the way up: stalled either way
    assert not stalled(0.4, 1.0) and stalled(0.7, 1.0)  # no smoothing: half the first round's


@pytest.mark.parametrize(("kind", "spatial", "tokens", "flag", "expected"), [
    ("classification", (24,), False, None, 0.1),  # ItalyPowerDemand
    ("classification", (256,), False, None, 0.1),
    ("classification", (257,), False, None, 0.0),
    ("classification", (8, 8), False, None, 0.1),  # digits
    ("classification", (28, 28), False, None, 0.0),  # 784 positions
    ("classification", (200,), True, None, 0.0),  # token inputs: not by default
    ("dense", (16, 16), False, None, 0.0),
    ("classification", (24,), False, 0.0, 0.0),  # the flag wins
    ("classification", (1460,), False, 0.2, 0.2),
])
def test_label_smoothing_by_default_only_on_short_inputs(kind, spatial, tokens, flag, expected):
    task = SimpleNamespace(kind=kind, spatial=spatial, tokens=tokens)
    assert label_smoothing(SearchConfig(label_smoothing=flag), task) == expected


@pytest.mark.parametrize(("kind", "tokens", "n_train", "flag", "expected"), [
    ("classification", False, 29, None, 0.1),  # ArrowHead
    ("classification", False, 299, None, 0.1),
    ("classification", False, 300, None, 0.0),
    ("classification", False, 430, None, 0.0),  # PLAID
    ("classification", True, 29, None, 0.0),  # token inputs: never shifted or jittered
    ("dense", False, 29, None, 0.0),
    ("classification", False, 29, 0.0, 0.0),  # the flag wins
    ("classification", False, 3500, 0.2, 0.2),
])
def test_shift_and_jitter_by_default_only_on_small_training_splits(kind, tokens, n_train, flag,
                                                                 expected):
    task = SimpleNamespace(kind=kind, spatial=(100,), tokens=tokens, x_train=np.zeros((n_train, 1)))
    assert in_effect(SearchConfig(shift=flag), task)["shift"] == expected
    assert in_effect(SearchConfig(jitter=flag), task)["jitter"] == expected  # the same rule


@pytest.mark.parametrize(("size", "learn", "minimum", "expected"), [
    ((8, 8), "KRWD", 9, "KWD"),  # digits: every axis short
    ((8, 8), "KRWD", 0, "KRWD"),  # 0: always
    ((8, 8), "KRWD", 8, "KRWD"),  # at least this many samples: learned
    ((8, 64), "KRWD", 9, "KRWD"),  # one long axis is enough
    ((24,), "rk", 9, "KR"),
    ((8, 8), "none", 9, "none"),
])
def test_the_resolution_is_learned_only_on_inputs_with_a_long_enough_axis(size, learn, minimum,
                                                                            expected):
    cfg = SearchConfig(learn=learn, crop_min_length=minimum)
    assert learned(cfg, size) == expected


@pytest.mark.parametrize(("budget", "cost", "minimum", "expected"), [
    (0.25, "macs", 1.0, "KWD"),  # under a MAC budget below the base's: no R
    (0.999, "macs", 1.0, "KWD"),
    (1.0, "macs", 1.0, "KRWD"),  # at least --crop-min-budget: learned
    (2.0, "macs", 1.0, "KRWD"),
    (0.25, "macs", 0.0, "KRWD"),  # 0: at every budget
    (0.5, "macs", 0.5, "KRWD"),
    (0.25, "latency", 1.0, "KRWD"),  # the latency table prices the resampling at its speed
])
def test_the_resolution_is_learned_under_a_mac_budget_only_from_crop_min_budget(
        budget, cost, minimum, expected):
    cfg = SearchConfig(budget=budget, cost=cost, crop_min_budget=minimum)
    assert learned(cfg, (150,)) == expected


def test_without_a_budget_term_the_resolution_is_learned_at_any_budget():
    """--lam 0: nothing holds the search to its budget, so no MAC pricing argues against R."""
    assert learned(SearchConfig(budget=0.25, lam=0.0), (150,)) == "KRWD"


@pytest.mark.slow
def test_learning_only_r_under_a_small_mac_budget_is_refused_before_any_work(tmp_path):
    out = tmp_path / "never"
    proc = run_search("--task", "ucr:GunPoint", "--learn", "R", "--budget", "0.5", "--out",
                      str(out), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: task ucr:GunPoint: --learn R: --budget 0.5 is under --crop-min-budget 1, where "
        "MACs underprice a crop's resampling (--cost latency prices it), so the resolution is "
        "not learned and nothing is left to search")
    assert not out.exists()


def test_learning_only_r_on_a_short_input_is_refused():
    with pytest.raises(ValueError, match=r"--learn R: every axis of the input \(8x8\) is shorter "
                                         r"than --crop-min-length 9"):
        learned(SearchConfig(learn="R"), (8, 8))


@pytest.mark.slow
def test_learning_only_r_on_digits_is_refused_before_any_work(tmp_path):
    out = tmp_path / "never"
    proc = run_search("--task", "digits", "--learn", "R", "--out", str(out), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: task digits: --learn R: every axis of the input (8x8) is shorter than "
        "--crop-min-length 9, so the resolution is not learned and nothing is left to search")
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "why", "size"), [
    (["--task", "digits", "--eval-batch-size", "64"],
     "every axis of the input (8x8) is shorter than --crop-min-length 9", [8, 8]),
    (["--task", "ucr:GunPoint", "--budget", "0.5"],
     "--budget 0.5 is under --crop-min-budget 1", [150]),
])
def test_a_search_without_r_says_why_and_keeps_every_block_at_full_resolution(tmp_path, flags,
                                                                             why, size):
    out = tmp_path / "run"
    proc = run_search(*flags, "--depth", "1", "--width", "4", "--steps", "4", "--out", str(out))
    assert f"note: the resolution is not learned (--learn KWD): {why}" in proc.stderr
    config = R.read_config(out)
    assert config.train["learn"] == "KRWD" and config.model["learn"] == "KWD"
    assert R.read_summary(out).learn == "KWD"
    assert all(list(b.resolution) == size for b in R.read_architecture(out).blocks)


@pytest.mark.slow
def test_rescore_refuses_a_missing_run_and_leaves_a_scored_one(tiny_run, tmp_path):
    from .conftest import env

    proc = subprocess.run([sys.executable, "-m", "search.rescore", str(tiny_run),
                           str(tmp_path / "nope")], capture_output=True, text=True, env=env())
    assert proc.returncode == 2 and f"{tmp_path / 'nope'}: run directory not found" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""  # checked before any work
    damaged = tmp_path / "damaged"
    shutil.copytree(tiny_run, damaged)
    (damaged / R.BEST_WEIGHTS).write_bytes(b"not safetensors")
    summary = (damaged / R.SUMMARY).read_text()
    proc = subprocess.run([sys.executable, "-m", "search.rescore", str(damaged)],
                          capture_output=True, text=True, env=env())
    assert proc.returncode == 2 and str(damaged / R.BEST_WEIGHTS) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert (damaged / R.SUMMARY).read_text() == summary
    before = (tiny_run / R.SUMMARY).read_text()
    proc = subprocess.run([sys.executable, "-m", "search.rescore", str(tiny_run)],
                          capture_output=True, text=True, env=env())
    assert proc.returncode == 0 and "already scored as shipped" in proc.stdout
    assert (tiny_run / R.SUMMARY).read_text() == before


def test_rescore_refuses_a_missing_run_in_one_line(tmp_path, capsys):
    from search import rescore

    assert rescore.main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "missing" in err and "\n" not in err
