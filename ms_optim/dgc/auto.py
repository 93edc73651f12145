"""DGCMomentum's ``sparsity="auto"``: the run measures its own steps and picks the
sparsity, or stays dense.

From `rampup_begin_step` on, with more than one worker:

1. ``DENSE_STEPS`` steps run dense (every gradient all-reduced, as before compression)
   and ``PROBE_STEPS`` steps at the sparsest of ``SPARSITY_CHOICES``.  Each step reads a
   clock at the same point of its graph (a native op, ``ms_optim_step_clock``, so it
   works inside a compiled train step as from Python), and the interval between two
   readings is a sample of the step that ended: its exchange and update, and the next
   step's forward and backward.  The first step of each kind is not sampled (it may
   include a graph compiling), nor the last dense one; each kind keeps its least sample.
2. On the last probing step the workers gather their samples and take the largest (the
   slowest worker sets the pace), so every worker decides the same.  The step at each
   sparsity is modeled as the probe's plus the extra wire bytes at the rate the two
   measurements imply (``modeled_steps``), and its time to accuracy as that step times
   ``STEP_RATIO``, the steps a sparsity needs as a multiple of dense's.  The choice with
   the least modeled time to accuracy wins; dense wins ties, and whenever the probe's step
   is not shorter than the dense one.
3. The choice is kept in the Parameter ``dgc_auto_choice`` (saved in checkpoints, so a
   resumed run continues it), printed once by every worker, and shown by
   ``DGCMomentum.exchange_stats()``.

With one worker there is nothing to exchange: every step is dense from the start.
"""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore import dtype as mstype
from mindspore.ops import functional as F

from .. import aot
from .density import SPARSITY_CHOICES

# steps run dense, then at the sparsest choice, before the choice
DENSE_STEPS = 3
PROBE_STEPS = 3
# The steps each of SPARSITY_CHOICES needs to reach an accuracy, as a multiple of dense's:
# a model read off the link experiment's runs (benchmarks/README.md, "Steps to accuracy"),
# in which the sparser selections took 1.0 to 2.0 times dense's steps.
STEP_RATIO = (1.0, 1.1, 1.3, 1.4, 1.55, 1.9)
# dgc_auto_choice: still measuring, dense, or an index into SPARSITY_CHOICES
MEASURING, DENSE = -2, -1
CHOICE_NAME = "dgc_auto_choice"
CLOCK_NAME = "dgc_auto_clock"
# the clock's slots: the dense steps' samples, the probe's
_DENSE_SLOT, _PROBE_SLOT, _NO_SLOT = 0, 1, -1


def clock_op():
    """The step clock's op (ops/aot/aot_clock.cpp): clock float64[3], updated in place."""
    f32 = mstype.float32
    return aot.native_op("ms_optim_step_clock", 0,
                         dict(clock=mstype.float64, slot=mstype.int32, after=mstype.int32,
                              best=f32),
                         out_shape=lambda *shapes: [2], out_dtype=lambda *dts: f32,
                         inplace=True)


