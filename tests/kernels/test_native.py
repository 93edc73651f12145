"""The native library as the tests and users meet it: the instruction sets it runs, and how one
is chosen."""
import ctypes
import os
import subprocess
import sys

import pytest

import ms_optim
from ms_optim import _native
from tests.conftest import ISA_CPU_FLAGS, cpu_isas


def test_isa_parameter_is_every_isa_the_library_runs():
    """The `isa` parameter (conftest.py, from /proc/cpuinfo) lists exactly the instruction sets
    the library runs on this CPU: none is left untested, none is tried that it lacks."""
    assert cpu_isas() == ms_optim.native_info()["supported_isas"]


def test_cpu_isas_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c avx512f avx512bw\n")
    assert cpu_isas(str(info)) == ["scalar", "avx2"]  # avx512 needs vl and dq too
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma f16c avx512f avx512bw avx512vl "
                    "avx512dq\n")
    assert cpu_isas(str(info)) == ["scalar", "avx2", "avx512"]
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n")
    assert cpu_isas(str(info)) == ["scalar"]  # avx2 needs f16c


def test_native_info():
    info = ms_optim.native_info()
    assert "native_info" in ms_optim.__all__
    assert set(info) == {"isa", "supported_isas", "kernel_threads", "library", "build_flags"}
    assert info["isa"] == _native.isa() and info["isa"] in info["supported_isas"]
    assert "scalar" in info["supported_isas"]
    assert set(info["supported_isas"]) <= {"scalar", "avx2", "avx512"}
    assert isinstance(info["kernel_threads"], int) and info["kernel_threads"] >= 1
    assert os.path.isfile(info["library"]) and info["library"] == _native.library_path()
    assert "-O3" in info["build_flags"] and "-mavx2" in info["build_flags"]


def test_select_isa_lists_the_names():
    supported = ", ".join(ms_optim.native_info()["supported_isas"])
    with pytest.raises(ValueError, match=rf"'avx3' is unknown \(valid names: scalar, avx2, "
                                         rf"avx512; this CPU supports: {supported}\)"):
        _native.select_isa("avx3")


# an unknown name, and each instruction set this CPU lacks (a fresh interpreter each)
@pytest.mark.slow
@pytest.mark.parametrize("want", ["avx3"] + [n for n in ISA_CPU_FLAGS if n not in cpu_isas()])
def test_ms_optim_isa_env_lists_the_names(want):
    info = ms_optim.native_info()
    env = dict(os.environ, MS_OPTIM_ISA=want)
    out = subprocess.run([sys.executable, "-c",
                          "from ms_optim import _native; print(_native.isa())"],
                         env=env, capture_output=True, text=True, timeout=120, check=True)
    best = info["supported_isas"][-1]
    assert out.stdout.strip() == best
    why = "unknown" if want == "avx3" else "not supported by this CPU"
    assert (f"MS_OPTIM_ISA={want} is {why} (valid names: scalar, avx2, avx512; this CPU "
            f"supports: {', '.join(info['supported_isas'])}); using {best}") in out.stderr


def test_lib_with_declares_tables_passed_fresh_on_every_call(monkeypatch):
    """Callers pass a new signature table on each call; one freed table's address may be
    reused by the next, which must still be declared (a function left at ctypes' default
    int return type turns a string into an address)."""
    handle = _native.lib()
    monkeypatch.setattr(_native._LIBRARY, "declared", set(_native._SIGNATURES))
    for name in ("ms_optim_q8_block", "msopt_supported_isas"):
        monkeypatch.setattr(getattr(handle, name), "restype", ctypes.c_int)
    for _ in range(3):
        assert _native.lib_with({"ms_optim_q8_block": (ctypes.c_int64, [])},
                                "q8").ms_optim_q8_block() == 256
        isas = _native.lib_with({"msopt_supported_isas": (ctypes.c_char_p, [])},
                                "isas").msopt_supported_isas()
        assert isas.split(b", ")[0] == b"scalar"


@pytest.mark.parametrize("module, allowed", [("reference", {"numpy"}),
                                             ("reference_ps", {"numpy", ".reference"})])
def test_the_references_import_nothing_else_from_the_package(module, allowed):
    """The numpy references stand apart: numpy alone (and, for the C library's rules, the
    optimizers' reference), so no rule of the package can reach the reference it is tested
    against."""
    import ast
    import importlib
    with open(importlib.import_module(f"ms_optim.{module}").__file__) as f:
        tree = ast.parse(f.read())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {("." * n.level) + (n.module or "") for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom)}
    assert imported == allowed, imported
