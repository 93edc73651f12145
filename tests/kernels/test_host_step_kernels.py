"""Every host-moment step kernel against its numpy rule, elementwise and bit for bit, generated
from the kernels' declarations (ops/core/contract.h, as the library reports them) and the rows
of tests/optim_db.py's HOST_STEPS: each entry (in place and delta; float32, bfloat16 and int8
moments), per ISA, float32 and float16 data, odd sizes, one call over many tensors, the thread
count, and a bad tensor in each slot.

A kernel's tensors are built from its declaration: the moments are its slots of one tensor per
parameter other than param, grad and the int8 scales, and every other slot is filled by its
name.  A row gives the numpy rule (float32 moments, reference.py), the constants, and whether
each moment's int8 codes are signed; reference.compact_step stores the moments as each kind.
"""
import numpy as np
import pytest

from ms_optim import _native, aot, reference, testing
from tests.kernels.errors import rejects
from tests.kernels.threads import by_thread_count
from tests.moments import BF16
from tests.optim_db import HOST_STEPS
from tests.sizes import SIZE_PARAMS

KINDS = ("float32", "bfloat16", "int8")
B = reference.Q8_BLOCK
# Sizes around the block (256) and the parallel threshold, so tensor ends, block edges and
# the threads' shares meet in every way.
MULTI_SIZES = [1, B - 1, B, B + 1, 40000, 7, 2 * B + 3, 16383, 70001, 32768, 16385, 250003]


def _entry(rule, kind, delta):
    return f"ms_optim_{rule}{'_q8' if kind == 'int8' else ''}_{'delta' if delta else 'inplace'}"


def _moment_slots(entry):
    """The moment slots of `entry`'s declaration, in order."""
    return [s.name for s in aot.signature(entry) if s.arity == "each" and not s.output
            and s.name not in ("param", "grad") and not s.name.endswith("_scale")]


def _cases():
    """(row, variant name) for every variant of every row."""
    return [pytest.param(row, name, id=f"{row.rule}-{name}")
            for row in HOST_STEPS for name in row.variants]


class State:
    """One tensor: its parameter, its moments stored as `kind` (with their int8 scales) and a
    random generator for its gradients."""

    def __init__(self, row, n, dtype, kind, seed):
        self.row, self.kind = row, kind
        self.rng = np.random.default_rng(seed)
        rng = self.rng
        self.p = rng.standard_normal(n).astype(dtype)
        # magnitudes over 3 decades, so that int8 blocks differ in scale; and 1 in 16
        # elements where every signed moment is zero, where the gradients are zero too
        mag = (10.0 ** (-3 * rng.random(n))).astype(np.float32)
        self.zero = rng.random(n) < 1 / 16
        wide = {}
        for name, signed in row.signed.items():
            if signed:
                x = (rng.standard_normal(n) * 0.1 * mag).astype(np.float32)
                x[self.zero] = 0.0
            else:
                x = (rng.random(n) * 0.01 * mag * mag).astype(np.float32)
            wide[name] = x
        self.moments, self.scales = {}, {}
        for name, x in wide.items():
            if kind == "float32":
                self.moments[name] = x
            elif kind == "bfloat16":
                self.moments[name] = reference.bf16_bits(x).view(BF16)
            else:
                self.moments[name], self.scales[name] = reference.q8_quantize(
                    x, row.signed[name])

    def copy(self):
        other = State.__new__(State)
        other.row, other.kind, other.rng, other.zero = self.row, self.kind, None, self.zero
        other.p = None if self.p is None else self.p.copy()
        other.moments = {k: v.copy() for k, v in self.moments.items()}
        other.scales = {k: v.copy() for k, v in self.scales.items()}
        return other

    def grad(self, dtype):
        """A gradient, zero (of either sign) where the signed moments started at zero."""
        g = (self.rng.standard_normal(self.p.size) * 4).astype(dtype)
        g[self.zero] = np.where(self.rng.random(int(self.zero.sum())) < 0.5, -0.0, 0.0)
        return g

    def assert_equal(self, other, params=True):
        for name, x in self.moments.items():
            view = {1: np.uint8, 2: np.uint16, 4: np.uint32}[x.dtype.itemsize]
            np.testing.assert_array_equal(x.view(view), other.moments[name].view(view),
                                          err_msg=name)
            if name in self.scales:
                np.testing.assert_array_equal(self.scales[name], other.scales[name])
        if params:
            np.testing.assert_array_equal(self.p, other.p)


