"""A job reuses a run directory only when it computed what the job asks for."""

import json
import shutil

import pytest

from dnarch_deploy import rundir as R
from search.jobs import JobError, Run, check_saved, execute, saved_differences

from .conftest import TINY


def job(run_dir, *flags) -> Run:
    return Run("ucr:GunPoint", "search", 0, run_dir, [*TINY, *flags])


@pytest.mark.slow
def test_the_same_flags_agree_and_another_value_is_named(tiny_run):
    assert saved_differences(job(tiny_run)) == []
    assert saved_differences(job(tiny_run, "--lr", "0.02")) == ["lr: saved 0.01, wanted 0.02"]
    with pytest.raises(JobError, match="made with other settings .*lr: saved 0.01"):
        check_saved(job(tiny_run, "--lr", "0.02"))


def test_a_flag_resolved_per_task_agrees_with_the_value_the_run_trained_with(tiny_run, tmp_path):
    """tiny_run left --shift and --jitter out, and GunPoint's 40 training series resolved both to
    0.1: typing 0.1 asks for the same run, 0.2 for another."""
    assert saved_differences(job(tiny_run, "--shift", "0.1", "--jitter", "0.1")) == []
    assert saved_differences(job(tiny_run, "--shift", "0.2")) == [
        "shift: saved None, wanted 0.2"]
    # the other way: a run that gave --shift 0.1 is what --shift left out resolves to here
    given = tmp_path / "given"
    shutil.copytree(tiny_run, given)
    config = json.loads((given / R.CONFIG).read_text())
    config["train"]["shift"] = 0.1
    (given / R.CONFIG).write_text(json.dumps(config))
    assert saved_differences(job(given)) == []
    config["train"]["shift"] = config["in_effect"]["shift"] = 0.3
    (given / R.CONFIG).write_text(json.dumps(config))
    assert saved_differences(job(given)) == ["shift: saved 0.3, wanted None"]


def test_a_run_from_before_pool_reads_as_pooling_the_mean(tiny_run, tmp_path):
    """A run written before --pool existed read the channels' means only: it is the job of
    --pool avg, not of today's default, and another flag's value is still named."""
    old = tmp_path / "old"
    shutil.copytree(tiny_run, old)
    config = json.loads((old / R.CONFIG).read_text())
    del config["train"]["pool"], config["model"]["pool"]
    (old / R.CONFIG).write_text(json.dumps(config))
    assert saved_differences(job(old, "--pool", "avg")) == []
    assert saved_differences(job(old)) == ["pool: saved 'avg', wanted 'avgmax'"]
    assert saved_differences(job(old, "--pool", "avg", "--dropout", "0.1")) == [
        "dropout: saved 0.0, wanted 0.1"]


def test_a_run_with_a_removed_option_is_reused_only_at_its_old_default(tiny_run, tmp_path):
    """A run written while --mask-data existed, at its default (the masks stepped on the
    training batch), computed what today's job asks for; one at another value is refused,
    naming the option, never silently reused."""
    old = tmp_path / "old"
    shutil.copytree(tiny_run, old)
    config = json.loads((old / R.CONFIG).read_text())
    config["train"]["mask_data"] = "train"
    (old / R.CONFIG).write_text(json.dumps(config))
    assert saved_differences(job(old)) == []
    assert saved_differences(job(old, "--weight-decay", "0.02")) == [
        "weight_decay: saved 0.01, wanted 0.02"]
    config["train"]["mask_data"] = "val"
    (old / R.CONFIG).write_text(json.dumps(config))
    with pytest.raises(R.RunError, match="written with --mask-data 'val', an option removed"):
        saved_differences(job(old))


def test_a_run_from_before_jitter_reads_as_trained_without_it(tiny_run, tmp_path):
    """A run written before --jitter existed trained without it: it is the job of --jitter 0,
    not of the small-set default (0.1 on GunPoint)."""
    old = tmp_path / "old"
    shutil.copytree(tiny_run, old)
    config = json.loads((old / R.CONFIG).read_text())
    del config["train"]["jitter"], config["in_effect"]["jitter"]
    (old / R.CONFIG).write_text(json.dumps(config))
    assert saved_differences(job(old, "--jitter", "0")) == []
    assert saved_differences(job(old)) == ["jitter: saved 0.0, wanted None"]


