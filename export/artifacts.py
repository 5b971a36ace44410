"""What RUN_DIR/export/ holds: the names defined once in :mod:`dnarch_deploy.rundir` (which
also reads the report back, checking its schema), under the names the export stages use. Free
of torch, so that inference with onnxruntime alone imports nothing heavy."""

from dnarch_deploy.rundir import (
    AOTI_FILE,
    EXPORT_ARCHITECTURE_FILE,
    EXPORT_SCHEMA,
    EXPORT_VERSION,
    ONNX_FILE,
    PT2_FILE,
    REPORT_FILE,
    TS_FILE,
)

SCHEMA = EXPORT_SCHEMA
VERSION = EXPORT_VERSION
ARCHITECTURE_FILE = EXPORT_ARCHITECTURE_FILE

__all__ = ["AOTI_FILE", "ARCHITECTURE_FILE", "ONNX_FILE", "PT2_FILE", "REPORT_FILE", "SCHEMA",
           "TS_FILE", "VERSION"]
