"""DGCMomentum's ``sparsity="auto"``: the run measures its own steps and its link, and
picks the sparsity, or stays dense.

From `rampup_begin_step` on, with more than one worker, ``PROBE_STEPS`` steps run at the
sparsest of ``SPARSITY_CHOICES`` (0.999, a few milliseconds of exchange), and measure, with
a clock read at fixed points of the step's graph (a native op, ``ms_optim_step_clock``, so
it works inside a compiled train step as from Python):

- the step's compute: from the end of one step's update to the start of the next step's
  exchange (the rest of the train step, the Python loop, the next forward and backward);
- the probe's exchange and update: from its gradients to the end of its update;
- the link: after the update, an AllReduce of zeros of ``chunk_elements[0]`` float32 (the
  first probing steps) and, on the last one, of 4 times as many, timed alone.

Each kind keeps its least sample, which leaves out a sample that holds a graph compiling
(the first steps of a branch called from Python).  On the last probing step the workers
gather their samples, so every worker decides the same (``AutoSparsity.decide``): of the
compute and the probe's step the largest (the slowest worker sets the pace), of each chunk
the least (a worker that reaches the AllReduce first also times its wait for the others;
the last to reach it times the link alone).  The larger chunk runs only once the smaller
one's time is agreed, and only where it would take at most as long as the probing steps
together (``large_chunk_pays``); on a slower link its time is the smaller one's scaled by
the bytes (no latency: there the bytes take all the time), and a run at 100 Mbit/s does
not spend most of a second on it.

1. the two chunks give the link's latency and seconds per wire byte (``wire.py``'s bytes of
   an AllReduce), and a dense step is modeled as the compute plus the dense exchange's wire
   bytes at that rate;
2. a step at each sparsity as the probe's step plus its extra wire bytes at that rate;
3. its time to accuracy as that step times ``STEP_RATIO``, the steps each sparsity needs
   against dense's.

The least modeled time wins; dense wins where no sparsity beats its modeled step, and when a
measurement is missing.  No dense step is run to measure: on a slow link one costs more than
a whole compressed run's start.  Choosing dense, the residuals the probe left are flushed
(``steps.ResidualFlush``).  The choice is kept in the Parameter ``dgc_auto_choice`` (saved in
checkpoints, so a resumed run continues it), printed once by every worker, and shown by
``DGCMomentum.exchange_stats()``.  With one worker there is nothing to exchange: every step
is dense from the start.

Without `dense_params`, the optimizer also sends one parameter dense on every step
(``dense_head``): the last weight, where it is compressible and holds at most
``HEAD_SHARE`` of the compressible elements, as a classifier's last layer does.
"""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore import dtype as mstype
from mindspore.ops import functional as F

from .. import aot
from . import wire
from .density import SPARSITY_CHOICES

# steps at the sparsest choice that measure, before the choice
PROBE_STEPS = 3
# The steps each of SPARSITY_CHOICES needs to reach an accuracy, as a multiple of dense's:
# a model read off the link experiment's runs (benchmarks/README.md, "Steps to accuracy"),
# in which the sparser selections took 1.0 to 2.0 times dense's steps.
STEP_RATIO = (1.0, 1.1, 1.3, 1.4, 1.55, 1.9)
# With sparsity="auto" and no dense_params, the last weight (the last parameter of two or
# more dimensions: a classifier's last layer, which trains in fewer steps sent whole, as the
# hand recipe's dense_params sends it) is sent dense when it is compressible and holds at
# most this share of the compressible elements.  Between two workers its dense AllReduce
# then sends at most twice what the sparsest choice (0.999) sends for all of them: 4 bytes
# an element against 8 bytes an entry of their 0.1%.
HEAD_SHARE = 0.004
# the link's smaller AllReduce: a 64th of the dense gradient, at least this many floats
MIN_CHUNK = 65536
# dgc_auto_choice: still measuring, dense, or an index into SPARSITY_CHOICES
MEASURING, DENSE = -2, -1
CHOICE_NAME = "dgc_auto_choice"
CLOCK_NAME = "dgc_auto_clock"
# the clock's slots: compute between steps, the probe's exchange and update, the two chunks
_COMPUTE, _PROBE, _CHUNK1, _CHUNK2 = 0, 1, 2, 3
_SLOTS = 4
_NO_SLOT = -1


def dense_head(ndims, sizes, compressible):
    """The index of the parameter that ``sparsity="auto"`` sends dense when the caller names
    none (`dense_params` None), or None: the last weight (the last of two or more dimensions
    by `ndims`, in the optimizer's parameter order) when it is `compressible`, another one is
    too, and it holds at most HEAD_SHARE of their elements (by `sizes`)."""
    weights = [i for i, n in enumerate(ndims) if n >= 2]
    if not weights or not compressible[weights[-1]]:
        return None
    last = weights[-1]
    total = sum(n for n, c in zip(sizes, compressible) if c)
    if total == sizes[last] or sizes[last] > HEAD_SHARE * total:
        return None
    return last