def test_a_run_from_before_crop_min_budget_reads_as_learning_r_at_every_budget(tiny_run, tmp_path):
    """Before --crop-min-budget, a budgeted search learned R at every budget: where the default
    (1: no R under a MAC budget below the base's) would not, it is the job of
    --crop-min-budget 0 only; where both learn the same, of either."""
    old = tmp_path / "old"
    shutil.copytree(tiny_run, old)
    config = json.loads((old / R.CONFIG).read_text())
    del config["train"]["crop_min_budget"]
    (old / R.CONFIG).write_text(json.dumps(config))
    assert saved_differences(job(old, "--crop-min-budget", "0")) == []
    # at budget 1 both values learn R: the same run
    assert saved_differences(job(old)) == []
    # at 0.5 it learned R, which the default no longer does
    config["train"]["budget"] = 0.5
    (old / R.CONFIG).write_text(json.dumps(config))
    assert saved_differences(job(old, "--budget", "0.5", "--crop-min-budget", "0")) == []
    assert saved_differences(job(old, "--budget", "0.5")) == [
        "crop_min_budget: saved 0.0, wanted 1.0"]
    # '--learn KWD' at 0.5 computed what the default asks for there; at 1 it did not
    config["train"]["learn"] = config["model"]["learn"] = "KWD"
    (old / R.CONFIG).write_text(json.dumps(config))
    assert saved_differences(job(old, "--budget", "0.5")) == []
    assert saved_differences(job(old, "--budget", "0.5", "--crop-min-budget", "0")) == [
        "learn: saved 'KWD', wanted 'KRWD'"]
    assert sorted(saved_differences(job(old, "--budget", "1"))) == [
        "budget: saved 0.5, wanted 1.0", "crop_min_budget: saved 0.0, wanted 1.0",
        "learn: saved 'KWD', wanted 'KRWD'"]
    # on an input too short for R, that run is the job of either value
    config["model"]["input_size"] = [8]
    (old / R.CONFIG).write_text(json.dumps(config))
    assert saved_differences(job(old, "--budget", "0.5", "--crop-min-budget", "0")) == []


def as_written_before_shipped_scores(run_dir):
    """Make a run's records look as runs before the shipped test metric wrote them: the
    batch-statistics figures as the test metric, and no field beside them."""
    summary = json.loads((run_dir / R.SUMMARY).read_text())
    summary["test_metric"] = summary.pop("test_metric_batch_statistics")
    summary["test_loss"] = summary.pop("test_loss_batch_statistics")
    (run_dir / R.SUMMARY).write_text(json.dumps(summary))
    rows = [json.loads(line) for line in (run_dir / R.METRICS).read_text().splitlines()]
    for row in rows:
        if row["split"] == "test":
            row["metric"] = row["accuracy"] = row.pop("metric_batch_statistics")
    (run_dir / R.METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return summary


@pytest.mark.slow
def test_a_reused_run_from_before_is_rescored_as_shipped(tiny_run, tmp_path):
    """A finished run whose test metric is the batch-statistics one is rescored when a job
    reuses it (python -m search.rescore), so it averages with new runs; nothing trains."""
    old = tmp_path / "old"
    shutil.copytree(tiny_run, old)
    new = R.read_summary(tiny_run)
    before = as_written_before_shipped_scores(old)
    timings = {}
    assert not R.read_summary(old).scored_as_shipped  # migrate.summary_v1
    summary = execute(job(old), timings)
    assert timings == {}  # reused, not trained
    assert summary.scored_as_shipped and summary.test_metric == new.test_metric
    assert summary.test_loss == pytest.approx(new.test_loss, rel=1e-6)
    assert summary.test_metric_batch_statistics == before["test_metric"]
    test_row = [r for r in R.read_jsonl(old / R.METRICS) if r["split"] == "test"]
    assert [r["metric"] for r in test_row] == [new["test_metric"]]
    assert [r["metric_batch_statistics"] for r in test_row] == [before["test_metric"]]


@pytest.mark.parametrize("damage, field", [
    (lambda s: s.pop("macs"), "missing field 'macs'"),
    (lambda s: s.update(test_metric="0.9"), "field 'test_metric' must be a number"),
])
def test_a_reused_run_with_a_damaged_summary_is_refused_in_one_line(tiny_run, tmp_path, damage,
                                                                    field):
    """A job reusing a finished run reads its summary through the record (no bare json.loads):
    a damaged one is one line naming the file and the field, and nothing runs."""
    old = tmp_path / "old"
    shutil.copytree(tiny_run, old)
    summary = json.loads((old / R.SUMMARY).read_text())
    damage(summary)
    (old / R.SUMMARY).write_text(json.dumps(summary))
    timings = {}
    with pytest.raises(R.RunError) as error:
        execute(job(old), timings)
    message = str(error.value)
    assert message.startswith(f"{old / R.SUMMARY}: ") and field in message
    assert len(message.splitlines()) == 1 and timings == {}
