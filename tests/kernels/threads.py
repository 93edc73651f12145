"""Runs a kernel call under several OpenMP thread counts, for the tests that the bits do not
depend on them."""
import ctypes
import ctypes.util

from ms_optim import _native


def by_thread_count(run, counts=(1, 2, 3)):
    """[run() with the kernels on each of `counts` OpenMP threads], the process's own count
    restored afterwards."""
    lib = ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1")
    before = lib.omp_get_max_threads()
    results = []
    try:
        for threads in counts:
            lib.omp_set_num_threads(threads)
            assert _native.native_info()["kernel_threads"] == threads
            results.append(run())
    finally:
        lib.omp_set_num_threads(before)
    return results
