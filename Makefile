# rmsnorm-kernel — every command a newcomer needs (`make help` lists them). `make train` and
# `make test` work on a fresh clone: both depend on `setup`, which builds .venv once from the lock
# (and again only when pyproject.toml or the lock changes).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# Exact versions of everything `make setup` installs on the CPU path (Python 3.11, Linux x86_64),
# compiled from pyproject.toml's `dev` extra by `make lock`.
LOCK := requirements/lock.txt
TORCH_CPU := requirements/torch-cpu.txt
LOCKED_TORCH := $(shell grep -m1 '^torch==' $(LOCK) 2>/dev/null)
# Default: the lock's torch (a CPU build that this project's machines hold on disk). On a CUDA
# machine, `make setup TORCH_SPEC=` keeps the torch (and triton) already in the environment and
# installs the rest of the lock; `TORCH_SPEC='torch==2.11.0'` installs that torch instead.
TORCH_SPEC ?= $(LOCKED_TORCH)
NORMS ?= reference,triton
ARGS ?=
# pytest-xdist workers for `make test` (WORKERS=auto: one per core). 0, one process, is the
# default, the way CI has always passed. Two workers on CI's 2 cores: pytest 1707 s on a fresh
# clone of 5f2407e, whose interpreter then ran the dweight sum in 8-column strips (one process on
# that code: not done after 2600 s; 1160-1510 s before it). Not yet timed on the code after it.
WORKERS ?= 0
LINT_PATHS := src tests experiments

.DEFAULT_GOAL := help
.PHONY: help setup lock lint format test train reload-check check-checkpoints tensorboard \
        reference data check-forward check-backward check-weight check-gamma checks exercise bench \
        benchmark plot clean check-environment docker-build

help: ## list the targets
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-zA-Z_ -]+:[^=]*## / {gsub(/ /, ", ", $$1); printf "  make %-20s  %s\n", $$1, $$2}' \
		$(MAKEFILE_LIST)
	@echo "  Variables: ARGS='<overrides>' NORMS=$(NORMS) CKPT=<file> TORCH_SPEC=$(TORCH_SPEC) WORKERS=$(WORKERS)"

setup: $(VENV)/.installed ## build .venv from the lock (once; again when pyproject.toml or the lock change)

# The stamp records the torch choice, so a test can tell which pins the venv must match.
$(VENV)/.installed: pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
ifeq ($(TORCH_SPEC),$(LOCKED_TORCH))
	$(PY) -m pip install -q -r $(LOCK)
else
	grep -vE '^(torch|triton|nvidia-[a-z0-9-]+)==' $(LOCK) > $(VENV)/lock-without-torch.txt
	if [ -n "$(TORCH_SPEC)" ]; then $(PY) -m pip install -q "$(TORCH_SPEC)"; fi
	@# Without this check, pip would fetch the newest torch (unpinned, several GB) for lightning.
	$(PY) -c "import torch" || { echo "TORCH_SPEC='$(TORCH_SPEC)' keeps the torch already in \
	$(VENV), but it has none: install torch first (or make the venv with \
	--system-site-packages), or leave TORCH_SPEC unset for the locked CPU build" >&2; exit 1; }
	$(PY) -m pip install -q -r $(VENV)/lock-without-torch.txt
endif
	$(PY) -m pip install -q -e .
	$(PY) -m pip check
	echo "TORCH_SPEC=$(TORCH_SPEC)" > $@

# Resolves pyproject.toml's `dev` extra (which holds every other extra) around the CPU torch pin,
# keeping the current pins where they still fit (UPGRADE=1: the newest versions the ranges allow).
# pip-compile uses pip's resolver, so it sees the torch file on disk that uv and poetry don't.
# `--unsafe-package rmsnorm-kernel`: the dev extra names this project itself (for its other
# extras); that line would pin an absolute file:// path, and pip and setuptools get pinned instead.
lock: setup ## refresh requirements/lock.txt after editing pyproject.toml (UPGRADE=1: newest pins)
	CUSTOM_COMPILE_COMMAND="make lock" $(BIN)/pip-compile --quiet $(if $(UPGRADE),--upgrade,) \
		--extra dev \
		--strip-extras --unsafe-package rmsnorm-kernel --no-emit-index-url --no-emit-find-links \
		--constraint $(TORCH_CPU) --output-file $(LOCK) pyproject.toml
	@echo "$(LOCK) refreshed: commit it; \`make setup\` installs it"

lint: setup ## ruff check + ruff format --check + hadolint
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/hadolint --ignore DL3008 --ignore DL3013 Dockerfile

format: setup ## ruff format + ruff check --fix (rewrites files)
	$(BIN)/ruff format $(LINT_PATHS)
	$(BIN)/ruff check --fix $(LINT_PATHS)

# The README's test command (CI runs exactly this through .ci/run).
test: lint ## lint, then the whole test suite (ARGS='-k name' to pick)
	$(PY) -m pytest -q -n $(WORKERS) $(ARGS)

train: setup ## the main job: Hydra multirun over NORMS, then the cross-branch comparison
	$(PY) -m rmsnorm_kernel.train --multirun norm=$(NORMS) $(ARGS)

# One checkpoint check in the project; both names run it.
reload-check check-checkpoints: setup ## reload every exported checkpoint (or CKPT=file) and compare
	$(PY) -m rmsnorm_kernel.cli check-checkpoints $(if $(CKPT),--ckpt $(CKPT),) $(ARGS)

tensorboard: setup ## TensorBoard over outputs/ (every run, named by its overrides)
	$(BIN)/tensorboard --logdir outputs

# The command set (python -m rmsnorm_kernel.cli <command>); ARGS are Hydra overrides.
reference: setup ## gradcheck the float64 oracle (manual_backward against autograd too)
data: setup ## write the MLP task's synthetic splits (safetensors + manifest) to outputs/data
check-forward: setup ## forward matches the float64 oracle on every case
check-backward: setup ## input gradient matches the float64 oracle on every case
check-weight: setup ## weight gradient matches the float64 oracle on every case
exercise: setup ## mutation testing: every planted kernel bug is caught
bench: setup ## ours beside F.rms_norm, torch.compile, Liger, quack (GPU; ARGS=overrides)
benchmark: setup ## bench with the tutorial's timing protocol (GPU)
plot: setup ## PNG figures from the checks' and the benchmark's JSON
check-environment: setup ## CUDA and one real kernel launch, or the interpreter notice
reference data check-forward check-backward check-weight exercise bench benchmark plot check-environment:
	$(PY) -m rmsnorm_kernel.cli $@ $(ARGS)

check-gamma: check-weight ## old name of check-weight

checks: check-forward check-backward check-weight ## the three oracle checks

clean: setup ## delete generated files under outputs/ and checkpoints/ (DRY_RUN=1 lists)
	$(if $(DRYRUN)$(DRY)$(DRY-RUN),$(error make clean lists with DRY_RUN=1 (got DRYRUN, DRY or DRY-RUN): nothing deleted))
	$(if $(filter-out 0 1 true false yes no,$(DRY_RUN)),$(error DRY_RUN must be 1 (list only) or 0 (got '$(DRY_RUN)'): nothing deleted))
	$(PY) -m rmsnorm_kernel.cli clean --scope generated $(if $(filter 1 true yes,$(DRY_RUN)),--dry-run,)

docker-build: ## build the CUDA image (needs a Docker engine)
	docker build -t rmsnorm-kernel .
