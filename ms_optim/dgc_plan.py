"""DGCMomentum's plan: which parameters are compressed, how many entries each sends
per warm-up stage, where they sit in the fused exchange buffer, and which stage a
step is in.  Plain Python (no MindSpore), shared by ``dgc.DGCMomentum`` and the
numpy reference (``reference.dgc_k``, ``reference.DGCReference``), so the stage
and k formulas are written once (docs/ALGORITHMS.md §3).
"""

MIN_COMPRESSED_NUMEL = 16384


def stage_index(step, rampup_begin_step, rampup_step, stages):
    """Index into the `stages` warm-up sparsities used at `step` (counted from 0), or None
    before ``rampup_begin_step``:
    ``min(int((step - rampup_begin_step) * stages / rampup_step), stages - 1)``."""
    if step < rampup_begin_step:
        return None
    return min(int((step - rampup_begin_step) * stages / rampup_step), stages - 1)


def selected_k(numel, sparsity):
    """Entries a compressed parameter of `numel` elements sends at `sparsity`: at least one."""
    return max(1, int(numel * (1 - sparsity)))


class DGCPlan:
    """The static layout of one DGCMomentum.

    sizes: elements per parameter; compressible: per parameter, whether its dtype can be
    compressed (float32, float16).  A compressible parameter of at least ``min_numel``
    elements is compressed.

    Attributes: ``is_compressed``, ``comp_ids`` and ``dense_ids`` (parameter indices),
    ``stage_k[s][j]`` (k of compressed parameter j at stage s), ``stage_offsets[s][j]``
    (where its entries start in a worker's block of the fused buffer), ``block[s]`` (the
    block's length) and ``stage_starts[s]`` (the first step of stage s; stages that no step
    reaches share the next one's start).
    """

    def __init__(self, sizes, compressible, sparsity, rampup_begin_step, rampup_step,
                 min_numel=MIN_COMPRESSED_NUMEL):
        self.sizes = tuple(int(n) for n in sizes)
        self.sparsity = tuple(sparsity)
        self.rampup_begin_step, self.rampup_step = rampup_begin_step, rampup_step
        self.is_compressed = tuple(bool(c) and n >= min_numel
                                   for n, c in zip(self.sizes, compressible))
        self.comp_ids = tuple(i for i, c in enumerate(self.is_compressed) if c)
        self.dense_ids = tuple(i for i, c in enumerate(self.is_compressed) if not c)
        self.stage_k = tuple(tuple(selected_k(self.sizes[i], s) for i in self.comp_ids)
                             for s in self.sparsity)
        self.stage_offsets = tuple(tuple(sum(ks[:j]) for j in range(len(ks)))
                                   for ks in self.stage_k)
        self.block = tuple(sum(ks) for ks in self.stage_k)
        self.stage_starts = tuple(self._first_step(s) for s in range(len(self.sparsity)))

    @property
    def stages(self):
        return len(self.sparsity)

    def stage(self, step):
        """Index into `sparsity` used at `step` (counted from 0), or None before compression."""
        return stage_index(step, self.rampup_begin_step, self.rampup_step, self.stages)

    def k(self, numel, step):
        """Entries a compressed parameter of `numel` elements sends at `step` (once compressing)."""
        return selected_k(numel, self.sparsity[self.stage(step)])

    def _first_step(self, s):
        """The first step whose stage is s or later (stage() is non-decreasing in the step)."""
        begin = self.rampup_begin_step
        if s == 0:
            return begin
        t = begin + -(-s * self.rampup_step // self.stages)  # the exact ceiling, then checked
        while t > begin and self.stage(t - 1) >= s:
            t -= 1
        while self.stage(t) < s:
            t += 1
        return t

    def reached(self, s):
        """Whether some step runs stage s (a warm-up shorter than the sparsities skips some)."""
        return s == self.stages - 1 or self.stage_starts[s] < self.stage_starts[s + 1]
