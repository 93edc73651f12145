"""The C library's errors (codes and messages naming the argument, nothing changed), one
handle from many threads, ISA selection, the header against the library and the binding's
dict configs."""
import array
import os
import re
import threading

import numpy as np
import pytest

from ms_optim import _native, capi
from tests.capi.test_capi import ALGOS, Model, assert_bits_equal, config, config_string

# --------------------------------------------------------------------- errors --

BAD_CONFIGS = [
    ("sgd", "", "must set lr"),
    ("sgd", "lr=0.1,momentum=0.9", "'momentum' does not apply to sgd"),
    ("adagrad", "lr=0.1,nesterov=true", "'nesterov' does not apply to adagrad"),
    ("lamb", "lr=0.1,nesterov=false", "'nesterov' does not apply to lamb"),
    ("momentum", "lr=0.1,beta1=0.9", "'beta1' does not apply to momentum"),
    ("adam", "lr=0.1,foo=1", "unknown config key 'foo'"),
    ("adam", "lr=0.1,lr=0.2", "'lr' is given twice"),
    ("adam", "lr=-0.1", r"lr = -0.1\d* is out of range \[0, inf\)"),
    ("adam", "lr=nan", "not a finite number"),
    ("adam", "lr=1e999", "not a finite number"),
    ("adam", "lr=0.1x", "not a finite number"),
    ("adam", "lr=0.1,beta1=1", r"beta1 = 1 is out of range \[0, 1\)"),
    ("adam", "lr=0.1,eps=0", r"eps = 0 is out of range \(0, inf\)"),
    ("momentum", "lr=0.1,momentum=1.5", r"momentum = 1.5 is out of range \[0, 1\]"),
    ("momentum", "lr=0.1,nesterov=yes", "nesterov='yes' must be true, false, 1 or 0"),
    ("sgd", "lr=0.1,lr_policy=cosine", "lr_policy='cosine' must be const or linear"),
    ("sgd", "lr=0.1,lr_decay_a=0.01", "need lr_policy=linear"),
    ("sgd", "lr=0.1,,l1=0.1", "empty entry"),
    ("sgd", "lr=0.1,l1", "'l1' is not key=value"),
    ("sgd", "lr=0.1,l2=-1", "l2 = -1 is out of range"),
    ("sgd", "lr=1e39", "does not fit in float32"),
    # in range as doubles, not once cast to the float32 parameter (NaN weights otherwise)
    ("adam", "lr=0.1,beta1=0.99999999999", r"beta1 = 0.99999999999 is 1 in float32"),
    ("lamb", "lr=0.1,beta2=0.999999999999", r"beta2 = .* is 1 in float32"),
    ("adagrad", "lr=0.1,eps=1e-50", r"eps = 1e-50 is 0 in float32"),
    ("rmsprop", "lr=0.1", "unknown optimizer 'rmsprop'"),
    ("Adam", "lr=0.1", "unknown optimizer 'Adam'"),
]


@pytest.mark.parametrize("algo,cfg,message", BAD_CONFIGS)
def test_bad_config_is_an_error_with_a_message(algo, cfg, message):
    with pytest.raises(capi.CapiError, match=message) as e:
        capi.Optimizer(algo, cfg, np.zeros(4, np.float32))
    assert e.value.code == capi.ERR_CONFIG


def test_float32_rounding_limits_apply_only_to_float32():
    """Accepted for float64 parameters, which then step as the float64 reference."""
    rng = np.random.default_rng(3)
    for algo, cfg in [("adam", {"lr": 0.1, "beta1": 0.99999999999}),
                      ("adagrad", {"lr": 0.1, "eps": 1e-50})]:
        model = Model(algo, cfg, np.ones(3))
        opt = capi.Optimizer(algo, config_string(cfg), np.ones(3))
        for g in (np.zeros(3), rng.standard_normal(3)):
            opt.update(g)
            model.dense(g)
        assert np.isfinite(opt.weights()).all()
        assert_bits_equal(opt.weights(), model.weights(0), algo)


def test_config_accepts_spaces_and_every_key_of_its_optimizer():
    """Spaces around keys, values and commas: the optimizer steps exactly as the
    reference with every key of the config (none dropped or misread)."""
    rng = np.random.default_rng(0)
    for algo in ALGOS:
        cfg = config(algo, "full")
        text = " , ".join(f" {k} = {str(v).lower() if isinstance(v, bool) else v} "
                          for k, v in cfg.items())
        param = rng.standard_normal(9)
        model = Model(algo, cfg, param)
        with capi.Optimizer(algo, text, param) as opt:
            for _ in range(3):
                g = rng.standard_normal(9)
                opt.update(g)
                model.dense(g)
            assert_bits_equal(opt.weights(), model.weights(0), algo)


