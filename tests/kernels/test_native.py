"""The native library as the tests and users meet it: the instruction sets it runs, and how one
is chosen."""
import ms_optim
from tests.conftest import cpu_isas


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
