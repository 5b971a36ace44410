"""`python -m export.onnx RUN_DIR`: export a trained run to RUN_DIR/export/.

Writes model.onnx (onnxruntime, batch dynamic), model.pt2 (torch.export), model.ts (legacy
TorchScript), optionally model.aoti.pt2, plus architecture.json and report.json, after checking
that every artifact computes what the trained model computes. See docs/export.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from dnarch_deploy.cli import add_fields

from .bench import format_table
from .pipeline import ExportError, ExportOptions, export_run
from .tactics import TACTICS
from .verify import VerificationError

# what a user can cause: a bad run directory or task (RunError, SchemaError and TaskError are
# ValueErrors), bad options, an unwritable disk, an export that fails verification
USER_ERRORS = (ValueError, OSError, ExportError, VerificationError)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m export.onnx", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("run_dir", type=Path, help="a run directory written by python -m search.run")
    add_fields(p, ExportOptions, tactic={"choices": TACTICS})
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(ExportOptions)}
    try:
        options = ExportOptions(**values)
        report = export_run(args.run_dir, options)
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    out = args.run_dir / "export"
    print(f"exported {args.run_dir} -> {out}/")
    print("tactics:", ", ".join(f"block {i}: {t}" for i, t in enumerate(report.tactics)) or "-")
    tuning = report.tuning
    if tuning["batches"]:
        print(f"tactics chosen by measurement for batch {' and '.join(map(str, tuning['batches']))}"
              f" ({tuning['threads']} threads)")
    print("equivalence with the trained model (max rel. error):")
    for stage, err in report.equivalence.items():
        print(f"  {stage:12s} {err['max_rel']:.2e}  (max abs {err['max_abs']:.2e})")
    backends = ", ".join(
        f"{name}: {'ok' if b['compatible'] else 'no (' + ', '.join(b['unsupported_ops']) + ')'}"
        for name, b in report.backends.items()
    )
    print(f"backends: {backends}")
    if report.latency:
        lat = report.latency
        print(f"\nlatency (onnxruntime, {lat['threads']} threads; theoretical in MACs/sample):")
        print(format_table(lat))
        print(f"onnxruntime vs masked trained model in eager PyTorch, batch 1: "
              f"{lat['speedup_vs_trained']:.1f}x faster")
        ceiling = lat["ceiling"]
        print(f"MatMul ceiling (one {'x'.join(map(str, ceiling['shape']))} MatMul, same run): "
              f"{ceiling['gflops']:.1f} GFLOP/s; the model reaches "
              + ", ".join(f"{f:.1%} at B={b}" for b, f in ceiling["fraction_by_batch"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
