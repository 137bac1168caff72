#!/usr/bin/env bash
# Would vLLM VERSION take what the workflow passes it? On a CPU machine, no GPU, no model:
# installs environment-vllm-VERSION-MINOR.yml's pip packages (vLLM from PyPI, its CUDA build)
# into an environment of their own, then checks every vLLM cell of CONFIG through that
# release's own parsers and config fields (scripts/vllm_args_check.py) and writes what changed
# to docs/runs/vllm-VERSION-arguments.md (a record dated in its first line; an existing one
# is kept and the new one numbered -2, -3, ...). Not part of CI (a ~4 GB download).
#   scripts/check_vllm_version.sh 0.33.0 [CONFIG]      (CHECK_ENV: where the environment goes)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: $0 VERSION [CONFIG]}
config=${2:-config/config.yaml}
envfile=environment-vllm-${version%.*}.yml
env=${CHECK_ENV:-/tmp/sdbench-vllm-$version}
project=${PYTHON:-.venv/bin/python}
[ -f "$envfile" ] || { echo "$envfile: no such environment file" >&2; exit 2; }
if [ ! -x "$env/bin/python" ] || ! "$env/bin/python" -c "import vllm, sys; sys.exit(vllm.__version__ != '$version')" 2>/dev/null; then
  python3 -m venv "$env"
  "$env/bin/pip" install -q --upgrade pip
  # the environment file's pip packages, as conda would install them
  "$project" -c "import sys, yaml; deps = yaml.safe_load(open(sys.argv[1]))['dependencies']; \
print('\n'.join(next(d['pip'] for d in deps if isinstance(d, dict))))" "$envfile" > "$env/requirements.txt"
  "$env/bin/pip" install -q -r "$env/requirements.txt"
fi
"$project" scripts/vllm_args_check.py dump --config "$config" > "$env/cells.json"
"$env/bin/python" scripts/vllm_args_check.py check "$env/cells.json" > "$env/checked.json" 2> "$env/check.log"
record="docs/runs/vllm-$version-arguments.md"
n=2
while [ -e "$record" ]; do record="docs/runs/vllm-$version-arguments-$n.md"; n=$((n + 1)); done
"$project" scripts/vllm_args_check.py report "$env/checked.json" --config "$config" > "$record"
tail -1 "$record"
