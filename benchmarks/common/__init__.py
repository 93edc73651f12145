"""Helpers of the benchmarks (and of the GPU tests), not programs."""