def _consts(row, variant, t):
    """The constants' values, and the beta powers of step t when the rule takes them."""
    layout, values = row.variants[variant]
    powers = None
    if row.powers:
        powers = (np.float32(values["beta1"]) ** t, np.float32(values["beta2"]) ** t)
    return layout, values, powers


def _tensors(row, variant, states, grads, lr, wd, t, delta, first=0):
    """The entry of one kernel call over `states` at step t, and its tensors by the
    declaration's slot names."""
    kind = states[0].kind
    entry = _entry(row.rule, kind, delta)
    layout, values, powers = _consts(row, variant, t)
    assert set(_moment_slots(entry)) == set(row.signed), entry
    given = dict(param=[s.p for s in states], grad=grads, lr=lr, wd=wd,
                 consts=aot.consts_array(layout, **values),
                 powers=None if powers is None else np.array(powers, np.float32),
                 key=np.array([t, first], np.int32), done=np.ones(1, np.float32),
                 delta=[np.full(g.size, 7, g.dtype) for g in grads])
    for name in row.signed:
        given[name] = [s.moments[name] for s in states]
        given[name + "_scale"] = [s.scales.get(name) for s in states]
    named = {}
    for slot in aot.signature(entry):
        assert given.get(slot.name) is not None, f"{entry}: no tensor for slot {slot.name}"
        named[slot.name] = given[slot.name]
    return entry, named


def _call(row, variant, states, grads, lr, wd, t, delta, first=0):
    """One kernel call over `states` at step t; returns the deltas (delta path)."""
    entry, named = _tensors(row, variant, states, grads, lr, wd, t, delta, first)
    testing.call_kernel(entry, **named)
    if delta:
        return named["delta"]
    assert named["done"][0] == 0
    return None


def _ref(row, variant, state, g, lr, wd, t, delta, index=0):
    """The numpy rule's step t on `state` (parameter `index` of its optimizer), in place."""
    _, values, powers = _consts(row, variant, t)
    names = list(row.signed)
    return reference.compact_step(
        lambda *wide: row.step(state.p, list(wide), g, lr, 0.0 if delta else wd, values,
                               powers, delta),
        [state.moments[n].view(np.uint16) if state.kind == "bfloat16" else state.moments[n]
         for n in names],
        [row.signed[n] for n in names], state.kind,
        [state.scales.get(n) for n in names], reference.q8_tensor_key(t, index))


def test_every_host_step_kernel_has_a_row():
    """Every in-place and delta entry the library declares belongs to a row, and every row's
    four entries are declared."""
    declared = {e for e in _native.aot_kernels() if e.endswith(("_inplace", "_delta"))}
    rows = {_entry(r.rule, kind, delta) for r in HOST_STEPS for kind in ("float32", "int8")
            for delta in (False, True)}
    assert declared == rows


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("n", SIZE_PARAMS)
@pytest.mark.parametrize("delta", [False, True], ids=["inplace", "delta"])
@pytest.mark.parametrize("row, variant", _cases())
def test_kernel_matches_reference(isa, row, variant, kind, dtype, n, delta):
    state = State(row, n, dtype, kind, seed=n)
    ref = state.copy()
    for t in (1, 2, 3):
        g = state.grad(dtype)
        lr, wd = np.array([1e-2 * t], np.float32), np.array([0.3], np.float32)
        got = _call(row, variant, [state], [g], lr, wd, t, delta)
        want = _ref(row, variant, ref, g, lr[0], wd[0], t, delta)
        if delta:
            np.testing.assert_array_equal(got[0], want.astype(dtype))
    state.assert_equal(ref, params=not delta)
    if not delta:
        assert np.any(state.p != State(row, n, dtype, kind, seed=n).p)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("delta", [False, True], ids=["inplace", "delta"])
@pytest.mark.parametrize("row, variant", _cases())
def test_multi_tensor_call_matches_reference(isa, row, variant, kind, delta):
    k = len(MULTI_SIZES)
    states = [State(row, n, np.float32, kind, seed=i) for i, n in enumerate(MULTI_SIZES)]
    refs = [s.copy() for s in states]
    lr = (1e-3 * (1 + np.arange(k))).astype(np.float32)
    wd = np.where(np.arange(k) % 3 == 1, 0.0, 0.1 * (1 + np.arange(k))).astype(np.float32)
    for t in (1, 2):
        grads = [s.grad(np.float32) for s in states]
        outs = _call(row, variant, states, grads, lr, wd, t, delta, first=5)
        for i, (ref, g) in enumerate(zip(refs, grads)):
            want = _ref(row, variant, ref, g, lr[i], wd[i], t, delta, index=5 + i)
            if delta:
                np.testing.assert_array_equal(outs[i], want)
    for state, ref in zip(states, refs):
        state.assert_equal(ref, params=not delta)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("row", HOST_STEPS, ids=[r.rule for r in HOST_STEPS])
