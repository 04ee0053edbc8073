#!/usr/bin/env bash
# Every GPU check of the project in one run (one short device lease): kernel correctness + speed, the
# full-width runtime benchmark, then a few minutes of training of the embedded checkpoint.
# Usage on the GPU machine, repository root: OUT=/dir bash benchmarks/gpu_suite.sh [TRAIN_MINUTES]
# Results under $OUT: sampling_kernel.json, gpu_runtime.json, serve_load.json, logs.tgz, agentkit-tiny.tgz.part-* (split to
# stay under file-size limits). Each part has its own timeout so one failure does not lose the others.
set -uo pipefail
TRAIN_MIN="${1:-3.5}"
OUT="${OUT:-runs/gpu_suite}"
mkdir -p "$OUT" /tmp/gpu_logs
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:$PWD" || echo "wheel install failed"
else
  export PYTHONPATH="$PWD"
fi
python3 -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" 2>&1 | tee /tmp/gpu_logs/env.txt
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv >> /tmp/gpu_logs/env.txt 2>&1
t0=$(date +%s)
left() { local l=$(( ${BUDGET_S:-570} - ($(date +%s) - t0) )); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 10 ] && l=10; echo "$l"; }
echo "== training ($(date +%T))"
MASKBENCH=.gpu/dev.jsonl.gz OUT=/tmp/gpu_train PYTHON=python3 timeout "$(left 330)" bash model/training/gpu_train.sh "$TRAIN_MIN" 128 > /tmp/gpu_logs/train.out 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s"; tail -5 /tmp/gpu_logs/train.out
cp /tmp/gpu_train/run/log.jsonl /tmp/gpu_logs/train_log.jsonl 2>/dev/null
if [ -d /tmp/gpu_train/agentkit-tiny ]; then
  tar -C /tmp/gpu_train -czf /tmp/agentkit-tiny.tgz agentkit-tiny && split -b 15m /tmp/agentkit-tiny.tgz "$OUT/agentkit-tiny.tgz.part-"
fi
echo "== sampling kernel ($(date +%T))"
OUT=/tmp/gpu_logs timeout "$(left 120)" python3 benchmarks/sampling_kernel.py --quick --json > "$OUT/sampling_kernel.json" 2> /tmp/gpu_logs/sampling_kernel.err
echo "rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/gpu_logs/sampling_kernel.err
echo "== full-width runtime ($(date +%T))"
OUT=/tmp/gpu_logs timeout "$(left 170)" python3 benchmarks/gpu_runtime.py --quick --json > "$OUT/gpu_runtime.json" 2> /tmp/gpu_logs/gpu_runtime.err
echo "rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/gpu_logs/gpu_runtime.err
cp /tmp/gpu_logs/gpu_runtime_partial.json "$OUT/" 2>/dev/null
echo "== agentkit serve under load ($(date +%T))"
timeout "$(left 90)" python3 benchmarks/serve_load.py --quick --json --device cuda > "$OUT/serve_load.json" 2> /tmp/gpu_logs/serve_load.err
echo "rc=$? $(( $(date +%s) - t0 )) s"; tail -3 /tmp/gpu_logs/serve_load.err
tar -C /tmp -czf "$OUT/logs.tgz" gpu_logs
ls -la "$OUT"
echo "== total $(( $(date +%s) - t0 )) s"