def _raw(fn, *args):
    rc = getattr(capi.lib(), fn)(*args)
    return rc, capi.last_error()


def test_argument_errors_name_the_argument_and_change_nothing():
    param = np.arange(12, dtype=np.float32)
    opt = capi.Optimizer("adam", "lr=0.1,l1=0.01", param, row_width=0)
    h = opt.handle
    g = np.ones(12, np.float32)
    cases = [
        (("msopt_update", h, capi.FLOAT64, g.ctypes.data, 12), capi.ERR_DTYPE,
         "dtype is float64 but the parameter is float32"),
        (("msopt_update", h, 6, g.ctypes.data, 12), capi.ERR_DTYPE, "dtype 6 is not"),
        (("msopt_update", h, -3, g.ctypes.data, 12), capi.ERR_DTYPE, "dtype -3 is not"),
        (("msopt_update", h, capi.FLOAT32, g.ctypes.data, 11), capi.ERR_SIZE,
         "numel is 11 but the parameter has 12"),
        (("msopt_update", h, capi.FLOAT32, None, 12), capi.ERR_NULL, "grad is NULL"),
        (("msopt_update", None, capi.FLOAT32, g.ctypes.data, 12), capi.ERR_NULL, "o is NULL"),
        (("msopt_update", 0x1234567, capi.FLOAT32, g.ctypes.data, 12), capi.ERR_HANDLE,
         "not a live optimizer handle"),
        (("msopt_update_rows", h, capi.FLOAT32, np.zeros(2, np.int64).ctypes.data, 2,
          g.ctypes.data), capi.ERR_SIZE, "row_width 0"),
        (("msopt_apply_diff", h, capi.INT32, g.ctypes.data, 12), capi.ERR_DTYPE,
         "dtype is int32"),
        (("msopt_apply_diff", h, capi.FLOAT32, None, 12), capi.ERR_NULL, "diff is NULL"),
        (("msopt_get_weights", h, g.ctypes.data, 13), capi.ERR_SIZE, "numel is 13"),
        (("msopt_get_weights", h, None, 12), capi.ERR_NULL, "out is NULL"),
        (("msopt_get_state", h, None, None), capi.ERR_NULL, "state is NULL"),
        (("msopt_restore", None, 5, None), capi.ERR_NULL, "state is NULL"),
        (("msopt_create", b"sgd", b"lr=1", capi.FLOAT32, None, 3, 0, None), capi.ERR_NULL,
         "param is NULL"),
        (("msopt_create", b"sgd", b"lr=1", capi.FLOAT32, g.ctypes.data, 12, 5, None),
         capi.ERR_NULL, "out is NULL"),
    ]
    before = opt.state()
    for (fn, *args), code, message in cases:
        rc, msg = _raw(fn, *args)
        assert rc == code, (fn, rc, msg)
        assert message in msg and msg.startswith(fn), (fn, msg)
    out = capi._P()
    for n, w in [(0, 0), (-4, 0), (12, 5), (12, -3)]:
        rc, msg = _raw("msopt_create", b"sgd", b"lr=1", capi.FLOAT32, g.ctypes.data, n, w,
                       capi.ctypes.byref(out))
        assert rc == capi.ERR_SIZE and ("numel" in msg or "row_width" in msg), msg
    assert opt.state() == before


def test_row_errors_fail_the_whole_call_before_anything_changes():
    param = np.arange(12, dtype=np.float64).reshape(4, 3)
    opt = capi.Optimizer("momentum", "lr=0.1,l2=0.1", param)
    opt.update_rows([0], np.ones((1, 3)))
    before = opt.state()
    with pytest.raises(capi.CapiError, match=r"rows\[2\] = 4 is out of range \[0, 4\)") as e:
        opt.update_rows([1, 3, 4], np.ones((3, 3)))
    assert e.value.code == capi.ERR_ROW
    with pytest.raises(capi.CapiError, match=r"rows\[0\] = -1") as e:
        opt.update_rows([-1], np.ones((1, 3)))
    rc, msg = _raw("msopt_update_rows", opt.handle, capi.FLOAT64, None, 2, None)
    assert rc == capi.ERR_NULL and "rows is NULL" in msg
    rc, msg = _raw("msopt_update_rows", opt.handle, capi.FLOAT64, None, -1, None)
    assert rc == capi.ERR_SIZE and "nrows is -1" in msg
    assert opt.state() == before and opt.step == 1


