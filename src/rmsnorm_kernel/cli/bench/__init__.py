"""``bench``: ours beside its peers on one GPU, every figure from one run.

peers     the one registry of implementations (ours, F.rms_norm, torch.compile, Liger, quack)
plan      what a run measures, read from conf/benchmark and checked before any GPU work
timers    CUDA-graph, end-to-end, tutorial-protocol, host-cost and peak-memory timers
measure   the loops: shapes x passes x modes x implementations, failures recorded per cell
compare   bytes per call, GB/s, % of the copy ceiling, ratios to the best peer
report    the terminal tables
figures   bandwidth curves (PNG)
run       the command: plan -> measure -> bench.json, PNGs, tables
"""
