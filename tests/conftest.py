"""The suite's set-up: MindSpore in GRAPH_MODE on CPU, the tiers, and the `isa` parameter.

The tiers: tests marked slow, msrun, netns, sanitizers, cuda or anchors (pyproject.toml)
are deselected unless --all is given (every tier); what is left is the fast default tier.  A
-m expression selects among the default tier and the tiers it names (``-m "not msrun"`` is
the default tier, ``-m "slow and not msrun"`` adds the slow tests).  The cuda tier skips
itself where PyTorch sees no CUDA device.

A test that takes an argument named `isa` runs once per instruction set this CPU runs, with
the kernels of that one selected (ms_optim.testing.select_isa) and the process's own restored
afterwards.  The list is read from /proc/cpuinfo with the library's criteria, so collecting
the tests loads no native code; tests/kernels/test_native.py checks it against the library's.
"""
import re

import pytest

import mindspore as ms

ms.set_context(mode=ms.GRAPH_MODE)
ms.set_device("CPU")

TIERS = ("slow", "msrun", "netns", "sanitizers", "cuda", "anchors")


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", default=False,
                     help="run every tier: also the tests marked " + ", ".join(TIERS))


def pytest_collection_modifyitems(config, items):
    if config.getoption("--all"):
        return
    expr = config.getoption("markexpr") or ""
    named = {t for t in TIERS if re.search(rf"\b{t}\b", expr)}
    fast = [item for item in items
            if not any(item.get_closest_marker(t) for t in TIERS if t not in named)]
    if len(fast) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in fast])
        items[:] = fast


# What each instruction set needs of the CPU, as ms_optim/ops/kernels/dispatch.cpp checks it.
ISA_CPU_FLAGS = {
    "scalar": (),
    "avx2": ("avx2", "fma", "f16c"),
    "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "fma", "f16c"),
}


def cpu_isas(cpuinfo="/proc/cpuinfo"):
    """The instruction sets of ISA_CPU_FLAGS this CPU runs, narrowest first."""
    flags = set()
    with open(cpuinfo) as fh:
        for line in fh:
            if line.startswith("flags"):
                flags = set(line.partition(":")[2].split())
                break
    return [name for name, needs in ISA_CPU_FLAGS.items() if flags.issuperset(needs)]


def pytest_generate_tests(metafunc):
    if "isa" in metafunc.fixturenames:
        metafunc.parametrize("isa", cpu_isas(), indirect=True)


@pytest.fixture
def isa(request):
    """The instruction set under test, selected for the test's duration."""
    from ms_optim import native_info, testing
    before = native_info()["isa"]
    testing.select_isa(request.param)
    yield request.param
    testing.select_isa(before)
