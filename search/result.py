"""Which round is the run's result, and when a run has stalled.

The result rule: among the validation rounds whose network fits the budget, the latest whose
validation metric, averaged over its last rounds, is within one standard error of the best such
average. The stall test: a training objective still high after a share of the steps restarts the
run from a new initialisation (search.train.train_with_restarts).
"""

from __future__ import annotations

from dnarch_deploy.params import architecture_params

from .config import SearchConfig

# A run is stalled when, after STALL_CHECK of its steps, its training objective is still above
# STALL_SHARE of the first round's (both counted above the objective's floor: 0, or with label
# smoothing the smoothed targets' entropy): an initialisation that never tells some classes apart
# (a loss stuck at ln 2 / 2). It restarts from a new initialisation (--restarts times at most). Runs
# shorter than STALL_MIN_STEPS are not judged: they may simply not have had the time.
STALL_CHECK = 0.3
STALL_SHARE = 0.5
STALL_MIN_STEPS = 300
# The result rule compares rounds by their validation metric averaged over the last RESULT_WINDOW
# rounds (fewer at the start). On a 7- to 40-sample validation split one round's metric jumps by a
# sample or two from round to round, and one lucky round would set a bar no later round reaches
# (docs/search.md "Result rule").
RESULT_WINDOW = 5


def stalled(loss: float, first_loss: float, floor: float = 0.0) -> bool:
    """The stall test (STALL_CHECK): still above STALL_SHARE of the first round's loss, both
    counted above ``floor``, the least value the training objective can take."""
    return loss - floor > STALL_SHARE * (first_loss - floor)


class Stalled(RuntimeError):
    """The training objective stalled (see STALL_CHECK); ``record`` says where and how high."""

    def __init__(self, record: dict):
        floor = record.get("floor", 0.0)
        above = f" (counted above the smoothed targets' entropy {floor:.3f})" if floor else ""
        super().__init__(f"training loss {record['loss']:.3f} after {record['step']} steps is "
                         f"above {STALL_SHARE} x the first round's {record['first_loss']:.3f}"
                         f"{above}")
        self.record = record



def within_params(arch, cfg: SearchConfig) -> bool:
    """--max-params met by a round's network (always, without a limit)."""
    return not cfg.max_params or architecture_params(arch) <= cfg.max_params


def within_budget(cfg: SearchConfig, ratio: float, arch) -> bool:
    """A round's network costs at most (1 + --budget-tolerance) x C_target and meets
    --max-params."""
    return ratio <= 1.0 + cfg.budget_tolerance and within_params(arch, cfg)


def result_fits(cfg: SearchConfig, ratio: float, arch) -> bool:
    """Does a round count as fitting for the result rule (:func:`is_result`)? Within the budget;
    with --lam 0 nothing holds the search to a budget (the paper's DNArch(K,R) without one), so
    any round within --max-params: held to the initial network's cost, the rule would pick an
    early round from before the first crop (OSULeaf, seed 0: epoch 7 of 50)."""
    return within_budget(cfg, ratio, arch) or (cfg.lam == 0 and within_params(arch, cfg))


def smoothed(history: list[float], window: int = RESULT_WINDOW) -> float:
    """The mean of the last ``window`` validation metrics of a run (all of them when fewer)."""
    recent = history[-window:]
    return sum(recent) / len(recent)


def is_result(metric: float, fits: bool, best: tuple | None, higher: bool,
              standard_error) -> tuple[bool, tuple | None]:
    """Is this round the new result, and the new ``best`` (top metric, fits)? A round whose
    network fits the budget beats one that does not. Among rounds alike in that, the result is
    the latest whose ``metric`` (the validation metric, :func:`smoothed` over the last rounds) is
    within one standard error of the top one (a one-standard-error rule, as in CART's pruning,
    preferring the longer-trained round). On a 7- or 10-sample validation split one sample is
    10-15 % of accuracy, so "the best round" is often an early round that won by chance.
    ``standard_error(value)`` is the metric's standard error on the validation split; with 0 the
    latest of the tied top rounds wins."""
    if best is None or fits != best[1]:
        return (True, (metric, fits)) if best is None or fits else (False, best)
    top = max(best[0], metric) if higher else min(best[0], metric)
    slack = standard_error(top)
    close = metric >= top - slack if higher else metric <= top + slack
    return close, (top, fits)
