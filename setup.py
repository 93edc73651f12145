"""The native build of ms_optim (metadata: pyproject.toml).

The native sources in ms_optim/ops/ (core/: rules, loops, declarations;
kernels/: the kernels, their tables and ISA dispatch; aot/: the MindSpore
adapters; capi/: the C library) are
compiled at install time into one shared library, ms_optim/libms_optim.so,
loaded by MindSpore's AOT custom ops and by ctypes.  The kernels are compiled
three times (kernels/isa_scalar.cpp, isa_avx2.cpp, isa_avx512.cpp), each with its
own instruction-set flags; the library picks one at run time, so one build runs
on any x86-64 CPU.

Where nvcc is found (on PATH, or $CUDA_HOME/bin), the CUDA kernels of ops/cuda/
are compiled too, into ms_optim/libms_optim_cuda.so, MindSpore's GPU AOT ops.
MSOPT_CUDA=0 skips them; MSOPT_CUDA=1 makes a missing nvcc, or a CUDA source
that does not compile, an error (unset, the install goes on with the CPU library
alone and says why).  MSOPT_CUDA_ARCHS lists the GPU architectures (default
"75;90": machine code for sm_75 and sm_90, and sm_75's PTX for the GPUs after
it).  A build without the CUDA library removes an earlier build's.
"""
import glob
import os
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The one include root of the native sources: every #include of ours is relative
# to it ("core/rules.h", "kernels/adam.h", "include/ms_optim.h").  Sources
# and headers are found by folder.
OPS = os.path.join("ms_optim", "ops")
SOURCES = sorted(glob.glob(os.path.join(OPS, "**", "*.cpp"), recursive=True))
HEADERS = sorted(glob.glob(os.path.join(OPS, "**", "*.h"), recursive=True))
# The CUDA library: its kernels, and the host code it shares with the CPU one (the AOT
# call binding and the error messages).
CUDA_SOURCES = sorted(glob.glob(os.path.join(OPS, "cuda", "*.cu")))
CUDA_HEADERS = sorted(glob.glob(os.path.join(OPS, "cuda", "*.cuh")))
CUDA_HOST_SOURCES = [os.path.join(OPS, "aot", "call.cpp"), os.path.join(OPS, "core", "errors.cpp")]
CUDA_LIB = "libms_optim_cuda.so"
# -fmad=false: no fused multiply-adds, so each element's rule rounds as on the CPU
# (-ffp-contract=off there) and as in ms_optim/reference.py.
NVCC_FLAGS = ["-std=c++17", "-O3", "-fmad=false", "--expt-relaxed-constexpr",
              "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden",
              "-D_GLIBCXX_USE_CXX11_ABI=0"]

# -fno-math-errno lets sqrt vectorize; -ffp-contract=off and no -ffast-math keep
# every operation IEEE-rounded, so each ISA matches the numpy reference bit for bit.
COMMON_FLAGS = ["-std=c++17", "-O3", "-fPIC", "-fopenmp", "-fno-math-errno", "-ffp-contract=off",
                "-fvisibility=hidden", "-D_GLIBCXX_USE_CXX11_ABI=0", "-Wall", "-Wextra"]
# The ISA units' own flags, by file name (kernels/isa_*.cpp).
ISA_FLAGS = {
    "isa_scalar.cpp": [],
    "isa_avx2.cpp": ["-mavx2", "-mfma", "-mf16c"],
    "isa_avx512.cpp": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mf16c",
                       "-mprefer-vector-width=512",
                       # GCC 12 false positives inside avx512fintrin.h: the undefined
                       # source of its unmasked intrinsics (cvtps_ph, shifts, abs, widening)
                       "-Wno-maybe-uninitialized", "-Wno-uninitialized"],
}


def _describe_flags(cxx):
    """The compiler and flags, recorded in the library (ms_optim.native_info()["build_flags"])."""
    text = " ".join(cxx + COMMON_FLAGS) + "".join(
        f"; {name}: {' '.join(flags)}" for name, flags in ISA_FLAGS.items() if flags)
    return text.replace("\\", "/").replace('"', "'")


