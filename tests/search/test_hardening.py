"""search.run with broken and hostile inputs (issue #17): one message naming the value and the flag
or file, a non-zero exit, and no run directory left half-made. The CLI runs in this process
(``search.run.main``), on tiny tasks, so that failures can be injected where a disk would fail."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from dnarch_deploy import rundir as R
from search import checkpoint
from search import run as search_run
from search.config import parse_args

# one block of 4 channels, one epoch: about a second
FAST = ["--depth", "1", "--width", "4", "--batch-size", "8", "--epochs", "1",
        "--warmup", "0", "--eval-batch-size", "64"]


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    """No progress bars on stderr (the CLI runs in this process): stderr holds the message and
    the plain progress lines of the rounds trained (dnarch_deploy.progress)."""
    monkeypatch.setenv("CI", "1")


PROGRESS = re.compile(r"^search \d+/\d+ ")


def search(capsys, *args: str) -> tuple[int, str]:
    """Run the CLI in this process: (exit status, stderr)."""
    capsys.readouterr()
    code = search_run.main([str(a) for a in args])
    return code, capsys.readouterr().err


def one_message(err: str, *needles: str) -> None:
    """One line besides the progress lines of the rounds trained before it, naming each needle."""
    lines = [line for line in err.strip().splitlines() if not PROGRESS.match(line)]
    assert "Traceback" not in err and len(lines) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)


def tree(path: Path) -> dict[str, int]:
    """Every file under ``path`` with its modification time (to show nothing was rewritten)."""
    return {str(p.relative_to(path)): p.stat().st_mtime_ns for p in path.rglob("*")}


def save_npz(path: Path, y_train, x=None, **extra) -> Path:
    rng = np.random.default_rng(0)
    y_train = np.asarray(y_train)
    x = rng.standard_normal((len(y_train), 1, 16)).astype(np.float32) if x is None else x
    np.savez(path, x_train=x, y_train=y_train, x_test=x[:4], y_test=np.zeros(4, np.int64),
             **extra)
    return path


@pytest.fixture(scope="module")
def npz_run(tmp_path_factory) -> Path:
    """A finished 2-epoch run on a user's npz file, trained with --budget 0.5."""
    root = tmp_path_factory.mktemp("npz-run")
    data = save_npz(root / "data.npz", np.arange(48) % 2)
    out = root / "run"
    assert search_run.main(["--task", f"npz:{data}", *FAST, "--epochs", "2", "--budget", "0.5",
                            "--out", str(out)]) == 0
    return out


