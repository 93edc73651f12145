"""Build and install ms_optim.

The native kernels in ms_optim/ops/ are compiled at install time into one
shared library, ms_optim/libms_optim.so, loaded by MindSpore's AOT custom ops
and by ctypes.  kernels_impl.h is compiled three times (isa_scalar.cpp,
isa_avx2.cpp, isa_avx512.cpp), each with its own instruction-set flags; the
library picks one at run time, so one build runs on any x86-64 CPU.
"""
import os
import shlex
import subprocess

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

OPS = os.path.join("ms_optim", "ops")
SOURCES = ["dispatch.cpp", "aot_adam.cpp", "aot_lamb.cpp", "aot_dgc.cpp", "topk.cpp", "isa_scalar.cpp", "isa_avx2.cpp", "isa_avx512.cpp",
           "capi.cpp", "capi_config.cpp", "capi_state.cpp", "capi_registry.cpp"]
HEADERS = ["contract.h", "kernels.h", "kernels_impl.h", "rules.h", "common.h", "topk.h", "ps_kernels.h", "ps_kernels_impl.h",
           "loops_impl.h", "capi_internal.h", "include/ms_optim.h"]

# -fno-math-errno lets sqrt vectorize; -ffp-contract=off and no -ffast-math keep
# every operation IEEE-rounded, so each ISA matches the numpy reference bit for bit.
COMMON_FLAGS = ["-std=c++17", "-O3", "-fPIC", "-fopenmp", "-fno-math-errno", "-ffp-contract=off",
                "-fvisibility=hidden", "-D_GLIBCXX_USE_CXX11_ABI=0", "-Wall", "-Wextra"]
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
        objects = []
        for src in ext.sources:
            obj = os.path.join(tmp, os.path.basename(src) + ".o")
            flags = COMMON_FLAGS + ISA_FLAGS.get(os.path.basename(src), [])
            if os.path.basename(src) == "dispatch.cpp":
                flags = flags + [f'-DMSOPT_BUILD_FLAGS="{_describe_flags(cxx)}"']
            self._run(cxx + flags + ["-c", os.path.abspath(src), "-o", obj])
            objects.append(obj)
        self._run(cxx + ["-shared", "-fopenmp", "-o", out] + objects)

    @staticmethod
    def _run(cmd):
        print(" ".join(cmd), flush=True)
        subprocess.check_call(cmd)


setup(
    name="ms_optim",
    version="0.1.0",
    description="Communication- and memory-efficient optimizers for MindSpore",
    packages=find_packages(include=["ms_optim", "ms_optim.*"]),
    package_data={"ms_optim": ["ops/*.h", "ops/*.cpp", "ops/include/*.h"]},
    ext_modules=[Extension("ms_optim.libms_optim",
                           sources=[os.path.join(OPS, s) for s in SOURCES],
                           depends=[os.path.join(OPS, h) for h in HEADERS])],
    cmdclass={"build_ext": BuildNative},
    python_requires=">=3.9",
    # MindSpore 2.10 has modules built against NumPy 1.x (Tensor arithmetic fails under 2.x).
    install_requires=["mindspore==2.10.0", "numpy>=1.22,<2"],
    extras_require={"test": ["pytest"], "examples": ["scikit-learn", "matplotlib"]},
)
