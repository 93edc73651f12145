"""The C library from C and Go: the C test and fuzz programs (tests/capi/c/) built from the
library's sources under AddressSanitizer + UBSan, the C test against the installed library
linked the way docs/capi.md says, and the Go example through cgo."""
import ast
import glob
import os
import re
import shutil
import subprocess

import pytest

from ms_optim import capi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS = os.path.join(ROOT, "ms_optim", "ops")


def _setup_lists():
    """The sources (setup.py's glob: every .cpp under ms_optim/ops), COMMON_FLAGS and
    ISA_FLAGS of setup.py, read without running it."""
    with open(os.path.join(ROOT, "setup.py")) as f:
        tree = ast.parse(f.read())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", None)
            if name in ("COMMON_FLAGS", "ISA_FLAGS"):
                found[name] = ast.literal_eval(node.value)
    sources = sorted(glob.glob(os.path.join(OPS, "**", "*.cpp"), recursive=True))
    return sources, found["COMMON_FLAGS"], found["ISA_FLAGS"]


def _run_all(cmds, cwd):
    """Runs compile commands two at a time; returns their stderr."""
    errs, pending = [], list(cmds)
    while pending:
        batch, pending = pending[:2], pending[2:]
        procs = [subprocess.Popen(c, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for c in batch]
        for c, p in zip(batch, procs):
            _, err = p.communicate()
            assert p.returncode == 0, f"{' '.join(c)}\n{err}"
            errs.append(err)
    return errs


SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer", "-O1", "-g1"]
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=23:"
                    "allocator_may_return_null=1:check_initialization_order=1",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    "OMP_NUM_THREADS": "2",
}
C_FLAGS = ["-std=c11", "-Wall", "-Wextra", "-pedantic"]


@pytest.fixture(scope="session")
def sanitized_programs(tmp_path_factory):
    """The library's sources and the C programs built with ASan + UBSan."""
    out = str(tmp_path_factory.mktemp("sanitized"))
    sources, common, isa_flags = _setup_lists()
    common = [f for f in common if not f.startswith("-O") and f != "-fvisibility=hidden"]
    cmds, objects = [], []
    for src in sources:
        obj = os.path.join(out, os.path.basename(src) + ".o")
        cmds.append(["g++"] + common + ["-I", OPS] + isa_flags.get(os.path.basename(src), []) +
                    SANITIZE + ["-c", src, "-o", obj])
        objects.append(obj)
    for prog in ("test_capi", "fuzz_capi"):
        cmds.append(["gcc"] + C_FLAGS + SANITIZE + ["-I", capi.include_dir(), "-c",
                     os.path.join(ROOT, "tests", "capi", "c", prog + ".c"), "-o",
                     os.path.join(out, prog + ".o")])
    errs = _run_all(cmds, out)
    # no warnings from this library's C API sources (the C programs, capi*.cpp and
    # capi_internal.h, and the shared loops and ps_kernels*.h inside the isa_*.cpp units)
    warnings = [e for c, e in zip(cmds, errs)
                if ((re.search(r"capi\w*\.cpp", " ".join(c)) or c[0] == "gcc") and "warning:" in e)
                or re.search(r"(ps_kernels\w*|loops_impl|capi_internal|contract)\.h:\d+:\d+: "
                             r"warning", e)]
    assert not warnings, warnings
    exes = {}
    for prog in ("test_capi", "fuzz_capi"):
        exe = os.path.join(out, prog)
        subprocess.run(["g++"] + SANITIZE + ["-fopenmp", "-o", exe, os.path.join(out, prog + ".o")]
                       + objects + ["-lm", "-lpthread"], check=True, capture_output=True)
        exes[prog] = exe
    return exes


# With allocator_may_return_null=1 ASan returns NULL for the C test's deliberately
# impossible allocation (the MSOPT_ERR_NOMEM check) and says so in this warning,
# which is not a finding.
ALLOCATION_WARNING = re.compile(r"^==\d+==WARNING: AddressSanitizer failed to allocate 0x[0-9a-f]+ "
                                r"bytes\n", re.M)


def _run_sanitized(args):
    env = dict(os.environ, **SANITIZER_ENV)
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    report = res.stdout + res.stderr
    findings = ALLOCATION_WARNING.sub("", res.stderr)
    assert "Sanitizer" not in findings and "runtime error" not in findings, report
    assert res.returncode == 0, report
    m = re.search(r"(\d+) passed, (\d+) failed", res.stdout)
    assert m and m.group(2) == "0", report
    return int(m.group(1)), res.stdout


@pytest.mark.sanitizers
def test_c_tests_under_sanitizers(sanitized_programs):
    passed, _ = _run_sanitized([sanitized_programs["test_capi"]])
    assert passed >= 200


@pytest.mark.sanitizers
def test_fuzz_bad_calls_under_sanitizers(sanitized_programs):
    passed, out = _run_sanitized([sanitized_programs["fuzz_capi"], "12000", "1"])
    calls = int(re.search(r"fuzz: (\d+) bad calls", out).group(1))
    assert calls == 12000 and passed >= calls


def test_c_tests_against_installed_library(tmp_path):
    """The header and the installed library, linked the way the README says."""
    exe = str(tmp_path / "test_capi")
    libdir = os.path.dirname(capi.library_path())
    res = subprocess.run(["gcc"] + C_FLAGS + ["-O1", "-I", capi.include_dir(),
                          os.path.join(ROOT, "tests", "capi", "c", "test_capi.c"), "-o", exe,
                          "-L", libdir, "-lms_optim", f"-Wl,-rpath,{libdir}", "-lm", "-lpthread"],
                         capture_output=True, text=True)
    assert res.returncode == 0 and "warning:" not in res.stderr, res.stderr
    run = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and " 0 failed" in run.stdout, run.stdout + run.stderr


@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed (.ci/run installs it)")
def test_go_example(tmp_path):
    libdir = os.path.dirname(capi.library_path())
    env = dict(os.environ, CGO_ENABLED="1", CGO_CFLAGS=f"-I{capi.include_dir()}",
               CGO_LDFLAGS=f"-L{libdir} -Wl,-rpath,{libdir}")
    if not any(env.get(k) for k in ("GOCACHE", "XDG_CACHE_HOME", "HOME")):
        env["GOCACHE"] = str(tmp_path / "gocache")  # go build refuses to run without a cache
    exe = str(tmp_path / "example")
    # -buildvcs=false: no VCS stamping, which fails where git is missing or the
    # checkout belongs to another user ("dubious ownership")
    build = subprocess.run(["go", "build", "-buildvcs=false", "-o", exe, "."],
                           cwd=os.path.join(ROOT, "examples", "go"), env=env, capture_output=True,
                           text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"dense update, row update, state round trip \(\d+ bytes\), "
                     r"8 goroutines on one handle: ok", run.stdout), run.stdout
