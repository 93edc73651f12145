"""The tensor sizes the kernel tests run on, defined once.

One element, an odd count (a vector loop's tail alone), both sides of 16384 (a multiple of
every vector width, and DGCMomentum's smallest compressed tensor), and a large odd count
that the kernels split over OpenMP threads.  As parameters (SIZE_PARAMS) the large one is in
the slow tier.
"""
import pytest

EDGE_SIZES = [1, 7, 16383, 16385]
SIZES = EDGE_SIZES + [1_000_003]
SIZE_PARAMS = EDGE_SIZES + [pytest.param(n, marks=pytest.mark.slow) for n in SIZES[4:]]
