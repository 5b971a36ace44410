"""The report's cost columns: ``paper`` is the search's cost model of the found architecture,
the same figure the budget constrained, layer by layer; it is ``theoretical``, the lowered
network's MACs, where export chose by cost."""

from __future__ import annotations

import math

import pytest

from dnarch_deploy import describe
from dnarch_deploy.cost import architecture_cost, encoder_cost
from export.bench import theoretical_costs
from export.lowering import lower
from export.policy import cheapest, tactic_costs
from export.static import freeze, materialize

from .export_cases import random_model

SEEDS = range(40, 56)  # 1-D, 2-D, token and dense models, some with blocks removed


@pytest.mark.parametrize("seed", SEEDS)
def test_paper_column_is_the_search_cost_of_the_found_architecture(seed):
    model = random_model(seed)
    found = describe(model)
    static = materialize(model, freeze(model))
    lowered = lower(static, cheapest(tactic_costs(static)))
    costs = theoretical_costs(lowered, found)
    assert list(costs) == ["encoder", *(f"blocks.{i}" for i in range(found.depth)), "decoder"]
    assert sum(c["paper"] for c in costs.values()) == pytest.approx(architecture_cost(found),
                                                                    rel=1e-12)
    # one cost model: the network lowered by cost is, layer by layer, what the search priced
    for name, c in costs.items():
        assert c["theoretical"] == pytest.approx(c["paper"], rel=1e-12), name
    # the encoder: its linear map at the input channels (none for tokens: a table look-up)
    length = float(math.prod(found.input_size))
    channels = 0 if found.vocab_size else found.in_channels
    expected = sum(encoder_cost(length, channels, found.stream_width).values())
    assert costs["encoder"]["paper"] == pytest.approx(expected, rel=1e-12)
    assert theoretical_costs(lowered).keys() == costs.keys()  # theoretical needs no architecture
    assert all("paper" not in c for c in theoretical_costs(lowered).values())


def test_cases_cover_tokens_and_removed_blocks():
    models = [random_model(s) for s in SEEDS]
    assert any(m.config.vocab_size for m in models)
    assert any(len(describe(m).blocks) < m.config.max_depth for m in models)
