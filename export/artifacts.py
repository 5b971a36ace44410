"""What RUN_DIR/export/ holds: file names and the schema of its JSON files (kept free of torch,
so that inference with onnxruntime alone imports nothing heavy)."""

SCHEMA = "dnarch-export"
VERSION = 1
ONNX_FILE = "model.onnx"
PT2_FILE = "model.pt2"
TS_FILE = "model.ts"
AOTI_FILE = "model.aoti.pt2"
ARCHITECTURE_FILE = "architecture.json"
REPORT_FILE = "report.json"
