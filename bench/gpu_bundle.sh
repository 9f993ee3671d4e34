#!/usr/bin/env bash
# What bench/gpu_check.sh needs on a CUDA machine without network, gathered here, where pip
# reaches PyPI: run it, copy the folder to that machine's checkout, run the check there.
#
#   bench/gpu_bundle.sh [DIR]          (default .gpu-bundle, ignored by git)
#
#   DIR/wheels/  the project's packages that a CUDA image with torch and transformers
#                usually lacks, as wheels for its Python (PYTHON_VERSION, default 3.12),
#                at the versions installed in .venv where it has them
#   DIR/model/   the default model's GGUF in parts of PART_MB MiB (default 52) with their
#                checksums, for links that move a limited size per transfer: the check
#                joins them (and keeps the parts of an earlier transfer, see --stash)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.gpu-bundle}"
python_version="${PYTHON_VERSION:-3.12}"
part_mb="${PART_MB:-52}"
pip=".venv/bin/pip"
python=".venv/bin/python"
[ -x "$pip" ] || { echo "run make install first: the bundle takes versions from .venv" >&2; exit 1; }

# Runtime and test packages beyond torch, transformers, numpy, httpx, pytest and the like.
packages=(pyzmq starlette uvicorn httptools pydantic pydantic-core annotated-types
  typing-inspection gguf llguidance openai anthropic jiter distro sniffio docstring-parser
  pytest-asyncio)
pinned=()
for name in "${packages[@]}"; do
  version=$("$python" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass" "$name")
  pinned+=("${name}${version:+==$version}")
done
rm -rf "$out/wheels" "$out/model"
mkdir -p "$out/wheels" "$out/model"
platforms=()
for tag in manylinux_2_17 manylinux_2_26 manylinux_2_27 manylinux_2_28 manylinux_2_31 \
  manylinux_2_34 manylinux2014 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done
"$pip" download -q --no-deps --only-binary=:all: --python-version "$python_version" \
  --implementation cp "${platforms[@]}" -d "$out/wheels" "${pinned[@]}"

gguf=$("$python" -c "from worker.model.model_dir import default_model_path; print(default_model_path())")
name=$(basename "$gguf")
split -b "${part_mb}M" -d "$gguf" "$out/model/$name.part-"
(cd "$out/model" && sha256sum "$name".part-* > parts.sha256)
(cd "$(dirname "$gguf")" && sha256sum "$name") > "$out/model/whole.sha256"
du -sh "$out/wheels" "$out/model"/*.part-* | sed 's/^/  /'
echo "bundle in $out: copy it into the checkout on the CUDA machine, then bench/gpu_check.sh"
