"""benchmarks.pointwise_forms: both forms timed on a layer and on a whole step, same values."""

from __future__ import annotations

import re

import pytest

import dnarch_deploy.model as model_module
from benchmarks import pointwise_forms


def test_quick_run_times_both_forms_and_they_agree(capsys, tmp_path):
    out = tmp_path / "unused.md"
    assert pointwise_forms.main(["--quick", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    layer = re.search(r"\| \(32, 32\) @ \(32, 32, 150\) \|(.*)\|", text).group(1).split("|")
    fwd_matmul, fwd_bmm, _, step_matmul, step_bmm, _, diff = (v.strip() for v in layer)
    assert min(map(float, (fwd_matmul, fwd_bmm, step_matmul, step_bmm))) > 0
    assert float(diff) <= 1e-5  # the same product, two layouts
    assert "| training step, the default ucr:GunPoint model at init (L=150) |" in text
    assert not out.exists()  # --quick writes nothing


def test_the_model_keeps_its_own_form_whichever_form_ran_last(monkeypatch):
    own = model_module._pointwise
    monkeypatch.setattr(pointwise_forms, "FORMS", dict(reversed(pointwise_forms.FORMS.items())))
    row = pointwise_forms.model_row(1)
    assert row["step matmul"] > 0 and row["step bmm"] > 0
    assert model_module._pointwise is own


def test_an_unknown_task_is_one_message_before_any_timing(capsys, tmp_path):
    out = tmp_path / "report.md"
    with pytest.raises(SystemExit) as e:
        pointwise_forms.main(["--tasks", "ucr:NoSuchSet", "--out", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--tasks:" in err[-1] and "NoSuchSet" in err[-1]
    assert not out.exists()


def test_an_out_file_in_a_missing_folder_is_one_message_before_any_timing(capsys, tmp_path):
    out = tmp_path / "missing" / "report.md"
    with pytest.raises(SystemExit) as e:
        pointwise_forms.main(["--out", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"--out {out}: cannot write a report there (directory {out.parent} "
                            "does not exist)")
    assert not out.parent.exists()
