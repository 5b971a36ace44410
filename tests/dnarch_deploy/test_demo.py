"""`python -m dnarch_deploy`: the model library's demo, run in this process."""

from __future__ import annotations

import json
import re

from dnarch_deploy import ModelConfig, base_cost
from dnarch_deploy import __main__ as demo


def test_the_demo_prints_the_model_its_output_its_cost_and_its_architecture(capsys):
    demo.main()
    out = capsys.readouterr().out
    assert "output: (8, 2)" in out
    macs, ratio = re.search(r"cost ([\d,]+) MACs = ([\d.]+) x the base CCNN_\{4,32\}", out).groups()
    base = base_cost(ModelConfig(1, 2, (150,), depth=4, width=32))
    assert float(ratio) == round(int(macs.replace(",", "")) / base, 3)
    arch = json.loads(out[out.index("\n{") + 1:])  # the last thing printed
    assert arch["input_size"] == [150] and arch["depth"] == 4 and len(arch["blocks"]) == 4
