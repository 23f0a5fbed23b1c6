"""Exported weights: safetensors checkpoints that check their own reload, their index, and the
reload command (``python -m rmsnorm_kernel.experiment.exports.reload``)."""