def test_binding_rejects_non_integer_row_ids():
    opt = capi.Optimizer("sgd", "lr=1", np.zeros((4, 2)))
    with pytest.raises(TypeError, match="integer ids"):
        opt.update_rows([1.7], np.ones((1, 2)))
    opt.update_rows([], np.ones((0, 2)))  # an empty step is fine
    assert opt.step == 1


def test_binding_checks_shapes_and_takes_numpy_arrays_only():
    opt = capi.Optimizer("sgd", "lr=1", np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"grad has shape \(3, 4\), the parameter \(4, 3\)"):
        opt.update(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"diff has shape \(2, 6\)"):
        opt.apply_diff(np.ones((2, 6), np.float32))
    with pytest.raises(ValueError, match=r"values has shape \(1, 4\), expected 2 rows x 3"):
        opt.update_rows([0, 1], np.ones((1, 4), np.float32))
    assert opt.step == 0 and not opt.weights().any()
    opt.update(np.ones(12, np.float32))  # flat is the same memory
    opt.update_rows([0, 1], np.ones(6, np.float32))
    assert opt.step == 2
    with pytest.raises(TypeError, match="param must be a numpy array, got list"):
        capi.Optimizer("sgd", "lr=1", [[0.0] * 3] * 4)
    with pytest.raises(TypeError, match="grad must be a numpy array, got list"):
        opt.update([[1.0] * 3] * 4)


def test_binding_repr_says_what_the_handle_holds():
    opt = capi.Optimizer("adam", {"lr": 0.001}, np.zeros((4, 3), np.float32))
    opt.update(np.ones((4, 3), np.float32))
    assert repr(opt) == "capi.Optimizer('adam', float32, shape=(4, 3), row_width=3, step=1)"
    copy = capi.Optimizer.restore(opt.state())
    assert repr(copy) == repr(opt)
    flat = capi.Optimizer("lamb", {"lr": 0.1}, np.zeros((2, 2, 3)))
    assert repr(flat) == "capi.Optimizer('lamb', float64, shape=(2, 2, 3), row_width=0, step=0)"
    assert repr(capi.Optimizer.restore(flat.state())).endswith("shape=(12,), row_width=0, step=0)")
    opt.close()
    assert repr(opt) == "capi.Optimizer('adam', released)"


def test_released_handles_are_detected():
    opt = capi.Optimizer("sgd", "lr=1", np.zeros(3, np.float32))
    h = opt.handle
    opt.close()
    rc, msg = _raw("msopt_release", h)
    assert rc == capi.ERR_HANDLE and "released or never created" in msg
    rc, _ = _raw("msopt_get_weights", h, np.zeros(3, np.float32).ctypes.data, 3)
    assert rc == capi.ERR_HANDLE
    with pytest.raises(ValueError, match="released"):
        opt.weights()


# -------------------------------------------------------------------- threads --

def test_one_handle_from_many_threads_and_per_thread_errors():
    """Calls on one handle are serialized: SGD with exact arithmetic (lr 0.5,
    small integer gradients) ends where any serial order ends.  Each thread
    reads its own last error."""
    n, steps, nthreads = 50_000, 40, 4
    opt = capi.Optimizer("sgd", "lr=0.5", np.zeros(n, np.float32))
    grads = [np.full(n, t + 1, np.float32) for t in range(nthreads)]
    problems = []

    def work(t):
        g = grads[t]
        for _ in range(steps):
            opt.update(g)
            rc, msg = _raw("msopt_update", opt.handle, capi.FLOAT32, g.ctypes.data, 100 + t)
            if rc != capi.ERR_SIZE or f"numel is {100 + t} " not in msg:
                problems.append((t, rc, msg))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not problems
    assert opt.step == steps * nthreads
    want = -0.5 * steps * sum(range(1, nthreads + 1))
    np.testing.assert_array_equal(opt.weights(), np.full(n, want, np.float32))


def test_kernels_follow_isa_selection(isa):
    assert capi.kernel_isa() == isa == _native.isa()


def test_header_and_library_are_found():
    assert os.path.isfile(capi.header_path())
    assert os.path.isfile(capi.library_path())
    with open(capi.header_path()) as f:
        header = f.read()
    for fn in capi._SIGNATURES:
        if fn != "msopt_ps_isa":  # internal, for tests
            assert re.search(rf"\b{fn}\(", header), fn
    for code, name in capi.ERROR_NAMES.items():
        assert re.search(rf"#define {name} \({code}\)", header), name


