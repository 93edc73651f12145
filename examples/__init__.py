"""Training examples of ms_optim, each run from the repository root: python -m examples.X"""
