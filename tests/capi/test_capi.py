"""The C library for parameter servers (ms_optim.h) against the numpy reference.

- every optimizer x float dtype x ISA, dense and rows, elementwise bit for bit
  against the reference_ps.ps_* rules on odd sizes (OpenMP sizes included);
- lazy l1/l2 regularization of rows against eager regularization of every row;
- apply_diff for all six dtypes, integer wrap-around included;
- save / restore / continue, the documented state format, corrupt blobs;

Errors, threads and the binding's configs are in test_capi_errors.py, the C
programs and the Go example in test_c_programs.py.
"""
import os
import struct
import time
import zlib

import numpy as np
import pytest

from ms_optim import capi, reference_ps
from tests.sizes import EDGE_SIZES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS = os.path.join(ROOT, "ms_optim", "ops")
ALGOS = capi.OPTIMIZERS
FLOATS = (np.float32, np.float64)
# the last runs on OpenMP threads and spans many norm blocks
PS_SIZES = EDGE_SIZES + [100_003]
NSLOTS = {"sgd": 0, "momentum": 1, "adagrad": 1, "adam": 2, "lamb": 2}
DEFAULTS = {"momentum": 0.9, "nesterov": False, "beta1": 0.9, "beta2": 0.999,
            "weight_decay": 0.0, "l1": 0.0, "l2": 0.0, "lr_policy": "const",
            "lr_decay_a": 0.0, "lr_decay_b": 0.0}
DEFAULT_EPS = {"sgd": 0.0, "momentum": 0.0, "adagrad": 1e-6, "adam": 1e-8, "lamb": 1e-6}
KEYS = {"sgd": set(), "momentum": {"momentum", "nesterov"}, "adagrad": {"eps"},
        "adam": {"beta1", "beta2", "eps", "nesterov"}, "lamb": {"beta1", "beta2", "eps"}}


def config(algo, variant):
    """A config per optimizer: 'plain' (no decay, constant lr) or 'full' (every key it takes)."""
    if variant == "plain":
        return {"lr": 0.01}
    c = {"lr": 0.05, "weight_decay": 0.01, "l1": 1e-3, "l2": 0.02, "lr_policy": "linear",
         "lr_decay_a": 0.004, "lr_decay_b": 0.03}
    extra = {"momentum": 0.8, "nesterov": True, "beta1": 0.8, "beta2": 0.99, "eps": 1e-7}
    c.update({k: v for k, v in extra.items() if k in KEYS[algo]})
    return c


def config_string(c):
    return ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in c.items())


