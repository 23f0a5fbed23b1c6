"""The experiment layer: Hydra + Lightning training of a net with each RMSNorm branch.

Imports the kernel layer (``rmsnorm_kernel``), never the reverse, and never the command set
(``rmsnorm_kernel.cli``). Subpackages, in reading order (conf/ is found by
``rmsnorm_kernel.paths``)::

    core/       what every task shares
      settings    the one check of a training config (values, paths, compare tolerances)
      builders    allow-lists of nets and norms, by name: what a checkpoint may ask to build
      norms       the reference branch as an nn.Module
      data        SplitsDataModule: resumable shuffled batches, each DDP rank's share
      module      TaskModule: train/loss, val/loss and the test metric, reduced across ranks
      probe       InitialProbe: outputs and gradients on the first batch, before any step
      callbacks   the run's checks: kernel calls, export, test metric; last.ckpt on Ctrl-C/SIGTERM
      progress    the progress bar: steps against the step budget
      identity    config hash, recorded overrides, TensorBoard run label, resume identity
      processes   trainer=ddp: one process per device, started by train(cfg)
      run         train(cfg) -> metrics
    mlp/        the seed's task: net (MLP, builder "mlp"), data (make_splits), module (MSE)
    lm/         a Hugging Face Llama: net (builder "llama"), norms (hf, liger, triton_fused),
                data (Markov chain), module (cross-entropy), callbacks (norm count, throughput)
    exports/    checkpoint (safetensors export, metadata rules, verify_checkpoint), index
                (checkpoints/index.json), reload (check_checkpoints and its command)
    analysis/   the cross-branch verdict of a sweep (Hydra on_multirun_end) and DDP equivalence
"""

import secrets

from omegaconf import OmegaConf

#: ``${unique:}`` in conf/hydra/default.yaml: 6 random hex digits, drawn once per composed config
#: (cached, and Hydra copies the cache into every job of a sweep), so two runs or sweeps started
#: in the same second still get their own directory.
if not OmegaConf.has_resolver("unique"):
    OmegaConf.register_new_resolver("unique", lambda: secrets.token_hex(3), use_cache=True)
