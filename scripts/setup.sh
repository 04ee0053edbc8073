#!/usr/bin/env bash
# Set up agentkit in a virtual environment (.venv by default).
#
# torch is installed first and on purpose: an unpinned `torch` on a machine without a GPU
# pulls a multi-GB CUDA build. Rules:
#   * torch already importable in the venv  -> keep it (never replace a user's build);
#   * an NVIDIA GPU is visible (nvidia-smi)  -> the default PyPI build (CUDA);
#   * otherwise                              -> torch==2.13.0 (the CPU wheel on this kind of machine).
# Override with TORCH_SPEC="torch==X" if you need something else.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
if "$VPY" -c "import torch" >/dev/null 2>&1; then
  echo "setup: keeping installed torch $("$VPY" -c 'import torch; print(torch.__version__)')"
else
  if [ -n "${TORCH_SPEC:-}" ]; then spec="$TORCH_SPEC"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then spec="torch>=2.6"
  else spec="torch==2.13.0"; fi
  echo "setup: installing $spec"
  "$VPY" -m pip install -q "$spec"
fi
"$VPY" -m pip install -q -e ".[dev]"
echo "setup: done ($("$VPY" -c 'import torch, transformers, llguidance; print("torch", torch.__version__, "transformers", transformers.__version__, "llguidance", llguidance.__version__ if hasattr(llguidance, "__version__") else "")'))"
