"""Checks on what benchmarks print: a ratio shown next to the two timings it divides."""

from __future__ import annotations

import pytest


def assert_printed_ratio(ratio: float, numerator: float, denominator: float, *,
                         ms_decimals: int = 3, ratio_decimals: int = 2) -> None:
    """The ratio is printed from the unrounded timings: each rounding bounds how far it may sit
    from the quotient of the printed ones (a 0.05 ms timing to 3 decimals is 1 % off)."""
    half_ms, half_ratio = 0.5 * 10 ** -ms_decimals, 0.5 * 10 ** -ratio_decimals
    gap = ratio * (half_ms / numerator + half_ms / denominator) + half_ratio
    assert ratio == pytest.approx(numerator / denominator, abs=1.01 * gap + 1e-9)