class AutoSparsity(nn.Cell):
    """The measurements and the choice of ``sparsity="auto"`` (module docstring).

    Args:
        begin (int): The first step that may compress (`rampup_begin_step`).
        nranks (int): The number of workers; with one, the choice is dense from the start.
        stage_bytes (list[float]): Per entry of ``SPARSITY_CHOICES``, the wire bytes one
            worker sends in a step at that sparsity (``wire.exchange_stats``).
        dense_bytes (float): The wire bytes of a dense step.
    """

    def __init__(self, begin, nranks, stage_bytes, dense_bytes):
        super().__init__()
        self.nranks = nranks
        self.measures = nranks > 1
        self.probe = len(SPARSITY_CHOICES) - 1
        self.probe_t = Tensor(self.probe, mstype.int32)
        self.probe_begin = begin + DENSE_STEPS       # the first probing step
        self.choose_begin = self.probe_begin + PROBE_STEPS  # the first step of the choice
        self.decide_step = self.choose_begin - 1
        self.choice = Parameter(Tensor(np.array([MEASURING if self.measures else DENSE],
                                                np.int32)),
                                name=CHOICE_NAME, requires_grad=False)
        self.clock = Parameter(Tensor(np.zeros(3, np.float64)), name=CLOCK_NAME,
                               requires_grad=False)
        self.stage_bytes = tuple(float(b) for b in stage_bytes)
        self.dense_bytes = float(dense_bytes)
        self.bytes_t = Tensor(np.array(self.stage_bytes, np.float32))
        self.ratio_t = Tensor(np.array(STEP_RATIO, np.float32))
        self.sparsity_t = Tensor(np.array((0.0,) + SPARSITY_CHOICES, np.float32))
        self.zero = Tensor(np.zeros(1, np.int32))
        if self.measures:
            self.clock_op = clock_op()
            self.clock_order = aot.call_order("ms_optim_step_clock")
            self.all_gather = ops.AllGather()
        # every worker prints the choice (a graph that differed between the workers could
        # order their collectives differently)
        self.print = ops.Print()

    def slot(self, step):
        """The clock slot of the interval that ends at `step` (a scalar int32 Tensor): that
        of step - 1, when it is a sampled step of its kind."""
        b = self.probe_begin - DENSE_STEPS
        dense = F.logical_and(step >= b + 2, step <= self.probe_begin - 1)
        probe = F.logical_and(step >= self.probe_begin + 1, step <= self.decide_step)
        return F.select(dense, Tensor(_DENSE_SLOT, mstype.int32),
                        F.select(probe, Tensor(_PROBE_SLOT, mstype.int32),
                                 Tensor(_NO_SLOT, mstype.int32))).reshape((1,))

    def tick(self, step, grads):
        """Reads the clock once every gradient of the step is there: float32[2], this
        worker's least dense and probing step so far (0: none yet)."""
        after = F.depend(self.zero, grads)
        return aot.call(self.clock_op, self.clock_order, clock=self.clock,
                        slot=self.slot(step), after=after)

    def modeled_steps(self, best):
        """Per entry of SPARSITY_CHOICES, the modeled step in seconds, from `best`
        (float32[2]: the dense step, the probe's step): the probe's plus its extra wire
        bytes at the rate implied by the two."""
        dense_s, probe_s = best[0], best[1]
        probe_bytes = self.stage_bytes[self.probe]
        per_byte = (dense_s - probe_s) / max(self.dense_bytes - probe_bytes, 1.0)
        return probe_s + per_byte * (self.bytes_t - probe_bytes)

    def decide(self, best):
        """The choice (int32[1]: DENSE or an index into SPARSITY_CHOICES) for the
        measured steps `best` (``modeled_steps``); dense unless both were measured and
        the probe's step is the shorter."""
        dense_s, probe_s = best[0], best[1]
        cost = self.ratio_t * self.modeled_steps(best)
        pick = ops.argmin(cost).astype(mstype.int32)
        wins = F.logical_and(F.logical_and(probe_s > 0, probe_s < dense_s),
                             cost.min() < dense_s)
        return F.select(wins, pick, Tensor(DENSE, mstype.int32)).reshape((1,))

    def update(self, step, best):
        """On the last probing step (`best` ordered after the step's exchanges): every
        worker's slowest measurements, the choice, kept in ``dgc_auto_choice`` and
        printed."""
        done = self.zero
        if step == self.decide_step:
            gathered = self.all_gather(best.reshape((1, 2))).max(axis=0)
            choice = self.decide(gathered)
            done = F.depend(done, F.assign(self.choice, choice))
            done = F.depend(done, self.print(
                "DGCMomentum sparsity='auto': least step [dense, sparsity "
                f"{SPARSITY_CHOICES[self.probe]}] (s):", gathered,
                "; sparsity chosen (0.0: dense):", self.sparsity_t[choice + 1]))
        return done

    def report(self):
        """The choice and its measurements, read from the Parameters (exchange_stats)."""
        choice = int(self.choice.asnumpy().reshape(-1)[0])
        best = self.clock.asnumpy()[1:].astype(np.float32)
        out = {"decided": choice != MEASURING, "step": self.decide_step,
               "sparsity": (None if choice < 0 else SPARSITY_CHOICES[choice]),
               "dense_step_s": float(best[0]) or None, "probe_step_s": float(best[1]) or None}
        if choice != MEASURING and best.all():
            out["modeled_step_s"] = dict(zip(SPARSITY_CHOICES, self.modeled_steps(
                Tensor(best)).asnumpy().tolist()))
        return out
