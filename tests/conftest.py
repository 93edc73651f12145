"""The suite's set-up: MindSpore in GRAPH_MODE on CPU, and the fixtures every folder shares."""
import pytest

import mindspore as ms

ms.set_context(mode=ms.GRAPH_MODE)
ms.set_device("CPU")


@pytest.fixture
def fresh_isa():
    """Restores the process-wide kernel ISA after a test that selects one."""
    from ms_optim import _native
    before = _native.isa()
    yield
    _native.select_isa(before)
