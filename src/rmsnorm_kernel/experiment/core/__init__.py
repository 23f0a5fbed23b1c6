"""What every task shares: ``train(cfg)``, the data module and LightningModule bases, the run's
checks, config validation, run identity and the DDP process starter (see ``experiment``'s map)."""
