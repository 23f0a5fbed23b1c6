"""The seed's task: an MLP regressing a synthetic teacher (net, splits, LightningModule)."""