def copy_run(run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(run, dst)
    return dst


# --- case 1: sizes from the data and the flags are limited before anything is allocated -----------


@pytest.mark.parametrize(("labels", "needles"), [
    ([0, 1] * 10 + [10**9], ["y_train", "1000000000", "10000 classes"]),
    ([0, 1] * 10 + [200000], ["y_train", "200000"]),
    ([3, 7, 9] * 8, ["y_train", "{3, 7, 9}", "absent: 0, 1, 2"]),
])
def test_labels_that_would_blow_up_the_head_are_refused(capsys, tmp_path, labels, needles):
    data = save_npz(tmp_path / "data.npz", labels)
    out = tmp_path / "run"
    code, err = search(capsys, "--task", f"npz:{data}", *FAST, "--out", out)
    assert code == 2
    one_message(err, str(data), *needles)
    assert not out.exists()


@pytest.mark.parametrize(("args", "needles"), [
    (["--width", "5000"], ["--width", "5000", "1024"]),
    (["--depth", "100"], ["--depth", "100"]),
    (["--learn", "KK"], ["--learn", "'KK'"]),
    (["--budget", "inf"], ["--budget", "inf"]),
    (["--lam", "nan"], ["--lam", "nan"]),
])
def test_flags_out_of_range_are_refused_before_any_work(capsys, tmp_path, args, needles):
    out = tmp_path / "run"
    code, err = search(capsys, *FAST, *args, "--out", out)
    assert code == 2
    one_message(err, *needles)
    assert not out.exists()


@pytest.mark.parametrize("learn, budget, space", [("KRWD", "0.001", "KWD"),
                                                  ("KRWD", "100", "KRWD"), ("K", "1.5", "K")])
def test_a_budget_outside_the_search_space_is_refused_with_the_range(capsys, tmp_path, learn,
                                                                      budget, space):
    """No network the masks can reach costs that much: the message gives the reachable range of
    the space searched at that budget (--learn K cannot grow past the base: its kernels start
    global; under a MAC budget below --crop-min-budget, R is not learned)."""
    out = tmp_path / "run"
    code, err = search(capsys, *FAST, "--learn", learn, "--budget", budget, "--out", out)
    assert code == 2
    one_message(err, f"--budget {budget}", f"--learn {space} ", "budgets from", "reachable")
    assert not out.exists()


def test_without_a_budget_term_any_budget_is_accepted(capsys, tmp_path):
    """--lam 0: nothing holds the search to its budget, which only scales the reported ratio, so
    one outside the reachable range is no error (1.5 with --learn K, refused above)."""
    out = tmp_path / "run"
    code, err = search(capsys, *FAST, "--learn", "K", "--budget", "1.5", "--lam", "0",
                       "--out", out)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["budget"] == 1.5 and summary["complexity_ratio"] < 1


def test_reachable_costs_are_those_of_the_masks_extreme_networks():
    """The largest DNArch(K) network is the base CCNN (global kernels); learning widths, depth
    and resolution reaches 2D blocks of 2H channels at the dearest resolution (a crop adds
    resampling: not the full one), and far below the base."""
    import torch

    from dnarch_deploy import DNArch, ModelConfig, base_cost, describe
    from dnarch_deploy import masks as M
    from dnarch_deploy.cost import architecture_cost, cost_range

    config = ModelConfig(in_channels=1, out_channels=2, input_size=(150,), learn="K")
    low, high = cost_range(config)
    assert high == pytest.approx(base_cost(config), rel=1e-12) and low < high
    full = ModelConfig(in_channels=1, out_channels=2, input_size=(150,), learn="KRWD")
    low, high = cost_range(full)
    wide = ModelConfig(in_channels=1, out_channels=2, input_size=(150,), learn="none",
                       depth=2 * full.depth, width=2 * full.width)
    widest = DNArch(full)
    with torch.no_grad():
        widest.mask_width.fill_(M.sigmoid_mu_range(full.tau_width)[1])
        widest.mask_depth.fill_(M.sigmoid_mu_range(full.tau_depth)[1])
        widest.mask_res.fill_(M.sigmoid_mu_for_size(74.5 / 75, full.tau_resolution, 1))
    cropped = describe(widest)  # 76 bins -> 75: 149 samples, on a fast length 150: a filter
    assert [(b.resolution, b.cropped) for b in cropped.blocks] == [([150], [True])] * 8
    assert high > architecture_cost(cropped) > base_cost(wide)
    by_force = []  # every bin count of the resolution mask, the widest and deepest network
    for k in range(1, 77):
        with torch.no_grad():
            widest.mask_res.fill_(M.sigmoid_mu_for_size((k - 0.5) / 75, full.tau_resolution, 1))
        by_force.append(architecture_cost(describe(widest)))
    assert high == pytest.approx(max(by_force), rel=1e-12)
    assert low < 0.05 * base_cost(full)


def test_the_shortest_kernel_is_the_cheapest_reachable_kernel():
    """With K learned alone the cheapest network is the base at its shortest kernels (3 taps);
    the dearest is the base."""
    import torch

    from dnarch_deploy import DNArch, ModelConfig, base_cost, describe
    from dnarch_deploy.cost import architecture_cost, cost_range

    config = ModelConfig(in_channels=1, out_channels=2, input_size=(150,), learn="K")
    low, high = cost_range(config)
    shortest = DNArch(config)
    with torch.no_grad():
        shortest.mask_sigma.fill_(-1.0)
    shortest.clamp_masks_()
    arch = describe(shortest)
    assert {tuple(b.kernel_size) for b in arch.blocks} == {(3,)}
    assert low == pytest.approx(architecture_cost(arch), rel=1e-12)
    assert high == pytest.approx(base_cost(config), rel=1e-12)
    assert low < high


def test_no_validation_samples_is_refused_before_training(capsys, tmp_path):
    data = save_npz(tmp_path / "data.npz", [0, 1, 2, 3])  # one sample per class
    out = tmp_path / "run"
    code, err = search(capsys, "--task", f"npz:{data}", *FAST, "--out", out)
    assert code == 2
    one_message(err, str(data), "no validation samples", "one sample each", "x_val")
    assert not out.exists()


# --- case 4: a failure after the run directory exists leaves it removed or resumable --------------


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")  # train's message
def test_divergence_before_the_first_checkpoint_removes_the_run_dir(capsys, tmp_path):
    out = tmp_path / "run"
    code, err = search(capsys, "--task", "ucr:GunPoint", *FAST, "--lr", "1e8", "--out", out)
    assert code == 3
    one_message(err, "diverged", "--lr than 1e+08", "no checkpoint", "removed")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", "checkpoints/epoch-00000")


def test_full_disk_while_creating_the_run_dir_leaves_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("search.train.write_json", _full_disk)
    out = tmp_path / "run"
    code, err = search(capsys, "--task", "ucr:GunPoint", *FAST, "--out", out)
    assert code == 2
    one_message(err, f"cannot write the run directory {out}", "No space left on device")
    assert list(tmp_path.iterdir()) == []  # neither the run nor its hidden staging folder


def test_staging_folders_of_killed_searches_are_removed(capsys, tmp_path, monkeypatch):
    dead = tmp_path / f".run.creating-{2**22 + 7}-abc"  # above Linux's pid_max: no process
    live = tmp_path / f".run.creating-{os.getpid()}-abc"
    for folder in (dead, live):
        (folder / "checkpoints").mkdir(parents=True)
    monkeypatch.setattr("search.train.write_json", _full_disk)  # stop once it is made
    code, _ = search(capsys, "--task", "ucr:GunPoint", *FAST, "--out", tmp_path / "run")
    assert code == 2
    assert sorted(tmp_path.iterdir()) == [live]


def test_full_disk_before_the_first_checkpoint_removes_the_run_dir(capsys, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setattr(checkpoint, "save_last", _full_disk)
    out = tmp_path / "run"
    code, err = search(capsys, "--task", "ucr:GunPoint", *FAST, "--out", out)
    assert code == 2
    one_message(err, "No space left on device", "no checkpoint", "removed")
    assert not out.exists()


@pytest.mark.slow
def test_full_disk_after_a_checkpoint_keeps_it_resumable(capsys, tmp_path, monkeypatch):
    real = checkpoint.save_last
    calls = []

    def fail_second(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs) if len(calls) == 1 else _full_disk()

    monkeypatch.setattr(checkpoint, "save_last", fail_second)
    out = tmp_path / "run"
    code, err = search(capsys, "--task", "ucr:GunPoint", *FAST, "--epochs", "2", "--out", out)
    assert code == 2
    one_message(err, "No space left on device", "checkpoint of epoch 0 is kept",
                f"--out {out} --resume")
    monkeypatch.setattr(checkpoint, "save_last", real)
    assert search(capsys, "--out", out, "--resume")[0] == 0
    assert R.read_summary(out).steps == 2 * 5  # 2 epochs of 5 batches


class Killed(BaseException):
    """Stands for SIGKILL: nothing in search.run catches it, nothing cleans up."""


@pytest.mark.slow
def test_killed_before_the_first_checkpoint_resumes_from_epoch_0(capsys, tmp_path, monkeypatch):
    straight = tmp_path / "straight"
    assert search(capsys, "--task", "ucr:GunPoint", *FAST, "--out", straight)[0] == 0

    def kill(*args, **kwargs):
        raise Killed

    monkeypatch.setattr(checkpoint, "save_last", kill)
    out = tmp_path / "killed"
    with pytest.raises(Killed):
        search_run.main(["--task", "ucr:GunPoint", *FAST, "--out", str(out)])
    monkeypatch.undo()
    assert (out / R.CONFIG).is_file() and checkpoint.last_epoch(out) is None
    code, err = search(capsys, "--task", "ucr:GunPoint", *FAST, "--out", out)
    assert code == 2 and "--resume" in err  # a plain re-run does not overwrite it
    assert search(capsys, "--out", out, "--resume")[0] == 0

    def rows(run):
        return [{k: v for k, v in r.items() if k != "seconds"}
                for r in R.read_jsonl(run / R.METRICS)]

    assert rows(out) == rows(straight)  # started again from scratch: the same run


# --- case 3: --resume compares every flag the user typed, whatever its value ----------------------


@pytest.mark.slow
def test_resume_refuses_a_flag_equal_to_its_default(capsys, npz_run, tmp_path):
    run = copy_run(npz_run, tmp_path)
    before = tree(run)
    code, err = search(capsys, "--out", run, "--resume", "--epochs", "3", "--budget", "1.0")
    assert code == 2
    one_message(err, "--budget", "saved 0.5", "given 1.0")
    assert tree(run) == before


def test_resume_takes_an_epochs_value_equal_to_its_default(npz_run):
    """--epochs 60 is the default: on a finished 2-epoch run it still means "continue to 60"."""
    cfg, given = parse_args(["--out", str(npz_run), "--resume", "--epochs", "60"])
    _, resumed = search_run.prepare_run_dir(cfg, given)
    assert resumed.epochs == 60 and resumed.budget == 0.5


def test_resume_refuses_fewer_epochs_than_trained(capsys, npz_run, tmp_path):
    run = copy_run(npz_run, tmp_path)
    (run / R.SUMMARY).unlink()  # as if killed after its last checkpoint
    before = tree(run)
    code, err = search(capsys, "--out", run, "--resume", "--epochs", "1")
    assert code == 2
    one_message(err, "--epochs 1", "already trained 10 steps")  # 2 epochs of 5 batches
    assert tree(run) == before


@pytest.mark.slow
def test_resume_with_more_epochs_records_them(capsys, npz_run, tmp_path):
    run = copy_run(npz_run, tmp_path)
    assert search(capsys, "--out", run, "--resume", "--epochs", "3")[0] == 0
    assert R.read_summary(run).steps == 3 * 5 and R.read_config(run).train["epochs"] == 3
    epochs = [r["epoch"] for r in R.read_jsonl(run / R.METRICS) if r["split"] == "val"]
    assert epochs == [0, 1, 2]


def test_a_run_from_before_pool_resumes_as_it_trained(capsys, tmp_path):
    """config.json from before --pool existed records neither the flag nor the model field; those
    runs pooled by the mean alone, and resuming one continues that network (the default is now
    'avgmax', whose head has weights the checkpoint does not hold)."""
    data = save_npz(tmp_path / "data.npz", np.arange(48) % 2)
    run = tmp_path / "old"
    assert search_run.main(["--task", f"npz:{data}", *FAST, "--epochs", "2", "--pool", "avg",
                            "--out", str(run)]) == 0
    record = json.loads((run / R.CONFIG).read_text())
    del record["train"]["pool"], record["model"]["pool"]
    (run / R.CONFIG).write_text(json.dumps(record))
    assert search(capsys, "--out", run, "--resume", "--epochs", "3")[0] == 0
    assert R.read_config(run).train["pool"] == "avg"
    assert R.read_summary(run).steps == 3 * 5


# --- case 5: a checkpoint that does not fit config.json -------------------------------------------


def test_resume_with_a_checkpoint_that_does_not_fit_the_config(capsys, npz_run, tmp_path):
    run = copy_run(npz_run, tmp_path)
    config = json.loads((run / R.CONFIG).read_text())
    config["train"]["width"] = 6  # an edited width
    (run / R.CONFIG).write_text(json.dumps(config))
    before = tree(run)
    code, err = search(capsys, "--out", run, "--resume", "--epochs", "3")
    assert code == 2
    one_message(err, "model.safetensors", "config.json", "has shape")
    assert tree(run) == before


# --- case 6: the data a run was trained on is fingerprinted ---------------------------------------


def test_config_records_the_data_fingerprint(npz_run):
    import hashlib

    data = R.read_config(npz_run).data
    path = Path(data["file"])
    assert data["file_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert len(data["arrays_sha256"]) == 64 and data["seed"] == 0
    assert data["options"] == {"val_fraction": 0.1, "layout": "auto"}  # the loader's settings


def test_resume_refuses_changed_data_unless_allowed(capsys, npz_run, tmp_path):
    run = copy_run(npz_run, tmp_path)
    data = tmp_path / "data.npz"
    save_npz(data, 1 - np.arange(48) % 2)  # the same shapes, other labels
    config = json.loads((run / R.CONFIG).read_text())
    config["task"] = config["train"]["task"] = f"npz:{data}"
    (run / R.CONFIG).write_text(json.dumps(config))
    before = tree(run)
    code, err = search(capsys, "--out", run, "--resume", "--epochs", "3")
    assert code == 2
    one_message(err, str(data), "changed", "--allow-data-change")
    assert tree(run) == before
    code, _ = search(capsys, "--out", run, "--resume", "--epochs", "3", "--allow-data-change")
    assert code == 0


# --- case 8: damaged records are named, not silently dropped --------------------------------------


def test_resume_refuses_a_damaged_line_before_the_last(capsys, npz_run, tmp_path):
    run = copy_run(npz_run, tmp_path)
    (run / R.SUMMARY).unlink()
    metrics = run / R.METRICS
    lines = metrics.read_text().splitlines()
    lines[1] = lines[1][:10]
    metrics.write_text("\n".join(lines) + "\n")
    before = tree(run)
    code, err = search(capsys, "--out", run, "--resume", "--epochs", "3")
    assert code == 2
    one_message(err, "metrics.jsonl: line 2")
    assert tree(run) == before
