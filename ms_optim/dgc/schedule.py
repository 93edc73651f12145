"""DGCMomentum's plan: which parameters are compressed, how many entries each sends
per warm-up stage, where they sit in the fused exchange buffer, and which stage a
step is in.  Plain Python (no MindSpore).  The numpy reference writes the stage and
k formulas apart (``reference.dgc_k``), and a test holds the two together
(docs/dgc.md).
"""

MIN_COMPRESSED_NUMEL = 16384


def compressed_alone(sizes, compressible, min_numel=MIN_COMPRESSED_NUMEL):
    """Per parameter, whether it is compressed on its own: `compressible` (its dtype, and
    not sent dense) and of at least `min_numel` elements."""
    return tuple(bool(c) and int(n) >= min_numel for n, c in zip(sizes, compressible))


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


def bucket_stage_sparsity(stage_sparsity, bucket_sparsity):
    """The sparsity of the small parameters' bucket at a stage of `stage_sparsity`: its own
    `bucket_sparsity`, never sparser than the large parameters' stage."""
    return min(stage_sparsity, bucket_sparsity)


def union_k(k, nranks):
    """Indices each of `nranks` workers proposes for a parameter that selects `k` entries,
    with the union exchange (every worker's proposals taken together): at least one."""
    return max(1, k // nranks)


class DGCPlan:
    """The static layout of one DGCMomentum: which parameters are compressed, how many
    entries each sends per warm-up stage, where they sit in the fused exchange buffer, and
    which stage a step is in.

    Plain Python (no MindSpore): ``DGCMomentum`` builds one from its arguments (as
    ``opt.plan``); the stage and k formulas are this module's :func:`stage_index` and
    :func:`selected_k`, which the numpy reference uses too.  A parameter is compressed
    when its dtype can be (float32, float16) and it has at least `min_numel` elements.
    At step ``t`` (counted from 0) the stage is
    ``min(int((t - rampup_begin_step) * len(sparsity) / rampup_step), len(sparsity) - 1)``
    (None before `rampup_begin_step`), and a compressed parameter of ``numel`` elements
    sends ``k = max(1, int(numel * (1 - sparsity[stage])))`` entries.

    Args:
        sizes (Iterable[int]): The number of elements of each parameter.
        compressible (Iterable[bool]): Per parameter, whether its dtype can be compressed.
        sparsity (Iterable[float]): The warm-up sparsities.
        rampup_begin_step (int): The first step that compresses.
        rampup_step (int): The number of steps over which the sparsities are spread.
        min_numel (int, optional): The smallest compressed parameter.  Default: ``16384``.
        bucket_sparsity (float, optional): The sparsity of the bucket of smaller
            parameters, or None to send them dense.  Default: ``None``.

    The arguments are not validated here: DGCMomentum checks them first.

    Attributes:
        is_compressed (tuple[bool]): Per parameter, whether it is compressed.
        comp_ids, dense_ids (tuple[int]): Indices of the compressed parameters and of
            those sent dense at every step.
        bucket_ids (tuple[int]): Indices of the parameters in the bucket (empty without a
            `bucket_sparsity`).
        bucket_offsets (tuple[int]): Where each starts in the bucket's concatenation.
        bucket_numel (int): The bucket's elements.
        bucket_k (tuple[int]): ``bucket_k[s]``, the entries the bucket selects at stage s
            (empty without a bucket).
        stage_k (tuple[tuple[int]]): ``stage_k[s][j]``, k of compressed parameter j at
            stage s.
        stage_offsets (tuple[tuple[int]]): ``stage_offsets[s][j]``, where its entries
            start in one worker's block of the fused buffer at stage s.
        block (tuple[int]): ``block[s]``, the length of one worker's block at stage s.
        stage_starts (tuple[int]): ``stage_starts[s]``, the first step of stage s; stages
            that no step reaches share the next one's start (see :meth:`reached`).

    Supported Platforms:
        ``CPU`` ``GPU`` ``Ascend``

        Plain Python, independent of the device.

    Examples:
        >>> from ms_optim.dgc.schedule import DGCPlan
        >>> plan = DGCPlan(sizes=[20000, 10, 30000], compressible=[True, True, True],
        ...                sparsity=[0.75, 0.999], rampup_begin_step=2, rampup_step=4)
        >>> plan.comp_ids, plan.dense_ids  # the 10-element parameter goes dense
        ((0, 2), (1,))
        >>> [plan.stage(t) for t in range(7)]
        [None, None, 0, 0, 1, 1, 1]
        >>> plan.stage_k, plan.stage_offsets, plan.block
        (((5000, 7500), (20, 30)), ((0, 5000), (0, 20)), (12500, 50))
        >>> plan.stage_starts
        (2, 4)
        >>> plan = DGCPlan(sizes=[20000, 10, 30], compressible=[True, True, True],
        ...                sparsity=[0.75, 0.999], rampup_begin_step=2, rampup_step=4,
        ...                bucket_sparsity=0.875)  # the small ones as one bucket of 40
        >>> plan.dense_ids, plan.bucket_ids, plan.bucket_offsets, plan.bucket_k
        ((), (1, 2), (0, 10), (10, 5))
    """

    def __init__(self, sizes, compressible, sparsity, rampup_begin_step, rampup_step,
                 min_numel=MIN_COMPRESSED_NUMEL, bucket_sparsity=None):
        self.sizes = tuple(int(n) for n in sizes)
        compressible = tuple(bool(c) for c in compressible)
        self.sparsity = tuple(sparsity)
        self.rampup_begin_step, self.rampup_step = rampup_begin_step, rampup_step
        self.is_compressed = compressed_alone(self.sizes, compressible, min_numel)
        self.bucket_sparsity = bucket_sparsity
        self.in_bucket = tuple(bucket_sparsity is not None and bool(c) and 0 < n < min_numel
                               for n, c in zip(self.sizes, compressible))
        self.comp_ids = tuple(i for i, c in enumerate(self.is_compressed) if c)
        self.bucket_ids = tuple(i for i, b in enumerate(self.in_bucket) if b)
        self.dense_ids = tuple(i for i, (c, b) in enumerate(zip(self.is_compressed,
                                                                 self.in_bucket))
                               if not (c or b))
        bucket_sizes = [self.sizes[i] for i in self.bucket_ids]
        self.bucket_offsets = tuple(sum(bucket_sizes[:j]) for j in range(len(bucket_sizes)))
        self.bucket_numel = sum(bucket_sizes)
        self.bucket_k = tuple(
            selected_k(self.bucket_numel, bucket_stage_sparsity(s, bucket_sparsity))
            for s in self.sparsity) if self.bucket_ids else ()
        self.stage_k = tuple(tuple(selected_k(self.sizes[i], s) for i in self.comp_ids)
                             for s in self.sparsity)
        self.stage_offsets = tuple(tuple(sum(ks[:j]) for j in range(len(ks)))
                                   for ks in self.stage_k)
        self.block = tuple(sum(ks) for ks in self.stage_k)
        self.stage_starts = tuple(self._first_step(s) for s in range(len(self.sparsity)))

    @property
    def stages(self):
        """The number of warm-up stages, ``len(sparsity)``."""
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