def clock_op():
    """The step clock's op (ops/aot/aot_clock.cpp): clock float64[1 + 4], in place."""
    f32 = mstype.float32
    return aot.native_op("ms_optim_step_clock", 0,
                         dict(clock=mstype.float64, slot=mstype.int32, after=mstype.int32,
                              best=f32),
                         out_shape=lambda *shapes: [_SLOTS], out_dtype=lambda *dts: f32,
                         inplace=True)


class AutoSparsity(nn.Cell):
    """The measurements and the choice of ``sparsity="auto"`` (module docstring).

    Args:
        begin (int): The first step that may compress (`rampup_begin_step`).
        nranks (int): The number of workers; with one, the choice is dense from the start.
        stage_bytes (list[float]): Per entry of ``SPARSITY_CHOICES``, the wire bytes one
            worker sends in a step at that sparsity (``wire.exchange_stats``).
        dense_bytes (float): The wire bytes of a dense step.
        dense_elements (int): The elements a dense step all-reduces (the chunks' scale).
    """

    def __init__(self, begin, nranks, stage_bytes, dense_bytes, dense_elements):
        super().__init__()
        self.measures = nranks > 1
        self.probe = len(SPARSITY_CHOICES) - 1
        self.dense_t = Tensor(np.array([DENSE], np.int32))
        self.probe_begin = begin
        self.choose_begin = begin + PROBE_STEPS  # the first step of the choice
        self.decide_step = self.choose_begin - 1
        self.choice = Parameter(Tensor(np.array([MEASURING if self.measures else DENSE],
                                                np.int32)),
                                name=CHOICE_NAME, requires_grad=False)
        self.clock = Parameter(Tensor(np.zeros(1 + _SLOTS, np.float64)), name=CLOCK_NAME,
                               requires_grad=False)
        self.stage_bytes = tuple(float(b) for b in stage_bytes)
        self.dense_bytes = float(dense_bytes)
        small = max(MIN_CHUNK, int(dense_elements) // 64)
        self.chunk_elements = (small, 4 * small)
        self.chunk_scale = float(self.chunk_elements[1] / self.chunk_elements[0])
        self.chunk_bytes = tuple(wire.allreduce_wire_bytes(wire.FLOAT32_BYTES * n, nranks)
                                 for n in self.chunk_elements)
        self.bytes_t = Tensor(np.array(self.stage_bytes, np.float32))
        self.ratio_t = Tensor(np.array(STEP_RATIO, np.float32))
        self.sparsity_t = Tensor(np.array((0.0,) + SPARSITY_CHOICES, np.float32))
        self.zero = Tensor(np.zeros(1, np.int32))
        # every worker prints the choice (a graph that differed between the workers could
        # order their collectives differently)
        self.print = ops.Print()
        if self.measures:
            self.clock_op = clock_op()
            self.clock_call = aot.caller("ms_optim_step_clock")
            self.all_gather = ops.AllGather()
            self.chunk_reduce = ops.AllReduce()
            self.chunks = tuple(Tensor(np.zeros(n, np.float32)) for n in self.chunk_elements)
            self.chunk_slots = tuple(Tensor(np.array([s], np.int32)) for s in (_CHUNK1, _CHUNK2))

    def branch(self, step):
        """The branch of `step` as the host sees it, with one read of the choice: (the
        index into SPARSITY_CHOICES, or None for a dense step; whether the step leaves the
        probe for dense steps, its residuals flushed: the first step after a dense choice,
        or any step past the probe of a state that never chose)."""
        if not self.measures or step < self.probe_begin:  # one worker: dense
            return None, False
        if step < self.choose_begin:
            return self.probe, False
        choice = int(self.choice.asnumpy().reshape(-1)[0])
        if choice >= 0:
            return choice, False
        return None, step == self.choose_begin or choice == MEASURING

    def _slot(self, step, slot, first, last):
        """`slot` (a scalar int32 Tensor of shape [1]) for steps first..last, else none."""
        inside = F.logical_and(step >= first, step <= last)
        return F.select(inside, Tensor(slot, mstype.int32),
                        Tensor(_NO_SLOT, mstype.int32)).reshape((1,))

    def _read(self, slot, after):
        """Reads the clock once `after` is done, the interval since the last reading going to
        `slot`: float32[4], this worker's least samples so far (0: none yet)."""
        return self.clock_call(self.clock_op, clock=self.clock, slot=slot,
                               after=F.depend(self.zero, after))

    def start(self, step, grads):
        """At the step's start, once its gradients are there: the compute since the last
        step's update ended (from the second probing step)."""
        return self._read(self._slot(step, _COMPUTE, self.probe_begin + 1, self.decide_step),
                          grads)

    def end(self, step, done):
        """At the end of the step's update: the probe's exchange and update, then the link's
        chunk timed alone; the measurements (float32[4])."""
        best = self._read(self._slot(step, _PROBE, self.probe_begin, self.decide_step), done)
        if step >= self.probe_begin and step < self.decide_step:
            summed = self.chunk_reduce(F.depend(self.chunks[0], best))
            best = self._read(self.chunk_slots[0], summed)
        return best

    def large_chunk_pays(self, measured):
        """Whether the larger chunk runs, from the workers' `measured` (float32[4], the
        larger chunk's slot not used): where, at the smaller chunk's seconds per element, it
        would take at most as long as the probing steps (compute and exchange) together."""
        expected = measured[_CHUNK1] * self.chunk_scale
        return expected <= PROBE_STEPS * (measured[_COMPUTE] + measured[_PROBE])

    def without_large_chunk(self, measured):
        """`measured` with the larger chunk's time taken as the smaller one's scaled by the
        bytes: the chunks' line through the origin (no latency), as on a link whose bytes
        take all of the smaller chunk's time."""
        return ops.concat((measured[:_CHUNK2], measured[_CHUNK1:_CHUNK2] * self.chunk_scale))

    def _link(self, measured):
        """The workers' `measured` with the larger chunk's time: timed (its least over the
        workers) where ``large_chunk_pays``, the same on every worker, else
        ``without_large_chunk``."""
        if self.large_chunk_pays(measured):
            summed = self.chunk_reduce(F.depend(self.chunks[1], measured))
            mine = self._read(self.chunk_slots[1], summed)
            every = self.combine(self.all_gather(mine.reshape((1, _SLOTS))))
            return ops.concat((measured[:_CHUNK2], every[_CHUNK2:]))
        return self.without_large_chunk(measured)

    def modeled_steps(self, best):
        """(the dense step, per entry of SPARSITY_CHOICES the step) in seconds, modeled from
        `best` (float32[4]: compute, the probe's exchange and update, the two chunks): the
        chunks' line through latency and seconds per wire byte prices the bytes."""
        compute, probe, small, large = best[0], best[1], best[2], best[3]
        per_byte = ops.maximum(large - small, 0.0) / (self.chunk_bytes[1] - self.chunk_bytes[0])
        latency = ops.maximum(small - per_byte * self.chunk_bytes[0], 0.0)
        dense = compute + latency + per_byte * self.dense_bytes
        probe_bytes = self.stage_bytes[self.probe]
        return dense, compute + probe + per_byte * (self.bytes_t - probe_bytes)

    def decide(self, best):
        """The choice (int32[1]: DENSE or an index into SPARSITY_CHOICES) for the measured
        `best` (``modeled_steps``): the least modeled step times STEP_RATIO, if below the
        modeled dense step; dense unless every measurement is there."""
        dense, steps = self.modeled_steps(best)
        cost = self.ratio_t * steps
        pick = ops.argmin(cost).astype(mstype.int32)
        wins = F.logical_and(best.min() > 0, cost.min() < dense)
        return F.select(wins, pick, Tensor(DENSE, mstype.int32)).reshape((1,))

    @staticmethod
    def combine(gathered):
        """The measurements every worker decides on, from all of theirs (float32[R, 4]): the
        largest compute and probe step (the slowest worker sets the pace) and the least of
        each chunk (the link without a worker's wait for the others)."""
        slowest, least = gathered.max(axis=0), gathered.min(axis=0)
        return ops.concat((slowest[:_CHUNK1], least[_CHUNK1:]))

    def update(self, step, best):
        """On the last probing step (`best` from ``end``): every worker's measurements
        (``combine``), the choice, kept in ``dgc_auto_choice`` and printed."""
        done = self.zero
        if step == self.decide_step:
            gathered = self._link(self.combine(self.all_gather(best.reshape((1, _SLOTS)))))
            choice = self.decide(gathered)
            done = F.depend(done, F.assign(self.choice, choice))
            done = F.depend(done, self.print(
                "DGCMomentum sparsity='auto': measured [compute, exchange and update at "
                f"sparsity {SPARSITY_CHOICES[self.probe]}, AllReduce of "
                f"{self.chunk_elements[0]} and {self.chunk_elements[1]} floats (the larger "
                f"scaled from the smaller where it would take longer than the probe)] (s):",
                gathered, "; sparsity chosen (0.0: dense):", self.sparsity_t[choice + 1]))
        return done

    def report(self):
        """The choice and this worker's measurements, read from the Parameters
        (exchange_stats)."""
        choice = int(self.choice.asnumpy().reshape(-1)[0])
        best = self.clock.asnumpy()[1:].astype(np.float32)
        names = ("compute_s", "probe_exchange_s", "chunk_small_s", "chunk_large_s")
        out = {"decided": choice != MEASURING, "step": self.decide_step,
               "sparsity": None if choice < 0 else SPARSITY_CHOICES[choice],
               **{name: (float(v) or None) for name, v in zip(names, best)}}
        if choice != MEASURING and best[:_CHUNK2].all() and not best[_CHUNK2]:
            best = self.without_large_chunk(Tensor(best)).asnumpy()  # the larger did not run
        if choice != MEASURING and best.all():
            dense, steps = self.modeled_steps(Tensor(best))
            out["modeled_dense_step_s"] = float(dense.asnumpy())
            out["modeled_step_s"] = dict(zip(SPARSITY_CHOICES, steps.asnumpy().tolist()))
        return out
