#!/bin/bash
# The CUDA path, checked on a lent GPU machine in one short call (benchmarks/results/cuda_check.md):
# training with bfloat16 autocast (the --amp default) and without, torchrun with NCCL, export of
# GPU-trained runs (equivalence), the training step on CUDA (model_step.py), and a SIGKILL +
# --resume (benchmarks/cuda_resume.py).
#
#   bash benchmarks/cuda_check.sh prepare DIR        # here, with sktime: DIR/GunPoint.npz, DIR/ACSF1.npz
#   bash benchmarks/cuda_check.sh run DIR            # there (no sktime, no network): the checks
#
# The GPU machine has no sktime, so the UCR sets travel as npz files with the task's own split.
set -u
mode=${1:?usage: cuda_check.sh prepare|run DIR}
dir=${2:?usage: cuda_check.sh prepare|run DIR}
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
run() { local name=$1; shift; log "$name: $*"
        /usr/bin/time -f "$name wall %e s" timeout 110 "$@" 2>&1 | grep -av "step/s" | tail -25; }
log env
nvidia-smi -L
python3 -c "import torch, onnxruntime as ort; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| onnxruntime', ort.__version__, ort.get_available_providers())"
run gp-amp python3 -m search.run --task npz:$dir/GunPoint.npz --device cuda --out $W/gp-amp
run gp-fp32 python3 -m search.run --task npz:$dir/GunPoint.npz --device cuda --no-amp --out $W/gp-fp32
run gp-nccl torchrun --standalone --nproc_per_node=1 -m search.run --task npz:$dir/GunPoint.npz --device cuda --out $W/gp-nccl
run digits-amp python3 -m search.run --task digits --device cuda --out $W/digits-amp
run acsf1-amp python3 -m search.run --task npz:$dir/ACSF1.npz --device cuda --out $W/acsf1-amp
for r in gp-amp digits-amp acsf1-amp; do
  log "export $r"; timeout 120 python3 -m export.onnx $W/$r --no-tune 2>&1 | tail -4
  python3 -c "import json; d = json.load(open('$W/$r/export/report.json')); print('$r equivalence', {k: v['max_abs'] for k, v in d['equivalence'].items()})"
done
log model_step; timeout 150 python3 benchmarks/model_step.py --devices cuda --reps 5 --out ${OUT:-$W}/model_step_cuda.md | grep "^|"
log resume; DEV=cuda timeout 120 python3 benchmarks/cuda_resume.py $dir/GunPoint.npz
log done
