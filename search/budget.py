"""What the complexity term aims at, and how a --cost latency search re-prices it.

C_target is the budget times the base network's cost in the run's units (MACs, or predicted
onnxruntime milliseconds); it tightens from the initial network's cost over --budget-ramp. With
--cost latency the search times the network its masks describe beside the base, in this process,
and puts the base in that network's time (docs/cost.md "Latency checks"): a hook that returns a
new :class:`Budget`, never a changed configuration.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from dnarch_deploy import DNArch, base_cost
from dnarch_deploy.model import canonical_learn

from . import distributed
from .config import SearchConfig


@dataclass(frozen=True)
class Budget:
    """The units the cost is counted in, C_target in them, and the base's milliseconds they take
    as the reference (--cost latency; empty otherwise, or where the table prices the base)."""

    units: object
    target: float
    base_ms: tuple[float, ...] = ()


def price(cfg: SearchConfig, mcfg, base_ms=None) -> Budget:
    """The run's budget, the base at ``base_ms`` (default: --base-ms, or as timed before)."""
    base_ms = list(cfg.base_ms if base_ms is None else base_ms)
    units = cfg.cost_units(mcfg, base_ms)
    return Budget(units, cfg.budget * base_cost(mcfg, units), tuple(base_ms))


def scheduled_target(cfg: SearchConfig, start: float, target: float, step: int,
                     steps: int) -> float:
    """C_target at this step: from ``start`` (the initial network's cost) to ``target`` (the
    budget's) geometrically over the first --budget-ramp share of the steps, then ``target``. A
    budget far below the initial cost otherwise makes L_comp's first gradients so large that
    every mask is slammed to its minimum before the task loss shapes any of them."""
    ramp = cfg.budget_ramp * steps
    if step >= ramp:
        return target
    return target * (start / target) ** (1.0 - step / ramp)


def latency_check_steps(cfg: SearchConfig, learn: str, steps: int) -> list[int]:
    """The steps after whose round a ``--cost latency`` search times the network its masks
    describe beside the base and re-prices the base in that network's time
    (:func:`reprice_in_found_time`): --latency-checks of them, evenly from the end of the budget's
    ramp (before it the target still moves) to the last step. None where no budget is held to a
    measured base: --cost macs, --lam 0, the base itself (--learn none), or a base priced by
    another machine's table (no --base-ms)."""
    if (cfg.cost != "latency" or cfg.lam == 0 or not cfg.base_ms or not cfg.latency_checks
            or canonical_learn(learn) == "none"):
        return []
    ramp = round(cfg.budget_ramp * steps)
    return [max(1, ramp + round(i * (steps - ramp) / cfg.latency_checks))
            for i in range(cfg.latency_checks)]


def reprice_in_found_time(cfg: SearchConfig, budget: Budget, mcfg, model: DNArch,
                          world) -> Budget:
    """The budget with the base's milliseconds in the time of the network ``model``'s masks
    describe now, at every --latency-batch: rank 0 times that network and the base in turns
    (:func:`export.base_latency.base_milliseconds`, in this process) and sends the result to the
    other ranks. A probe of the table's points puts the base in the table's time as those points
    drifted, and the found network's smaller operators drift otherwise (docs/cost.md); its own
    time over its predicted is the drift its budget meets. When the timing fails, a warning, and
    the budget stays as it was."""
    timed = None
    if world.rank == 0:
        from export.base_latency import MeasurementError, base_milliseconds

        try:
            timed = base_milliseconds(mcfg, cfg.latency_batch, cfg.latency_table, found=model)
        except MeasurementError as e:
            print(f"warning: {e}; the budget stays a share of the base's time as timed "
                  f"before ({', '.join(f'{ms:.4g}' for ms in budget.base_ms)} ms)",
                  file=sys.stderr)
    timed = distributed.broadcast(timed, world)
    return price(cfg, mcfg, timed) if timed else budget
