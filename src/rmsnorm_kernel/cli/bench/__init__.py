"""Benchmark suite: the seed's CUDA-event protocol, reference vs kernel vs peers."""