class Model:
    """The library's semantics built from the reference_ps.ps_* rules, with eager
    regularization: after every step, every row gets that step's l1/l2."""

    def __init__(self, algo, cfg, param, row_width=0):
        self.algo = algo
        self.c = {**DEFAULTS, "eps": DEFAULT_EPS[algo], **cfg}
        self.t = param.dtype.type
        self.p = param.copy().reshape(-1, row_width) if row_width else param.copy().reshape(1, -1)
        self.slots = [np.zeros_like(self.p) for _ in range(NSLOTS[algo])]
        self.step = 0
        self.b1p = self.b2p = self.t(1)

    def _begin(self):
        c, k = self.c, self.step + 1
        lr = reference_ps.ps_lr(c["lr"], k, c["lr_policy"], c["lr_decay_a"], c["lr_decay_b"])
        return k, lr, self.b1p * self.t(c["beta1"]), self.b2p * self.t(c["beta2"])

    def _rule(self, p, slots, g, lr, b1p, b2p):
        c, wd = self.c, self.c["weight_decay"]
        if self.algo == "sgd":
            reference_ps.ps_sgd_step(p, g, lr, wd)
        elif self.algo == "momentum":
            reference_ps.ps_momentum_step(p, slots[0], g, lr, c["momentum"], c["nesterov"], wd)
        elif self.algo == "adagrad":
            reference_ps.ps_adagrad_step(p, slots[0], g, lr, c["eps"], wd)
        elif self.algo == "adam":
            reference_ps.ps_adam_step(p, slots[0], slots[1], g, lr, c["beta1"], c["beta2"], c["eps"],
                                   b1p, b2p, c["nesterov"], wd)
        else:
            reference_ps.ps_lamb_step(p, slots[0], slots[1], g, lr, c["beta1"], c["beta2"],
                                   c["eps"], b1p, b2p, wd)

    def _end(self, k, lr, b1p, b2p):
        if self.c["l1"] > 0 or self.c["l2"] > 0:
            reference_ps.ps_prox(self.p, lr, self.c["l1"], self.c["l2"])
        self.step, self.b1p, self.b2p = k, b1p, b2p

    def dense(self, g):
        k, lr, b1p, b2p = self._begin()
        self._rule(self.p.reshape(-1), [s.reshape(-1) for s in self.slots], g.reshape(-1), lr,
                   b1p, b2p)
        self._end(k, lr, b1p, b2p)

    def rows(self, rows, values):
        k, lr, b1p, b2p = self._begin()
        uniq, sums = reference_ps.ps_merge_rows(rows, values, self.p.shape[1])
        if self.algo == "lamb":  # the trust ratio is per row
            for i, r in enumerate(uniq):
                self._rule(self.p[r], [s[r] for s in self.slots], sums[i], lr, b1p, b2p)
        else:
            p, slots = self.p[uniq], [s[uniq] for s in self.slots]
            self._rule(p, slots, sums, lr, b1p, b2p)
            self.p[uniq] = p
            for s, v in zip(self.slots, slots):
                s[uniq] = v
        self._end(k, lr, b1p, b2p)

    def weights(self, row_width):
        return self.p.copy() if row_width else self.p.reshape(-1).copy()


