"""Benchmarks of ms_optim, each run from the repository root: python -m benchmarks.X"""
