"""Hugging Face tests build every model from a config: nothing may be downloaded."""

from __future__ import annotations

import os

# Before transformers is imported anywhere: a stray hub call fails at once instead of waiting.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