def test_config_as_dict():
    """A dict config is the library's "k=v,..." text (bools as true/false); bad types are
    TypeErrors naming the argument."""
    assert capi.config_text({"lr": 0.5, "momentum": 0.25, "nesterov": True}) == \
        "lr=0.5,momentum=0.25,nesterov=true"
    assert capi.config_text({"nesterov": False, "lr_policy": "const"}) == \
        "nesterov=false,lr_policy=const"
    assert capi.config_text(None) == capi.config_text({}) == ""
    p = np.ones(4, np.float32)
    by_dict = capi.Optimizer("momentum", {"lr": 0.5, "momentum": 0.25, "nesterov": True}, p)
    by_text = capi.Optimizer("momentum", "lr=0.5,momentum=0.25,nesterov=true", p)
    for _ in range(2):
        for o in (by_dict, by_text):
            o.update(np.full(4, 2.0, np.float32))
    np.testing.assert_array_equal(by_dict.weights(), by_text.weights())
    assert not np.array_equal(by_dict.weights(), p)
    with pytest.raises(TypeError, match="config"):
        capi.Optimizer("sgd", {"lr": [0.1]}, p)
    with pytest.raises(TypeError, match="config"):
        capi.Optimizer("sgd", 0.1, p)
    with pytest.raises(TypeError, match="config keys"):
        capi.Optimizer("sgd", {1: 0.1}, p)
    with pytest.raises(TypeError, match="optimizer"):
        capi.Optimizer(b"sgd", "lr=0.1", p)
    with pytest.raises(capi.CapiError, match="nesterov"):  # the library still checks keys
        capi.Optimizer("sgd", {"lr": 0.1, "nesterov": True}, p)


@pytest.mark.parametrize("optimizer,config,message", [
    # a ',' or '=' in a dict's key or value would be read as another key
    ("sgd", {"lr": "1,l1=0.5"}, r"config\['lr'\] must be a non-empty str without ',', '='"),
    ("sgd", {"lr": 1.0, "l1": "=0.5"}, r"config\['l1'\] must be a non-empty str"),
    ("sgd", {"lr": 1.0, "l1,l2": 0.5}, "config key must be a non-empty str"),
    ("sgd", {"": 0.5}, "config key must be a non-empty str"),
    # the library reads C strings, which would end at a NUL
    ("sgd", "lr=1\0,l1=0.5", "config must not contain a NUL character"),
    ("sgd\0x", "lr=1", "optimizer must not contain a NUL character"),
    ("sgd", {"lr": 1.0, "lr_policy": "const\0"}, r"config\['lr_policy'\] must be a non-empty"),
])
def test_text_that_the_library_would_read_otherwise_is_refused(optimizer, config, message):
    with pytest.raises(ValueError, match=message):
        capi.Optimizer(optimizer, config, np.ones(4, np.float32))


def test_row_width_and_restore_arguments_are_checked_in_python():
    p = np.ones(4, np.float32)
    for bad in (2.0, "2", True):
        with pytest.raises(TypeError, match="row_width must be an int"):
            capi.Optimizer("sgd", "lr=1", p, row_width=bad)
    for bad in (-1, 2**63, 2**64 + 2):
        with pytest.raises(ValueError, match=r"row_width must be 0 \(a flat parameter\) or a row "
                                             r"width in \[1, 2\*\*63\)"):
            capi.Optimizer("sgd", "lr=1", p, row_width=bad)
    assert capi.Optimizer("sgd", "lr=1", p, row_width=np.int64(2)).row_width == 2
    rows = capi.Optimizer("sgd", "lr=1", np.ones((4, 2), np.float32))
    with pytest.raises(capi.CapiError, match=r"rows\[1\] = 9223372036854775809 is out of "
                                             r"range \[0, 4\)"):
        rows.update_rows(np.array([1, 2**63 + 1], np.uint64), np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(rows.weights(), np.ones((4, 2), np.float32))
    for bad in (5, "abc", None, [1, 2]):
        with pytest.raises(TypeError, match="state must be bytes-like"):
            capi.Optimizer.restore(bad)
    blob = capi.Optimizer("sgd", "lr=1", p).state()
    for form in (bytearray(blob), memoryview(blob), np.frombuffer(blob, np.uint8),
                 array.array("B", blob)):
        np.testing.assert_array_equal(capi.Optimizer.restore(form).weights(), p)
