"""Gradients that do not fit the parameters are refused by every optimizer, in PyNative and in
GRAPH_MODE, before any kernel runs: the error names the optimizer and the parameter."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, Tensor

from tests.optim_db import OPTIMIZERS

optimizers = pytest.mark.parametrize("info", OPTIMIZERS, ids=[i.name for i in OPTIMIZERS])
modes = pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE],
                                ids=["pynative", "graph"])


def _params():
    # large enough for DGCMomentum to compress the first
    return [Parameter(Tensor(np.ones((128, 64), np.float32)), name="weight"),
            Parameter(Tensor(np.zeros(3, np.float32)), name="bias")]


def _grads(*shapes_and_dtypes):
    return tuple(Tensor(np.full(s, 0.5, d)) for s, d in shapes_and_dtypes)


GOOD = (((128, 64), np.float32), ((3,), np.float32))
MISTAKES = [
    ("too few", _grads(GOOD[0]), ValueError,
     r"number of gradients must equal the number of parameters, 2, but got 1"),
    ("too many", _grads(*GOOD, GOOD[1]), ValueError,
     r"number of gradients must equal the number of parameters, 2, but got 3"),
    ("shape", _grads(GOOD[0], ((4,), np.float32)), ValueError,
     r"gradient of parameter 'bias' must have its shape \(3,?\), but got \(4,?\)"),
    ("transposed", _grads(((64, 128), np.float32), GOOD[1]), ValueError,
     r"gradient of parameter 'weight' must have its shape \(128, 64\), but got \(64, 128\)"),
    ("dtype", _grads(GOOD[0], ((3,), np.float16)), TypeError,
     r"gradient of parameter 'bias' must have its dtype Float32, but got Float16"),
    ("list", list(_grads(*GOOD)), TypeError, r"gradients must be a tuple .*, but got list"),
]


@pytest.fixture
def mode_context(mode):
    before = ms.get_context("mode")
    ms.set_context(mode=mode)
    yield
    ms.set_context(mode=before)


@modes
@optimizers
@pytest.mark.parametrize("name, grads, error, match", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_gradients_that_do_not_fit_are_refused(info, mode, mode_context, name, grads, error,
                                               match, capfd):
    params = _params()
    opt = info.make(params)
    with pytest.raises(error, match=rf"For '{info.cls.__name__}', .*{match}"):
        opt(grads)
    assert "ms_optim: " not in capfd.readouterr().err  # no kernel saw them
    np.testing.assert_array_equal(params[0].asnumpy(), np.ones((128, 64), np.float32))
    np.testing.assert_array_equal(params[1].asnumpy(), np.zeros(3, np.float32))


@modes
@optimizers
def test_gradients_that_fit_step(info, mode, mode_context):
    params = _params()
    info.make(params)(_grads(*GOOD))
    assert not np.array_equal(params[0].asnumpy(), np.ones((128, 64), np.float32))
