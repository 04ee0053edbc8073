#!/usr/bin/env bash
# Train agentkit-tiny on one CUDA GPU (bf16 autocast) and leave the checkpoint under $OUT.
#
# Usage (repository root, on the GPU machine):
#   OUT=/some/dir bash model/training/gpu_train.sh [MINUTES=7] [BATCH=128]
# Wall time ~= data preparation (~1-2 min for 300k examples on 16 cores) + MINUTES + saving (seconds).
# Writes $OUT/agentkit-tiny (offline-loadable checkpoint: copy it to model/checkpoints/agentkit-tiny),
# $OUT/run/log.jsonl (loss curve, held-out loss) and $OUT/run/stdout.log.
set -euo pipefail
MINUTES="${1:-7}"
BATCH="${2:-128}"
OUT="${OUT:-runs/gpu}"
PY="${PYTHON:-python}"
mkdir -p "$OUT/run"
# The recipe is the CPU one (docs/TRAINING.md, "The copy head"): the copy head with dense binding supervision,
# two noise draws per encoded prompt, a quarter of the declarations terse, 70% clean-prefix canvases, 40% of
# the stream in the bots' domains, whole prompts up to 1,408 tokens (the CPU recipe's last stages). Labelling
# the examples is single-threaded Python (~2 ms per example), so the pool is 150k (~5 min of preparation).
# EXTRA_ARGS: more training options, e.g. EXTRA_ARGS="--init-from model/checkpoints/agentkit-tiny".
# The Glaive schemas live in ../shared/data/maskbench (pass MASKBENCH=... if the tree is elsewhere).
MB_ARGS=()
if [[ -n "${MASKBENCH:-}" ]]; then MB_ARGS=(--maskbench "$MASKBENCH"); fi
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA'; print(torch.cuda.get_device_name(0))"
"$PY" -m model.training \
  --device cuda --threads 8 \
  --max-minutes "$MINUTES" --steps 200000 \
  --batch-size "$BATCH" --lr 2e-3 --warmup 200 \
  --n-train 150000 --n-heldout 512 --max-prompt 1408 \
  --copy-head --noise-draws 2 --terse-p 0.25 --prefix-clean-p 0.7 --bot-share 0.4 \
  --ckpt-every 1000 --eval-every 500 --log-every 50 \
  --out-dir "$OUT/run" --final-dir "$OUT/agentkit-tiny" "${MB_ARGS[@]}" ${EXTRA_ARGS:-} 2>&1 | tee "$OUT/run/stdout.log" | grep -v "Writing model shards"
ls -la "$OUT/agentkit-tiny"
