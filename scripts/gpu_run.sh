#!/usr/bin/env bash
# On a GPU host: run the GPU smoke study, then the workflow's own validation measurements
# (docs/validation.md). Needs vLLM (CUDA build), snakemake and papermill importable by $PYTHON
# and Spec-Bench's question.jsonl at data/local/spec_bench/question.jsonl for `validate`.
#
#   scripts/gpu_run.sh smoke       snakemake on config/gpu-smoke.yaml, every GPU of the host
#   scripts/gpu_run.sh round1      snakemake on config/gpu-round1.yaml (engines, load modes)
#   scripts/gpu_run.sh calibration snakemake on config/gpu-calibration.yaml (the 7B-shape pair,
#                                  two workloads per server session; docs/sessions.md)
#   scripts/gpu_run.sh adaptive    config/gpu-adaptive.yaml in full (adaptive: {enabled: false}),
#                                  then adaptively in $ADAPT_DIR (default /tmp/adapt; the same
#                                  models, hard-linked), compared -> results/validation/adaptive.md
#                                  (docs/validation.md: Adaptive measurement against the full design)
#   scripts/gpu_run.sh validate    overhead, fidelity and cold/warm start-up -> results/validation
#   scripts/gpu_run.sh all         all three
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
GPUS=${GPUS:-$(nvidia-smi -L | wc -l)}
OUT=results/validation
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
mkdir -p logs "$OUT"
stamp() { echo "[gpu_run $(date +%T)] $*"; }

study() {  # study <name>: snakemake on config/gpu-<name>.yaml
  stamp "$1: snakemake --resources gpu=$GPUS on config/gpu-$1.yaml"
  local t0=$SECONDS
  "$PYTHON" -m snakemake --cores all --resources gpu="$GPUS" --configfile "config/gpu-$1.yaml" \
    --keep-going > "logs/gpu-$1.snakemake.log" 2>&1
  stamp "$1: exit $? after $((SECONDS - t0)) s"
}

adaptive() {  # the same sweep in full and adaptively, each in its own working directory
  local full=config/gpu-adaptive-full.yaml dir=${ADAPT_DIR:-/tmp/adapt} t0=$SECONDS
  sed 's/^adaptive: .*/adaptive: {enabled: false}/' config/gpu-adaptive.yaml > $full
  "$PYTHON" -m snakemake results/summary_points.parquet --cores all --resources gpu="$GPUS" \
    --configfile $full > logs/gpu-adaptive-full.snakemake.log 2>&1
  stamp "adaptive: the full design, exit $? after $((SECONDS - t0)) s"
  mkdir -p "$dir" && cp -al data resources "$dir"/ 2>/dev/null; t0=$SECONDS
  "$PYTHON" -m snakemake -s "$PWD/Snakefile" -d "$dir" results/summary_points.parquet --cores all \
    --resources gpu="$GPUS" --configfile "$PWD/config/gpu-adaptive.yaml" \
    > logs/gpu-adaptive.snakemake.log 2>&1
  stamp "adaptive: the adaptive design, exit $? after $((SECONDS - t0)) s"
  "$PYTHON" -m sdbench.analyze.stops . "$dir" > $OUT/adaptive.md; stamp "compared: exit $?"
}

validate() {
  local cfg=config/gpu-validation.yaml
  "$PYTHON" -m snakemake data/processed/spec_bench/all.jsonl resources/models/smollm2-135m \
    --cores all --configfile $cfg > logs/gpu-validation.snakemake.log 2>&1 || { stamp "data/model build failed"; return 1; }
  local cells spec base
  cells=$("$PYTHON" -m sdbench.measure.cell --config $cfg --list)
  spec=$(awk '/^[0-9a-f]+ +ngram/{print $1}' <<< "$cells")
  base=$(awk '/^[0-9a-f]+ +vanilla/{print $1}' <<< "$cells")
  stamp "validate: cells ngram=$spec vanilla=$base"
  "$PYTHON" -m sdbench.measure.validation startup --config $cfg --cell "$spec" --out $OUT/startup.json \
    > logs/gpu-validation.startup.log 2>&1; stamp "startup: exit $?"
  "$PYTHON" -m sdbench.measure.validation overhead --config $cfg --cell "$spec" --out $OUT/overhead.json \
    > logs/gpu-validation.overhead.log 2>&1; stamp "overhead: exit $?"
  "$PYTHON" -m sdbench.measure.validation fidelity --config $cfg --cell "$base" --concurrency 16 \
    --repeats 3 --out $OUT/fidelity.json > logs/gpu-validation.fidelity.log 2>&1
  stamp "fidelity: exit $?"
}

case "${1:-all}" in
  smoke|round1|calibration) study "$1" ;;
  adaptive) adaptive ;;
  validate) validate ;;
  all) study smoke; study round1; validate ;;
  *) echo "usage: $0 smoke|round1|calibration|adaptive|validate|all" >&2; exit 2 ;;
esac
