"""The native build of ms_optim (metadata: pyproject.toml).

The native sources in ms_optim/ops/ (core/: rules, loops, ISA dispatch;
kernels/: the kernels; aot/: the MindSpore adapters; capi/: the C library) are
compiled at install time into one shared library, ms_optim/libms_optim.so,
loaded by MindSpore's AOT custom ops and by ctypes.  The kernels are compiled
three times (core/isa_scalar.cpp, isa_avx2.cpp, isa_avx512.cpp), each with its
own instruction-set flags; the library picks one at run time, so one build runs
on any x86-64 CPU.
"""
import glob
import os
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The one include root of the native sources: every #include of ours is relative
# to it ("core/rules.h", "kernels/adam.h", "capi/include/ms_optim.h").  Sources
# and headers are found by folder.
OPS = os.path.join("ms_optim", "ops")
SOURCES = sorted(glob.glob(os.path.join(OPS, "**", "*.cpp"), recursive=True))
HEADERS = sorted(glob.glob(os.path.join(OPS, "**", "*.h"), recursive=True))

# -fno-math-errno lets sqrt vectorize; -ffp-contract=off and no -ffast-math keep
# every operation IEEE-rounded, so each ISA matches the numpy reference bit for bit.
COMMON_FLAGS = ["-std=c++17", "-O3", "-fPIC", "-fopenmp", "-fno-math-errno", "-ffp-contract=off",
                "-fvisibility=hidden", "-D_GLIBCXX_USE_CXX11_ABI=0", "-Wall", "-Wextra"]
# The ISA units' own flags, by file name (core/isa_*.cpp).
ISA_FLAGS = {
    "isa_scalar.cpp": [],
    "isa_avx2.cpp": ["-mavx2", "-mfma", "-mf16c"],
    "isa_avx512.cpp": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mf16c",
                       "-mprefer-vector-width=512",
                       # GCC 12 false positive inside avx512fintrin.h's cvtps_ph
                       "-Wno-maybe-uninitialized"],
}


def _describe_flags(cxx):
    """The compiler and flags, recorded in the library (ms_optim.native_info()["build_flags"])."""
    text = " ".join(cxx + COMMON_FLAGS) + "".join(
        f"; {name}: {' '.join(flags)}" for name, flags in ISA_FLAGS.items() if flags)
    return text.replace("\\", "/").replace('"', "'")


class BuildNative(build_ext):
    """Compiles the C++ kernels with per-file ISA flags into libms_optim.so."""

    def get_ext_filename(self, fullname):
        return fullname.replace(".", os.sep) + ".so"

    def build_extension(self, ext):
        cxx = shlex.split(os.environ.get("CXX", "g++"))
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        tmp = os.path.abspath(os.path.join(self.build_temp, "ms_optim_native"))
        os.makedirs(tmp, exist_ok=True)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        includes = [f"-I{os.path.abspath(d)}" for d in ext.include_dirs]
        jobs = []
        for src in ext.sources:
            obj = os.path.join(tmp, os.path.basename(src) + ".o")  # the file names are unique
            flags = COMMON_FLAGS + includes + ISA_FLAGS.get(os.path.basename(src), [])
            if os.path.basename(src) == "dispatch.cpp":
                flags = flags + [f'-DMSOPT_BUILD_FLAGS="{_describe_flags(cxx)}"']
            jobs.append((src, obj, cxx + flags + ["-c", os.path.abspath(src), "-o", obj]))
        # the ISA units first: they take the longest
        jobs.sort(key=lambda job: not os.path.basename(job[0]).startswith("isa_"))
        done = []

        def compile_one(job):
            src, _, cmd = job
            self._run(cmd)
            done.append(src)
            print(f"ms_optim: compiled {len(done)}/{len(jobs)} {os.path.relpath(src, OPS)}",
                  flush=True)

        # one compiler per core (MSOPT_BUILD_JOBS to change it)
        workers = int(os.environ.get("MSOPT_BUILD_JOBS", os.cpu_count() or 1))
        with ThreadPoolExecutor(max(1, workers)) as pool:
            list(pool.map(compile_one, jobs))
        self._run(cxx + ["-shared", "-fopenmp", "-o", out] + [obj for _, obj, _ in jobs])
        print(f"ms_optim: linked {out}", flush=True)

    @staticmethod
    def _run(cmd):
        if os.environ.get("MSOPT_BUILD_VERBOSE"):
            print(" ".join(cmd), flush=True)
        subprocess.check_call(cmd)


# The project's metadata, dependencies and package data are in pyproject.toml; this file
# only describes the native library, whose per-file compiler flags need code.
setup(
    ext_modules=[Extension("ms_optim.libms_optim",
                           sources=SOURCES, depends=HEADERS, include_dirs=[OPS])],
    cmdclass={"build_ext": BuildNative},
)
