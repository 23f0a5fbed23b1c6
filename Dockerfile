# CUDA PyTorch image for the Triton kernels. `docker compose run --rm gpu` runs the tests on a GPU;
# `docker compose run --rm gpu make checks` (or any README command) runs the rest.
# The base image's torch must satisfy pyproject.toml (torch>=2.11); pick the tag for your driver.
ARG BASE_IMAGE=pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

# make: the README's commands are Make targets. gcc + libc6-dev: Triton compiles its small CUDA
# launcher stubs with the system C compiler the first time a kernel runs.
RUN apt-get update \
    && apt-get install -y --no-install-recommends make gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHON=python
WORKDIR /workspace/rmsnorm-kernel

# Install exactly as the README does, `make setup TORCH_SPEC=`: the lock's versions of everything
# but torch and triton, which stay the image's CUDA build (the venv sees the image's
# site-packages, so torch is reused, not downloaded again). These are every file that step reads.
COPY pyproject.toml README.md Makefile ./
COPY requirements ./requirements
COPY src ./src
RUN python -m venv --system-site-packages .venv \
    && make setup TORCH_SPEC=

COPY . .
CMD ["make", "test"]
