#!/bin/bash
# The CUDA path, checked on a lent GPU machine in short calls (benchmarks/results/cuda_check.md):
# training with bfloat16 autocast (the --amp default) and without, torchrun with NCCL, --cost
# latency, export of GPU-trained runs (equivalence, the batch axis of model.onnx and model.pt2),
# the training step on CUDA (benchmarks.step_profile: where its time goes; benchmarks.model_step:
# against the base), and a SIGKILL + --resume (benchmarks.cuda_resume).
#
#   bash benchmarks/cuda_check.sh prepare DIR        # here, with sktime: DIR/GunPoint.npz, DIR/ACSF1.npz
#   bash benchmarks/cuda_check.sh run DIR            # there (no sktime, no network): the checks
#   bash benchmarks/cuda_check.sh step               # there: the training step alone
#
# `run` took 8.3 minutes at cf72742 (its searches are capped at 240 s each), `step` takes at most
# 4.5 (capped at 120 and 150 s): one call each fits the 10-minute limit of a call, both do not.
#
# The GPU machine has no sktime, so the UCR sets travel as npz files with the task's own split.
set -u
usage="usage: cuda_check.sh prepare DIR | run DIR | step"
mode=${1:?$usage}
case $mode in prepare|run) dir=${2:?$usage};; step) ;; *) echo "$usage" >&2; exit 2;; esac
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1

if [ "$mode" = prepare ]; then
  mkdir -p "$dir"
  python - "$dir" <<'PY'
import sys
import numpy as np
from dnarch_deploy.tasks import load_task
for name in ("GunPoint", "ACSF1"):
    t = load_task(f"ucr:{name}", seed=0)
    keys = ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test")
    np.savez_compressed(f"{sys.argv[1]}/{name}.npz", **{k: getattr(t, k) for k in keys})
PY
  exit
fi

W=/tmp/cuda-check-runs; mkdir -p $W
log() { echo "=== $* ($(date +%T))"; }
if [ "$mode" = step ]; then
  log step_profile; timeout 120 python3 -m benchmarks.step_profile --device cuda --top 20
  echo "step_profile exit $?"
  log model_step; timeout 150 python3 -m benchmarks.model_step --devices cuda --reps 3 \
    --out ${OUT:-$W}/model_step_cuda.md 2>&1 | grep -a "^|\|Error\|Traceback"
  echo "model_step exit ${PIPESTATUS[0]} (124: stopped by its timeout)"
  log done; exit
fi
run() { local name=$1; shift; log "$name: $*"
        /usr/bin/time -f "$name wall %e s" timeout 240 "$@" 2>&1 | grep -av "step/s" | tail -25; }
npz=npz:$dir/GunPoint.npz
log env
nvidia-smi -L
python3 -c "import torch, onnxruntime as ort; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| onnxruntime', ort.__version__, ort.get_available_providers())"
run gp-amp python3 -m search.run --task $npz --device cuda --out $W/gp-amp  # alone: a clean time
# The rest side by side on the one GPU (the small tasks' steps are launch-bound, 16 cores): their
# times are not clean, their results are.
run gp-fp32 python3 -m search.run --task $npz --device cuda --no-amp --out $W/gp-fp32 >$W/gp-fp32.log &
run gp-nccl torchrun --standalone --nproc_per_node=1 -m search.run --task $npz --device cuda \
  --out $W/gp-nccl >$W/gp-nccl.log &
run gp-latency python3 -m search.run --task $npz --device cuda --cost latency --budget 0.5 \
  --out $W/gp-latency >$W/gp-latency.log &
run digits-amp python3 -m search.run --task digits --device cuda --out $W/digits-amp >$W/digits-amp.log &
run acsf1-amp python3 -m search.run --task npz:$dir/ACSF1.npz --device cuda --out $W/acsf1-amp >$W/acsf1-amp.log &
wait; cat $W/*.log
export_one() {
  timeout 200 python3 -m export.onnx $W/$1 --no-tune 2>&1 | tail -4
  python3 -c "import json; d = json.load(open('$W/$1/export/report.json')); print('$1 equivalence', {k: v['max_abs'] for k, v in d['equivalence'].items()})"
}
for r in gp-amp gp-latency digits-amp acsf1-amp; do export_one $r >$W/export-$r.log 2>&1 & done
wait; for r in gp-amp gp-latency digits-amp acsf1-amp; do log "export $r"; cat $W/export-$r.log; done
if [ ! -f $W/acsf1-amp/export/report.json ]; then  # where torch.export added the failing guard
  log "acsf1 guards"; TORCH_LOGS=dynamic timeout 200 python3 -m export.onnx $W/acsf1-amp --no-tune \
    2>&1 | grep -a "guard added" | grep -ai "min" | head -5
fi
log "batch axis of gp-amp's model.onnx and model.pt2"
python3 - $W/gp-amp/export <<'PY'
import sys
import numpy as np, onnx, onnxruntime as ort, torch
d = sys.argv[1]
m = onnx.load(f"{d}/model.onnx")
print("onnx input dims", [x.dim_param or x.dim_value for x in m.graph.input[0].type.tensor_type.shape.dim])
program, session = torch.export.load(f"{d}/model.pt2"), ort.InferenceSession(f"{d}/model.onnx")
for b in (1, 7):
    x = torch.randn(b, *program.example_inputs[0][0].shape[1:])
    a, c = session.run(None, {"x": x.numpy()})[0], program.module()(x).detach().numpy()
    print("batch", b, "onnx", a.shape, "pt2", c.shape, "max diff", float(np.abs(a - c).max()))
PY
log resume; DEV=cuda timeout 120 python3 -m benchmarks.cuda_resume $dir/GunPoint.npz
log done
