"""Studies and experiments around ms_optim, each run from the repository root: python -m tools.X"""