def assert_bits_equal(actual, expected, what=""):
    """Elementwise equality of the bits (NaN payloads and signed zeros included)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    view = np.uint32 if actual.dtype.itemsize == 4 else np.uint64
    a, e = actual.view(view), expected.view(view)
    bad = np.flatnonzero(a != e)
    assert bad.size == 0, (f"{what}: {bad.size} of {a.size} elements differ, first at "
                           f"{bad[0]}: {actual.reshape(-1)[bad[0]]!r} != "
                           f"{expected.reshape(-1)[bad[0]]!r}")


# ------------------------------------------------------------ dense and rows --

@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", PS_SIZES)
@pytest.mark.parametrize("variant", ["plain", "full"])
def test_dense_matches_reference(isa, algo, dtype, n, variant):
    assert capi.kernel_isa() == isa
    rng = np.random.default_rng(n)
    param = rng.standard_normal(n).astype(dtype)
    cfg = config(algo, variant)
    opt = capi.Optimizer(algo, config_string(cfg), param)
    model = Model(algo, cfg, param)
    for _ in range(3):
        g = (rng.standard_normal(n) * 2).astype(dtype)
        opt.update(g)
        model.dense(g)
    assert opt.step == 3
    assert_bits_equal(opt.weights(), model.weights(0), f"{algo} {variant}")
    opt.close()


TABLES = {  # (rows, width, ids touched per step)
    "narrow": (301, 7, 40),
    "threaded": (4099, 17, 2100),  # 2100 x 17 elements: OpenMP row loop
    "wide": (5, 2 * reference_ps.PS_NORM_BLOCK + 3, 3),  # Lamb's per-row norms over 3 blocks
}


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("dtype", FLOATS)
# the threaded table takes a fifth of a second per case: the slow tier (the dense 100_003 cases
# run the library's OpenMP loops in the default one)
@pytest.mark.parametrize("table", [t if t != "threaded" else pytest.param(t, marks=pytest.mark.slow)
                                   for t in sorted(TABLES)])
@pytest.mark.parametrize("variant", ["plain", "full"])
def test_rows_match_reference(isa, algo, dtype, table, variant):
    """Row steps (duplicate ids summed) mixed with a dense step; with 'full' the
    lazily regularized rows are compared with eager regularization."""
    nrows, width, touched = TABLES[table]
    rng = np.random.default_rng(nrows + width)
    param = rng.standard_normal((nrows, width)).astype(dtype)
    cfg = config(algo, variant)
    opt = capi.Optimizer(algo, config_string(cfg), param, row_width=width)
    model = Model(algo, cfg, param, width)
    for step in range(5):
        if step == 2:
            g = rng.standard_normal((nrows, width)).astype(dtype)
            opt.update(g)
            model.dense(g)
            continue
        ids = rng.integers(0, nrows, touched)
        dup = max(touched // 4, 1)
        ids[:dup] = ids[-dup:]  # duplicates
        values = rng.standard_normal((touched, width)).astype(dtype)
        opt.update_rows(ids, values)
        model.rows(ids, values)
        if step == 3:
            assert_bits_equal(opt.weights(), model.weights(width), f"step {step}")
    assert_bits_equal(opt.weights(), model.weights(width), f"{algo} {table} {variant}")
    opt.close()


# ------------------------------------------------------ lazy regularization --

@pytest.mark.parametrize("algo", ["sgd", "adam"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reg", [{"l1": 0.02}, {"l2": 0.5}, {"l1": 0.005, "l2": 0.1}])
@pytest.mark.parametrize("policy", ["const", "linear"])
def test_lazy_regularization_equals_eager(algo, dtype, reg, policy):
    """Rows untouched for up to 80 steps catch up exactly: bit for bit the result
    of regularizing every row at every step, through the linear lr ramp, its
    floor, rows driven to zero by l1, a mid-run read and a state round trip."""
    nrows, width = 64, 9
    rng = np.random.default_rng(7)
    param = rng.standard_normal((nrows, width)).astype(dtype)
    cfg = {"lr": 0.5, **reg}
    if policy == "linear":
        cfg.update(lr_policy="linear", lr_decay_a=0.01, lr_decay_b=0.2)  # floor from step 31
    opt = capi.Optimizer(algo, config_string(cfg), param, row_width=width)
    model = Model(algo, cfg, param, width)
    for step in range(80):
        ids = rng.integers(0, 8, 2) if step % 10 else rng.integers(0, nrows, 3)  # rows 8.. rarely
        values = rng.standard_normal((ids.size, width)).astype(dtype)
        opt.update_rows(ids, values)
        model.rows(ids, values)
        if step == 37:
            assert_bits_equal(opt.weights(), model.weights(width), "mid-run read")
        if step == 50:
            restored = capi.Optimizer.restore(opt.state())
            opt.close()
            opt = restored
    final = opt.weights()
    assert_bits_equal(final, model.weights(width), f"{algo} {reg} {policy}")
    if "l1" in reg:
        assert (final == 0).sum() > 0, "l1 should have driven some weights to zero"
    assert opt.step == 80


@pytest.mark.parametrize("dtype", FLOATS)
def test_lazy_regularization_of_special_values(dtype):
    """A row holding NaN, infinities, signed zeros and a subnormal, untouched for
    300 steps, catches up to the eager bits (the replay's early stop compares
    bits, so a NaN row stops at once and still matches)."""
    t = np.dtype(dtype).type
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -3.0], dtype)
    param = np.stack([np.ones(8, dtype), special, np.full(8, 2, dtype)])
    cfg = {"lr": 0.25, "l1": 0.01, "l2": 0.5, "lr_policy": "linear", "lr_decay_a": 0.001,
           "lr_decay_b": 0.125}  # on the ramp for 125 steps, then constant
    opt = capi.Optimizer("sgd", config_string(cfg), param, row_width=8)
    model = Model("sgd", cfg, param, 8)
    g = np.full((1, 8), t(0.5))
    for _ in range(300):
        opt.update_rows([0], g)
        model.rows([0], g)
    got = opt.weights()
    assert_bits_equal(got, model.weights(8), "special values")
    assert np.isnan(got[1, :2]).all() and np.isinf(got[1, 2:4]).all()


def test_reads_bring_every_row_up_to_date():
    """msopt_get_state / msopt_get_weights catch every row up: the blob records it."""
    param = np.ones((3, 2), np.float32)
    opt = capi.Optimizer("sgd", "lr=1,l1=0.125", param, row_width=2)
    zero = np.zeros((1, 2), np.float32)
    for _ in range(4):
        opt.update_rows([0], zero)
    state = opt.state()  # brings rows 1, 2 up to date: 4 steps of -0.125
    header = struct.unpack_from("<8sIIIIqqqII", state)
    assert header[7] == 4
    reg_steps = np.frombuffer(state[-4 - 3 * 8:-4], np.int64)
    assert reg_steps.tolist() == [4, 4, 4]
    np.testing.assert_array_equal(opt.weights(), np.full((3, 2), 0.5, np.float32))


# ------------------------------------------------------------------ On Client --

INT_LIMITS = {np.int32: (-2**31, 2**31 - 1), np.uint32: (0, 2**32 - 1),
              np.int64: (-2**63, 2**63 - 1), np.uint64: (0, 2**64 - 1)}


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64, np.float32,
                                   np.float64])
@pytest.mark.parametrize("n", [1, 7, 16385, 100_003])
def test_apply_diff_all_dtypes(dtype, n):
    rng = np.random.default_rng(n)
    if dtype in INT_LIMITS:
        lo, hi = INT_LIMITS[dtype]
        # values near both limits, so sums overflow in both directions
        param = rng.integers(lo, hi, n, dtype=dtype, endpoint=True)
        diff = rng.integers(lo, hi, n, dtype=dtype, endpoint=True)
        param[:1] = hi
        diff[:1] = 1
    else:
        param = rng.standard_normal(n).astype(dtype)
        diff = rng.standard_normal(n).astype(dtype)
    opt = capi.Optimizer("sgd", "" if dtype in INT_LIMITS else "lr=0.1", param)
    expected = param.copy()
    for _ in range(2):
        opt.apply_diff(diff)
        reference_ps.ps_add_wrap(expected, diff)
    got = opt.weights()
    np.testing.assert_array_equal(got, expected)
    if dtype in INT_LIMITS:
        assert got[0] == (INT_LIMITS[dtype][0] + 1), "max + 1 + 1 wraps to min + 1"
    assert opt.step == 0


def test_apply_diff_catches_up_lazy_rows_first():
    param = np.full((4, 3), 2.0)
    opt = capi.Optimizer("sgd", "lr=0.5,l2=0.5", param, row_width=3)
    model = Model("sgd", {"lr": 0.5, "l2": 0.5}, param, 3)
    for _ in range(3):
        opt.update_rows([1], np.ones((1, 3)))
        model.rows([1], np.ones((1, 3)))
    diff = np.arange(12.0)
    opt.apply_diff(diff)
    model.p += diff.reshape(4, 3)
    assert_bits_equal(opt.weights(), model.weights(3))


def test_integer_parameter_rejects_gradient_steps():
    opt = capi.Optimizer("adam", "", np.arange(5, dtype=np.int64))
    with pytest.raises(capi.CapiError, match="float32 and float64.*int64.*msopt_apply_diff") as e:
        opt.update(np.ones(5, np.int64))
    assert e.value.code == capi.ERR_DTYPE
    rc = capi.lib().msopt_update_rows(opt.handle, capi.INT64, np.zeros(1, np.int64).ctypes.data,
                                      1, np.ones(5, np.int64).ctypes.data)
    assert rc == capi.ERR_DTYPE
    np.testing.assert_array_equal(opt.weights(), np.arange(5))


# ---------------------------------------------------------------------- state --

@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_save_restore_continue_is_bit_identical(algo, dtype):
    """A: saves mid-run and keeps going; B: restored from that blob; C: never
    saved.  All three end bit-identical, state blobs included."""
    nrows, width = 50, 6
    rng = np.random.default_rng(3)
    param = rng.standard_normal((nrows, width)).astype(dtype)
    cfg = config_string(config(algo, "full"))
    a = capi.Optimizer(algo, cfg, param, row_width=width)
    c = capi.Optimizer(algo, cfg, param, row_width=width)
    grads = [rng.standard_normal((nrows, width)).astype(dtype) for _ in range(10)]
    ids = [rng.integers(0, nrows, 12) for _ in range(10)]
    vals = [rng.standard_normal((12, width)).astype(dtype) for _ in range(10)]

    def run(opts, steps):
        for s in steps:
            for o in opts:
                if s % 3 == 0:
                    o.update(grads[s])
                else:
                    o.update_rows(ids[s], vals[s])

    run([a, c], range(5))
    b = capi.Optimizer.restore(a.state())
    assert (b.step, b.numel, b.row_width, b.dtype) == (5, param.size, width, np.dtype(dtype))
    run([a, b, c], range(5, 10))
    wa = a.weights()
    assert_bits_equal(b.weights(), wa, "restored")
    assert_bits_equal(c.weights(), wa, "never saved")
    assert a.state() == b.state() == c.state()


def parse_state(blob):
    """The state format of the README, read independently of the library."""
    magic, version, header, algo, dtype, numel, row_width, step, flags, nslots = \
        struct.unpack_from("<8sIIIIqqqII", blob, 0)
    hyper = struct.unpack_from("<10d", blob, 56)
    b1p, b2p, nreg = struct.unpack_from("<ddq", blob, 136)
    es = np.dtype(capi.NUMPY_DTYPES[dtype]).itemsize
    off = header
    bufs = []
    for _ in range(1 + nslots):
        bufs.append(np.frombuffer(blob, capi.NUMPY_DTYPES[dtype], numel, off))
        off += numel * es
    reg = np.frombuffer(blob, np.int64, nreg, off)
    off += nreg * 8
    (crc,) = struct.unpack_from("<I", blob, off)
    return dict(magic=magic, version=version, header=header, algo=algo, dtype=dtype, numel=numel,
                row_width=row_width, step=step, flags=flags, nslots=nslots, hyper=hyper,
                b1p=b1p, b2p=b2p, bufs=bufs, reg=reg, crc=crc, end=off + 4)


def test_state_format_is_as_documented():
    param = np.linspace(-1, 1, 12).astype(np.float32)
    cfg = {"lr": 0.25, "beta1": 0.5, "beta2": 0.75, "eps": 1e-3, "weight_decay": 0.125,
           "l2": 0.5, "lr_policy": "linear", "lr_decay_a": 0.01, "lr_decay_b": 0.1,
           "nesterov": True}
    opt = capi.Optimizer("adam", config_string(cfg), param, row_width=4)
    model = Model("adam", cfg, param, 4)
    g = np.arange(12, dtype=np.float32) / 8
    for _ in range(2):
        opt.update(g)
        model.dense(g)
    blob = opt.state()
    s = parse_state(blob)
    assert s["end"] == len(blob)
    assert (s["magic"], s["version"], s["header"]) == (b"MSOPTSTA", 1, 160)
    assert (s["algo"], s["dtype"], s["numel"], s["row_width"], s["step"]) == (3, 4, 12, 4, 2)
    assert (s["flags"], s["nslots"]) == (3, 2)
    assert s["hyper"] == (0.25, 0.9, 0.5, 0.75, 1e-3, 0.125, 0.0, 0.5, 0.01, 0.1)
    assert (s["b1p"], s["b2p"]) == (0.25, 0.5625)
    assert s["crc"] == zlib.crc32(blob[:-4])
    assert_bits_equal(s["bufs"][0].copy(), model.weights(0))
    assert_bits_equal(s["bufs"][1].copy(), model.slots[0].reshape(-1), "m")
    assert_bits_equal(s["bufs"][2].copy(), model.slots[1].reshape(-1), "v")
    assert s["reg"].tolist() == [2, 2, 2]


@pytest.mark.parametrize("policy", ["const", "linear"])
def test_step_counter_at_its_maximum(policy):
    """A state near 2^63 - 1 steps, rows lagging behind by 2, 1 and ~2^63 steps
    (with linear, the lr is on its ramp throughout): the rows catch up exactly
    and at once, one more step works, then updates fail with a message while
    reads still work; no counter overflows."""
    c = {"lr": 0.5, "l1": 0.01, "l2": 0.5}
    if policy == "linear":
        c.update(lr_policy="linear", lr_decay_a=1e-30)
    opt = capi.Optimizer("sgd", config_string(c), np.ones((3, 2)), row_width=2)
    opt.update_rows([0], np.zeros((1, 2)))
    start = opt.weights()
    blob = bytearray(opt.state())
    top = 2**63 - 1
    struct.pack_into("<q", blob, 40, top - 1)  # step
    struct.pack_into("<3q", blob, len(blob) - 4 - 24, top - 3, top - 1, 0)  # rows' reg steps
    struct.pack_into("<I", blob, len(blob) - 4, zlib.crc32(bytes(blob[:-4])))
    opt = capi.Optimizer.restore(bytes(blob))
    opt.update_rows([1], np.zeros((1, 2)))  # step 2^63 - 1: zero gradient, regularized
    assert opt.step == top
    for call in (lambda: opt.update(np.zeros(6)), lambda: opt.update_rows([1], np.zeros((1, 2)))):
        with pytest.raises(capi.CapiError, match="step counter is at its maximum") as e:
            call()
        assert e.value.code == capi.ERR_STATE
    t0 = time.perf_counter()
    got = opt.weights()
    assert time.perf_counter() - t0 < 1.0, "row 2's ~2^63 missed steps were replayed one by one"
    want = start.copy()
    for row, first in ((0, top - 2), (1, top)):
        for k in range(first, top + 1):
            lr = reference_ps.ps_lr(c["lr"], k, policy, c.get("lr_decay_a", 0.0))
            reference_ps.ps_prox(want[row], lr, c["l1"], c["l2"])
    want[2] = 0.0  # l1 drives it to exactly 0 within a few steps
    assert_bits_equal(got, want, policy)
    assert capi.Optimizer.restore(opt.state()).step == top


def test_corrupt_state_is_rejected_never_a_crash():
    opt = capi.Optimizer("momentum", "lr=0.1,l1=0.01", np.ones(6, np.float64), row_width=2)
    opt.update(np.ones(6))
    blob = opt.state()
    codes = set()
    for cut in range(len(blob)):  # every truncation
        with pytest.raises(capi.CapiError) as e:
            capi.Optimizer.restore(blob[:cut])
        codes.add(e.value.code)
    for i in range(len(blob)):  # every single-byte change
        bad = bytearray(blob)
        bad[i] ^= 0x5A
        with pytest.raises(capi.CapiError) as e:
            capi.Optimizer.restore(bytes(bad))
        codes.add(e.value.code)
    with pytest.raises(capi.CapiError, match="header describes"):
        capi.Optimizer.restore(blob + b"\0")
    assert codes == {capi.ERR_STATE}
    # fields checked beyond the checksum (checksum recomputed)
    for off, fmt, value, msg in [(8, "<I", 2, "version 2"), (16, "<I", 9, "optimizer id 9"),
                                 (20, "<I", 7, "unknown dtype 7"), (32, "<q", 4, "row_width"),
                                 (40, "<q", -1, "negative step"),
                                 (56, "<d", -0.1, "lr"), (64, "<d", 1.5, "momentum"),
                                 (72, "<d", 0.5, "beta1 = 0.5 does not apply to momentum"),
                                 (88, "<d", 1e-8, "eps = 1e-08 does not apply"),
                                 (136, "<d", 1.5, "beta power")]:
        bad = bytearray(blob)
        struct.pack_into(fmt, bad, off, value)
        struct.pack_into("<I", bad, len(bad) - 4, zlib.crc32(bytes(bad[:-4])))
        with pytest.raises(capi.CapiError, match=msg) as e:
            capi.Optimizer.restore(bytes(bad))
        assert e.value.code == capi.ERR_STATE
    assert capi.Optimizer.restore(blob).step == 1  # the original still restores
    # a flat parameter's numel whose bytes overflow int64
    flat = bytearray(capi.Optimizer("adam", "lr=0.1", np.ones(4, np.float32)).state())
    struct.pack_into("<q", flat, 24, 2**63 - 1)
    struct.pack_into("<I", flat, len(flat) - 4, zlib.crc32(bytes(flat[:-4])))
    with pytest.raises(capi.CapiError, match=r"the header describes more bytes than an int64 "
                                             r"counts \(numel 9223372036854775807"):
        capi.Optimizer.restore(bytes(flat))