class BuildNative(build_ext):
    """Compiles the C++ kernels with per-file ISA flags into libms_optim.so (and the CUDA
    kernels into libms_optim_cuda.so beside it)."""

    cuda_outputs = ()

    def get_ext_filename(self, fullname):
        return fullname.replace(".", os.sep) + ".so"

    def get_outputs(self):
        return super().get_outputs() + list(self.cuda_outputs)

    def copy_extensions_to_source(self):
        super().copy_extensions_to_source()
        package_dir = self.get_finalized_command("build_py").get_package_dir("ms_optim")
        for built in self.cuda_outputs:
            self.copy_file(built, os.path.join(package_dir, os.path.basename(built)))

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
        cpu_objs = [obj for _, obj, _ in jobs]
        nvcc, gencode = cuda_build()
        cuda_objs = []
        if nvcc is not None:
            for src in CUDA_SOURCES:
                obj = os.path.join(tmp, os.path.basename(src) + ".o")
                jobs.append((src, obj, [nvcc] + NVCC_FLAGS + gencode + includes
                             + ["-c", os.path.abspath(src), "-o", obj]))
                cuda_objs.append(obj)
            # the host code it shares with the CPU library: the same objects
            cuda_objs += [os.path.join(tmp, os.path.basename(src) + ".o")
                          for src in CUDA_HOST_SOURCES]
        # the CUDA and ISA units first: they take the longest
        jobs.sort(key=lambda job: not (job[0].endswith(".cu")
                                       or os.path.basename(job[0]).startswith("isa_")))
        done, cuda_failed = [], []
        # unless MSOPT_CUDA=1, a CUDA source that does not compile leaves the CPU build
        strict = os.environ.get("MSOPT_CUDA") == "1"

        def compile_one(job):
            src, _, cmd = job
            try:
                self._run(cmd)
            except subprocess.CalledProcessError:
                if strict or not src.endswith(".cu"):
                    raise
                cuda_failed.append(src)
                return
            done.append(src)
            print(f"ms_optim: compiled {len(done)}/{len(jobs)} {os.path.relpath(src, OPS)}",
                  flush=True)

        # one compiler per core (MSOPT_BUILD_JOBS to change it)
        workers = int(os.environ.get("MSOPT_BUILD_JOBS", os.cpu_count() or 1))
        with ThreadPoolExecutor(max(1, workers)) as pool:
            list(pool.map(compile_one, jobs))
        self._run(cxx + ["-shared", "-fopenmp", "-o", out] + cpu_objs)
        print(f"ms_optim: linked {out}", flush=True)
        cuda_out = os.path.join(os.path.dirname(out), CUDA_LIB)
        if nvcc is not None and not cuda_failed:
            self._run([nvcc, "-shared"] + gencode + ["-o", cuda_out] + cuda_objs)
            self.cuda_outputs = (cuda_out,)
            print(f"ms_optim: linked {cuda_out}", flush=True)
            return
        if cuda_failed:
            print(f"ms_optim: no CUDA kernels: {', '.join(cuda_failed)} did not compile with "
                  f"{nvcc} (its errors above; MSOPT_CUDA_ARCHS names the GPUs)", flush=True)
        # no library of an earlier build may stay behind, in the build or in the source tree
        package_dir = self.get_finalized_command("build_py").get_package_dir("ms_optim")
        for stale in (cuda_out, os.path.join(package_dir, CUDA_LIB)):
            if os.path.exists(stale):
                os.remove(stale)
                print(f"ms_optim: removed {stale}, an earlier build's", flush=True)

    @staticmethod
    def _run(cmd):
        if os.environ.get("MSOPT_BUILD_VERBOSE"):
            print(" ".join(cmd), flush=True)
        subprocess.check_call(cmd)


def cuda_build():
    """(nvcc, its -gencode flags) for the CUDA library, or (None, None) when it is not built
    (module docstring: MSOPT_CUDA, MSOPT_CUDA_ARCHS)."""
    want = os.environ.get("MSOPT_CUDA", "")
    if want not in ("", "0", "1"):
        raise RuntimeError(f"MSOPT_CUDA must be 0, 1 or unset, got {want!r}")
    nvcc = find_nvcc()
    if want == "0" or (nvcc is None and want != "1"):
        print("ms_optim: no CUDA kernels (" + ("MSOPT_CUDA=0" if want == "0" else
                                                "nvcc not found") + ")", flush=True)
        return None, None
    if nvcc is None:
        raise RuntimeError("MSOPT_CUDA=1 but nvcc is neither on PATH nor in $CUDA_HOME/bin")
    text = os.environ.get("MSOPT_CUDA_ARCHS", "75;90")
    archs = [a.strip() for a in text.split(";") if a.strip()]
    if not archs or not all(a.isdigit() for a in archs):
        raise RuntimeError(f"MSOPT_CUDA_ARCHS must list compute capabilities such as "
                           f"\"75;90\", got {text!r}")
    # machine code for each architecture, and PTX of the oldest for the ones after it
    return nvcc, [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs[1:]] + [
        f"-gencode=arch=compute_{archs[0]},code=[sm_{archs[0]},compute_{archs[0]}]"]


def find_nvcc():
    """nvcc on PATH, else in $CUDA_HOME/bin, else None."""
    found = shutil.which("nvcc")
    if found is None and os.environ.get("CUDA_HOME"):
        candidate = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
        found = candidate if os.access(candidate, os.X_OK) else None
    return found


# The project's metadata, dependencies and package data are in pyproject.toml; this file
# only describes the native library, whose per-file compiler flags need code.
setup(
    ext_modules=[Extension("ms_optim.libms_optim", sources=SOURCES,
                           depends=HEADERS + CUDA_SOURCES + CUDA_HEADERS, include_dirs=[OPS])],
    cmdclass={"build_ext": BuildNative},
)