def test_bits_do_not_depend_on_the_thread_count(row, kind):
    """Blocks never straddle two threads: 1, 2 and 3 threads give the same bits."""
    variant = next(iter(row.variants))

    def run():
        states = [State(row, n, np.float32, kind, seed=i) for i, n in enumerate(MULTI_SIZES)]
        grads = [s.grad(np.float32) for s in states]
        _call(row, variant, states, grads, np.float32([1e-2]), np.float32([0.1]), 1, False)
        return states

    results = by_thread_count(run)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            a.assert_equal(b)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf / inf
@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("kind", ["float32", "bfloat16"])
@pytest.mark.parametrize("row", HOST_STEPS, ids=[r.rule for r in HOST_STEPS])
def test_a_nan_or_infinite_gradient_makes_its_parameter_nan_alone(isa, row, kind, special):
    """An overflowed gradient shows in its parameter (Lion's sign of an infinite
    interpolation is NaN, as Adam's quotient of infinite moments), and nowhere else."""
    state = State(row, 40, np.float32, kind, seed=3)
    ref = state.copy()
    g = state.grad(np.float32)
    g[[0, 17]] = special
    variant = next(iter(row.variants))
    _call(row, variant, [state], [g], np.float32([1e-2]), np.float32([0.1]), 1, False)
    _ref(row, variant, ref, g, np.float32(1e-2), np.float32(0.1), 1, False)
    assert np.isnan(state.p).nonzero()[0].tolist() == [0, 17]
    state.assert_equal(ref)


def _valid_call(row, kind, delta, sizes=(5, 300)):
    """The entry and tensors, by slot name, of a valid call on two tensors."""
    states = [State(row, n, np.float32, kind, seed=n) for n in sizes]
    return _tensors(row, next(iter(row.variants)), states,
                    [np.ones(n, np.float32) for n in sizes], np.float32([0.1]),
                    np.float32([0.0]), 1, delta)


def _bad_slots():
    """(row, kind, delta, slot) for every slot of every host-step entry."""
    out = []
    for row in HOST_STEPS:
        for kind in ("float32", "int8"):
            for delta in (False, True):
                for slot in aot.signature(_entry(row.rule, kind, delta)):
                    out.append(pytest.param(row, kind, delta, slot.name, id=(
                        f"{_entry(row.rule, kind, delta)}-{slot.name}")))
    return out


@pytest.mark.parametrize("row, kind, delta, slot", _bad_slots())
def test_each_slot_rejects_another_dtype_and_size(row, kind, delta, slot):
    """A tensor of another dtype (float64) in any slot, and of another size (one element less
    in the second tensor of a slot of one per parameter; two more in a slot of one), fails the
    call with the code of its cause and a message naming the slot."""
    entry, call = _valid_call(row, kind, delta)
    testing.call_kernel(entry, **call)
    arity = next(s.arity for s in aot.signature(entry) if s.name == slot)

    def replaced(make):
        other = dict(call)
        if arity == "each":
            other[slot] = list(call[slot])
            other[slot][1] = make(call[slot][1])
        else:
            other[slot] = make(call[slot])
        return other

    rejects(entry, "MSOPT_ERR_DTYPE", "", slot=slot, **replaced(lambda x: x.astype(np.float64)))
    resize = ((lambda x: x[:-1]) if arity == "each" else
              (lambda x: np.concatenate([x, np.zeros(2, x.dtype)])))
    rejects(entry, "MSOPT_ERR_SIZE", "", slot=slot, **replaced(resize))


@pytest.mark.parametrize("row", HOST_STEPS, ids=[r.rule for r in HOST_STEPS])
def test_int8_moments_need_the_q8_entry(row):
    entry, call = _valid_call(row, "int8", False)
    first = _moment_slots(entry)[0]
    plain = {k: v for k, v in call.items() if not k.endswith("_scale") and k != "key"}
    rejects(_entry(row.rule, "float32", False), "MSOPT_ERR_DTYPE", r"must be float32 .*int8",
            slot=first, **plain)
