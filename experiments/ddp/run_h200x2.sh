#!/usr/bin/env bash
# trainer=ddp on 2 GPUs against 1, in one call (about 5 minutes on 2 x H200):
#   1. the main job (MLP, 100 Adam steps, both norm branches): 2 GPUs x batch 16 against
#      1 GPU x batch 32; `python -m rmsnorm_kernel.cli equivalence` judges curves, test MSE
#      and weights against the float32 tolerances in conf/compare/default.yaml (`equivalence:`),
#      and each sweep's comparison.json judges triton against reference as on one device;
#   2. if the Llama experiment exists (conf/experiment/llama.yaml, conf/experiment/llama_h200.yaml):
#      experiment=llama_h200 with norm=hf,triton on 2 GPUs against 1 (the same per-GPU batch:
#      weak scaling), for tokens/s scaling and peak memory per GPU.
#
# Run from the repo root with a python3 that has torch (CUDA), triton, lightning, transformers,
# safetensors, tensorboard; hydra-core, omegaconf, antlr4-python3-runtime and tbparse may come as
# wheels in .whl/ (installed to /tmp/site when missing) or already on PYTHONPATH.
#   bash experiments/ddp/run_h200x2.sh OUTDIR
# OUTDIR receives summary.md and summary.json (the figures), env.txt, every sweep's
# comparison.json / lm_comparison.json / loss_curves.png, each run's metrics.json and TensorBoard
# events, the logs, and nvidia-smi memory samples per phase (mem_<phase>.csv). Exported weights go
# to $SCRATCH (default /tmp/ddp_h200x2) and are deleted at the end (each run verified its export).
#
# Knobs: ACCEL (gpu; `cpu` runs the same steps with 2 CPU processes, for checking the script),
# MLP_ARGS / LLAMA_ARGS (extra overrides), LLAMA_SWEEP (default experiment=llama_h200; `skip`
# leaves the Llama part out), LLAMA_NORMS (default hf,triton), PYTHON (default python3).
set -u
out=${1:?usage: run_h200x2.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
scratch=${SCRATCH:-/tmp/ddp_h200x2}
accel=${ACCEL:-gpu}
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if ls .whl/*.whl > /dev/null 2>&1 && ! "$py" -c "import hydra, tbparse" 2> /dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2> /dev/null \
    || echo "no nvidia-smi"
  "$py" -c "import torch, triton, lightning, hydra; print('torch', torch.__version__, 'triton', triton.__version__, 'lightning', lightning.__version__, 'hydra', hydra.__version__, 'cuda devices', torch.cuda.device_count())"
  "$py" -c "import transformers; print('transformers', transformers.__version__)" 2>&1 | tail -1
} 2>&1 | tee "$out/env.txt"
if [ "$accel" = gpu ]; then
  gpus=$("$py" -c "import torch; print(torch.cuda.device_count())")
  if [ "${gpus:-0}" -lt 2 ]; then
    echo "needs 2 CUDA GPUs, found ${gpus:-0}: nothing run" | tee -a "$out/env.txt"
    exit 2
  fi
  one=(trainer.accelerator=gpu trainer.devices=1)
  two=(trainer=ddp trainer.accelerator=gpu trainer.devices=2)
else
  one=(trainer.accelerator=cpu trainer.devices=1)
  two=(trainer=ddp trainer.accelerator=cpu trainer.devices=2)
fi

rm -rf "$scratch" && mkdir -p "$scratch"
: > "$out/phases.txt"
phase() {  # phase NAME TIMEOUT ARGS...: one multirun, nvidia-smi memory sampled alongside
  local name=$1 limit=$2; shift 2
  local part=${name%_*}  # mlp or llama: each part's exports in their own folder
  local t0=$SECONDS sampler=""
  if command -v nvidia-smi > /dev/null && [ "$accel" = gpu ]; then
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 250 \
      > "$out/mem_$name.csv" 2> /dev/null &
    sampler=$!
  fi
  timeout "$limit" "$py" -m rmsnorm_kernel.train --multirun "$@" \
    "hydra.sweep.dir=$scratch/$name" "paths.checkpoint_dir=$scratch/ckpt_$part" \
    > "$out/$name.log" 2>&1
  local rc=$?
  [ -n "$sampler" ] && kill "$sampler" 2> /dev/null
  echo "$name rc=$rc wall=$((SECONDS - t0))s" | tee -a "$out/phases.txt"
  tail -8 "$out/$name.log"
}

# 1. The main job: same rows per step (16 + 16 = 32), gradients averaged across the 2 GPUs.
phase mlp_1gpu 150 norm=reference,triton "${one[@]}" ${MLP_ARGS:-}
phase mlp_2gpu 150 norm=reference,triton "${two[@]}" dataset.batch_size=16 ${MLP_ARGS:-}
timeout 60 "$py" -m rmsnorm_kernel.cli equivalence "$scratch/mlp_2gpu" "$scratch/mlp_1gpu" \
  --out "$out/mlp_equivalence.json" 2>&1 | tee "$out/mlp_equivalence.txt"
echo "mlp_equivalence rc=${PIPESTATUS[0]}" | tee -a "$out/phases.txt"

# 2. Llama at LLM width, same per-GPU batch on 1 and 2 GPUs (2 x 4096 tokens per GPU per step).
llama_sweep=${LLAMA_SWEEP:-experiment=llama_h200}
if [ "$llama_sweep" != skip ] && [ -f conf/experiment/llama.yaml ] \
  && [ -f conf/experiment/llama_h200.yaml ]; then
  norms=${LLAMA_NORMS:-hf,triton}
  phase llama_1gpu 200 "$llama_sweep" "norm=$norms" "${one[@]}" ${LLAMA_ARGS:-}
  phase llama_2gpu 200 "$llama_sweep" "norm=$norms" "${two[@]}" ${LLAMA_ARGS:-}
else
  echo "Llama experiment not run (LLAMA_SWEEP=skip or conf/experiment/llama.yaml, conf/experiment/llama_h200.yaml missing)" \
    | tee -a "$out/phases.txt"
fi

# Reload the MLP exports listed in the index (sha256, bitwise reload). Each run already verified
# its own export on rank 0; the Llama ones (GBs) are not reloaded twice.
timeout 120 "$py" -m rmsnorm_kernel.experiment.exports.reload --root "$scratch/ckpt_mlp" \
  > "$out/reload.log" 2>&1
echo "reload_mlp rc=$?" | tee -a "$out/phases.txt"
tail -2 "$out/reload.log"

"$py" - "$scratch" "$out" "${llama_sweep:-}" <<'PY'
"""summary.json / summary.md: the figures of every phase that finished."""
import csv
import json
import sys
from pathlib import Path

scratch, out, llama_sweep = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]


def runs(sweep: str) -> dict:
    found = {}
    for path in sorted((scratch / sweep).glob("*/metrics.json")):
        m = json.loads(path.read_text())
        found[m["norm"]] = m
    return found


def nvidia_smi_peak(phase: str) -> dict:
    """Max memory.used (MiB) per GPU index over the phase's samples (whole process, context
    included: above the allocator's peak)."""
    path = out / f"mem_{phase}.csv"
    peaks: dict[str, int] = {}
    if path.is_file():
        for row in csv.reader(path.read_text().splitlines()):
            if len(row) == 2 and row[1].strip().isdigit():
                gpu, mib = row[0].strip(), int(row[1])
                peaks[gpu] = max(peaks.get(gpu, 0), mib)
    return peaks


summary = {"phases": (out / "phases.txt").read_text().splitlines()}
lines = ["# trainer=ddp: 2 GPUs against 1", "", "```", *summary["phases"], "```", ""]
eq = out / "mlp_equivalence.json"
if eq.is_file():
    summary["mlp_equivalence"] = json.loads(eq.read_text())
    steps = runs("mlp_1gpu")["reference"]["train_steps"]
    lines += [f"## MLP main job: 2 x batch 16 against 1 x batch 32 ({steps} Adam steps)", ""]
    lines += ["| norm | test/mse 2 GPUs | test/mse 1 GPU | abs delta | max abs delta train/loss "
              "| val/loss | weights | passed |", "|---|---|---|---|---|---|---|---|"]
    for p in summary["mlp_equivalence"]["pairs"]:
        c = p["curve_max_abs"]
        lines.append(
            f"| {p['norm']} | {p['values'][0]:.10f} | {p['values'][1]:.10f} | "
            f"{p['metric_abs']:.2e} | {c['train/loss']:.2e} | {c['val/loss']:.2e} | "
            f"{p['weight_max_abs']:.2e} | {p['passed']} |"
        )
    lines.append(f"\ntolerances: {summary['mlp_equivalence']['pairs'][0]['tolerances']}")
for sweep in ("mlp_1gpu", "mlp_2gpu", "llama_1gpu", "llama_2gpu"):
    path = scratch / sweep / "comparison.json"
    if path.is_file():
        summary.setdefault("comparison_passed", {})[sweep] = json.loads(path.read_text())["passed"]
lines += ["", f"sweep comparisons (each branch vs the baseline): {summary.get('comparison_passed')}"]

single, ddp = runs("llama_1gpu"), runs("llama_2gpu")
if single and ddp:
    rows = []
    for norm in sorted(set(single) & set(ddp)):
        a, b = single[norm], ddp[norm]
        per_gpu_1, per_gpu_2 = a.get("tokens_per_s"), b.get("tokens_per_s")
        total_2 = per_gpu_2 * b["world_size"] if per_gpu_2 else None
        rows.append({
            "norm": norm,
            "world_size": [a["world_size"], b["world_size"]],
            # Throughput records this rank's tokens per step over the median step time; every
            # rank trains the same number of tokens in lockstep (the gradient all-reduce), so the
            # run's total is world_size times rank 0's figure.
            "tokens_per_s_1gpu": per_gpu_1,
            "tokens_per_s_per_gpu_2gpu": per_gpu_2,
            "tokens_per_s_total_2gpu": total_2,
            "scaling": total_2 / per_gpu_1 if total_2 and per_gpu_1 else None,
            "step_time_ms": [a.get("step_time_ms"), b.get("step_time_ms")],
            "peak_memory_gib_rank0": [a.get("peak_memory_gib"), b.get("peak_memory_gib")],
            "test/loss": [a.get("test/loss"), b.get("test/loss")],
            "forward_calls_per_rank_2gpu": b.get("forward_calls_per_rank"),
        })
    summary["llama"] = rows
    summary["llama_nvidia_smi_peak_mib"] = {
        p: nvidia_smi_peak(p) for p in ("llama_1gpu", "llama_2gpu")
    }
    lines += ["", f"## Llama ({llama_sweep}): 2 GPUs against 1, same per-GPU batch", ""]
    lines += ["| norm | tokens/s 1 GPU | tokens/s 2 GPUs (total) | per GPU | scaling | step ms "
              "1 / 2 | peak GiB rank 0, 1 / 2 GPUs | test/loss 1 / 2 |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def f(v, fmt):
            return "n/a" if v is None else format(v, fmt)
        lines.append(
            f"| {r['norm']} | {f(r['tokens_per_s_1gpu'], ',.0f')} | "
            f"{f(r['tokens_per_s_total_2gpu'], ',.0f')} | "
            f"{f(r['tokens_per_s_per_gpu_2gpu'], ',.0f')} | {f(r['scaling'], '.2f')} | "
            f"{f(r['step_time_ms'][0], '.1f')} / {f(r['step_time_ms'][1], '.1f')} | "
            f"{f(r['peak_memory_gib_rank0'][0], '.2f')} / {f(r['peak_memory_gib_rank0'][1], '.2f')} | "
            f"{f(r['test/loss'][0], '.4f')} / {f(r['test/loss'][1], '.4f')} |"
        )
    lines.append(
        "\nnvidia-smi max memory.used per GPU (MiB, whole process incl. CUDA context, both "
        f"branches of the phase): {summary['llama_nvidia_smi_peak_mib']}"
    )
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY

# Bring back the small files of every sweep; the weights stay in $scratch and are removed.
for sweep in mlp_1gpu mlp_2gpu llama_1gpu llama_2gpu; do
  [ -d "$scratch/$sweep" ] || continue
  mkdir -p "$out/$sweep"
  (cd "$scratch/$sweep" && find . \( -name '*.json' -o -name '*.png' -o -name '*.yaml' \
    -o -path '*tensorboard*' \) -type f -print0 | xargs -0 -r cp --parents -t "$out/$sweep")
done
ls -la "$scratch"/ckpt_* >> "$out/files.txt" 2>&1
rm -rf "$scratch"
! grep -qE "rc=[1-9]" "$out/phases.txt"
