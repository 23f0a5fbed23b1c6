# rmsnorm-kernel — every command a newcomer needs. `make train` and `make test` work on a fresh clone:
# both depend on `setup`, which builds .venv once (and again only when pyproject.toml changes).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# On this project's CPU machines `torch==2.13.0` is a local CPU build; anything newer pulls a
# multi-GB CUDA build. On a CUDA machine: `make setup TORCH_SPEC=` keeps the torch you install.
TORCH_SPEC ?= torch==2.13.0
NORMS ?= reference,triton
ARGS ?=

.PHONY: setup test lint train reload-check tensorboard reference check-forward check-backward \
        check-gamma checks exercise benchmark plot check-checkpoints clean check-environment \
        docker-build

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(PY) -m pip install -q "$(TORCH_SPEC)"; fi
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

lint: setup
	$(BIN)/ruff check src tests experiments
	$(BIN)/hadolint --ignore DL3008 --ignore DL3013 Dockerfile

# The README's test command (CI runs exactly this through .ci/run).
test: lint
	$(PY) -m pytest -q $(ARGS)

# The main job: Hydra multirun over the norm branches, then the cross-branch comparison.
train: setup
	$(PY) -m rmsnorm_kernel.train --multirun norm=$(NORMS) $(ARGS)

reload-check: setup
	$(PY) -m rmsnorm_kernel.experiment.reload $(if $(CKPT),--ckpt $(CKPT),)

tensorboard: setup
	$(BIN)/tensorboard --logdir outputs

# The seed's command set (python -m rmsnorm_kernel.cli <command>).
reference check-forward check-backward check-gamma exercise benchmark plot check-checkpoints check-environment: setup
	$(PY) -m rmsnorm_kernel.cli $@ $(ARGS)

checks: check-forward check-backward check-gamma

clean: setup
	$(PY) -m rmsnorm_kernel.cli clean --scope generated $(if $(DRY_RUN),--dry-run,)

docker-build:
	docker build -t rmsnorm-kernel .
