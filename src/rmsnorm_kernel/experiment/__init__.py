"""The experiment layer: Hydra + Lightning training of a net with each RMSNorm branch.

Imports the kernel layer (``rmsnorm_kernel``), never the reverse, and never the command set
(``rmsnorm_kernel.cli``). Modules, in reading order::

    paths       where the repo's conf/ lives (for the compose API)
    settings    checks of the compare settings (tolerances from conf/compare/)
    data        make_splits (the synthetic task) and its resumable LightningDataModule
    norms       the reference branch as an nn.Module
    model       MLP: Linear -> RMSNorm -> SiLU -> Linear
    builders    allow-lists of nets and norms, by name: what a checkpoint may ask to build
    lit         the LightningModule (MSE, Adam, train/loss, val/loss, test/mse)
    checkpoint  safetensors export, metadata rules and the one reload check (verify_checkpoint)
    index       checkpoints/index.json: file -> run dir, config hash, sha256 (under a lock)
    identity    config hash, recorded overrides and the TensorBoard run label
    callbacks   the run's checks: kernel calls, first-batch probe, export, test metric; and
                last.ckpt on Ctrl-C/SIGTERM
    progress    the progress bar: steps against the step budget
    launch      trainer=ddp: one process per device, started by train(cfg) (keeps Hydra's dirs)
    run         train(cfg) -> metrics
    compare/    the cross-branch verdict of a sweep (Hydra on_multirun_end): load, checks, plots
    reload      check_checkpoints and `python -m rmsnorm_kernel.experiment.reload`
    equivalence a DDP run against one process of the same branch (curves, metric, weights)
"""

import secrets

from omegaconf import OmegaConf

#: ``${unique:}`` in conf/hydra/default.yaml: 6 random hex digits, drawn once per composed config
#: (cached, and Hydra copies the cache into every job of a sweep), so two runs or sweeps started
#: in the same second still get their own directory.
if not OmegaConf.has_resolver("unique"):
    OmegaConf.register_new_resolver("unique", lambda: secrets.token_hex(3), use_cache=True)
