"""The experiment layer: Hydra + Lightning training of the MLP with each RMSNorm branch.

Imports the kernel layer (``rmsnorm_kernel``), never the reverse. Modules, in reading order::

    paths       where the repo's conf/ lives (for the compose API)
    data        make_splits (the synthetic task) and its LightningDataModule
    norms       the reference branch as an nn.Module
    model       MLP: Linear -> RMSNorm -> SiLU -> Linear
    lit         the LightningModule (MSE, Adam, train/loss, val/loss, test/mse)
    checkpoint  safetensors export with its own reload check
    callbacks   the run's checks: kernel calls, first-batch probe, safetensors reload, test MSE
    run         train(cfg) -> metrics
    compare     the cross-branch verdict of a sweep (Hydra on_multirun_end)
    reload      check_checkpoints and `python -m rmsnorm_kernel.experiment.reload`
"""
