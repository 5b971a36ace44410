"""The benchmarks: scripts that measure the project and write benchmarks/results/, each run from
the repository's root as ``python -m benchmarks.NAME`` (docs/benchmarks.md lists them); what they
share is in :mod:`benchmarks.harness`."""
