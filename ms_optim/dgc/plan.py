"""The op-level plans of DGCMomentum's step, refined from its ``DGCPlan``
(``ms_optim.dgc.schedule``: what is compressed, k per stage, the fused buffer's
offsets): which parameters each multi-tensor op steps, where each op reads its
gradients, and which stages the step's graph branches to.  Plain Python over
indices; the Cells of ``steps.py`` build their ops from these plans, and inside their
graphs take the tensors at a plan's indices with ``pick``, and join tensors into one
buffer and cut it back with ``flatten`` and ``cut`` (assigned with ``assign_each``).
"""
from typing import NamedTuple

from mindspore import ops
from mindspore.ops import composite as C
from mindspore.ops import functional as F
from mindspore.ops.auto_generate import SplitWithSize

from ..aot import buckets
from .schedule import union_k


class MomentumRun(NamedTuple):
    """Positions ``lo:hi`` of a momentum group that one native momentum op steps."""
    lo: int
    hi: int
    sources: tuple  # per parameter of the run, its gradient's index in the op's input


class MomentumGroup(NamedTuple):
    """The dense momentum's plan for the parameters `ids`.

    The gradients come from the whole tuple of local gradients with one worker,
    else from the dense exchange's output (in the order of `ids`): ``grad_ids``
    names the parameters whose gradients that tuple holds, and a source is an
    index into it.  The runs of parameters that can take the native op (their
    residual u is float32: float32 parameters and widened float16 ones, with
    impl="native") are stepped in buckets of contiguous positions; the others
    (float16 and float64 parameters below the compression size, every parameter
    with impl="ops") step in graph code.
    """
    ids: tuple       # the parameters, as indices into the optimizer's parameters
    runs: tuple      # a MomentumRun per native op
    others: tuple    # (position in ids, source) of each parameter stepped in graph code
    grad_ids: tuple  # the parameters whose gradients the sources index


def index_pick(ids):
    """How ``pick`` builds the tuple of the tensors at the indices `ids` inside a graph:
    (run, ids), run (first, end) when they are consecutive (one slice of the tuple), else
    None (a plain tuple: a graph reads it as a constant)."""
    ids = tuple(ids)
    consecutive = bool(ids) and ids == tuple(range(ids[0], ids[-1] + 1))
    return (ids[0], ids[-1] + 1) if consecutive else None, ids


# The tuples of one tensor per parameter are built in graph code by one Map each, not by
# a loop: MindSpore evaluates a tuple grown in a loop one call deeper per element (a model
# of a few hundred tensors passes its call-depth limit), in time that grows with the
# square of the tuple's length.
_item = C.MultitypeFuncGraph("ms_optim_dgc_item")
_flat = C.MultitypeFuncGraph("ms_optim_dgc_flat")
_part = C.MultitypeFuncGraph("ms_optim_dgc_part")
_map = C.Map()
# (not exported by mindspore.ops in 2.10; ops.split makes a Slice per part)
_split = SplitWithSize()


@_item.register("Tuple", "Number")
def _item_of(tensors, i):
    """tensors[i], an element of ``pick``'s Map."""
    return tensors[i]


@_flat.register("TypeType", "Tensor")
def _flat_of(dtype, t):
    """t as a vector of `dtype`, an element of ``flatten``'s Map."""
    return F.cast(t, dtype).reshape(-1)


@_part.register("Tensor", "Tensor")
def _part_of(part, like):
    """A part of a cut vector in the shape and dtype of `like`, an element of ``cut``'s Map."""
    return F.cast(part.reshape(F.shape(like)), F.dtype(like))


def pick(tensors, how):
    """tensors[i] for the indices of `how` (``index_pick``'s), in graph code: one slice of
    the tuple when they are consecutive (every parameter, say), else one Map over the
    indices."""
    run, ids = how
    if run is not None:
        return tensors[run[0]:run[1]]
    if not ids:
        return ()
    return _map(F.partial(_item, tensors), ids)


def flatten(tensors, dtype):
    """`tensors` as one vector of `dtype`, each reshaped to a vector, in their order."""
    return ops.concat(_map(F.partial(_flat, dtype), tensors))


# The most parts one split makes in ``cut``: its compilation grows faster than its parts
# (MindSpore passes its call-depth limit at a few hundred)
CUT_PARTS = 64


def cut_plan(sizes):
    """``cut``'s plan of a vector made of parts of `sizes`, in order: (the sizes of its
    chunks of at most CUT_PARTS parts, each chunk's part sizes)."""
    sizes = tuple(int(n) for n in sizes)
    chunks = tuple(sizes[lo:lo + CUT_PARTS] for lo in range(0, len(sizes), CUT_PARTS))
    return tuple(sum(c) for c in chunks), chunks


def cut(flat, like, plan):
    """``flatten``'s inverse: `flat` cut into the parts of ``cut_plan``'s `plan` (its sizes
    those of the tensors of `like`, in order), each in its tensor's shape and dtype: one
    SplitWithSize op into chunks, then one per chunk.  (A Slice per part, mapped, costs
    MindSpore about 10 ms of compilation per part: it specializes the mapped function for
    each part's constant offset and size.)"""
    chunk_sizes, chunks = plan
    if not chunks:
        return ()
    if len(chunks) == 1:
        return _map(_part, _split(flat, chunks[0], 0), like)
    parts = _split(flat, chunk_sizes, 0)
    out = ()
    for c in range(len(chunks)):
        lo = c * CUT_PARTS
        out = out + _map(_part, _split(parts[c], chunks[c], 0),
                         like[lo:lo + len(chunks[c])])
    return out


def assign_each(targets, values):
    """``F.assign(targets[j], values[j])`` for every j, in graph code: the assigns' outputs."""
    return _map(F.assign, targets, values)


def momentum_group(ids, native, nranks, num_params):
    """The MomentumGroup of the parameters `ids` (`native[j]`: whether the parameter at
    position j takes the native op) among `num_params` parameters and `nranks` workers."""
    ids = tuple(ids)
    grad_ids = tuple(range(num_params)) if nranks == 1 else ids
    sources = ids if nranks == 1 else tuple(range(len(ids)))
    runs, others = [], []
    for lo, hi in buckets(native):
        if native[lo]:
            runs.append(MomentumRun(lo, hi, sources[lo:hi]))
        else:
            others.extend((j, sources[j]) for j in range(lo, hi))
    return MomentumGroup(ids, tuple(runs), tuple(others), grad_ids)


class Entries(NamedTuple):
    """What one worker contributes to a stage's exchange buffer: ``stage_k[s][j]`` entries
    of compressed parameter j at stage s (the plan's k; with the union exchange
    ``union_k(k, nranks)`` indices), starting at ``stage_offsets[s][j]`` in its block of
    ``block[s]``; ``blocks[s]``, the blocks the applied buffer holds (the workers', or one
    with the leader exchange's means)."""
    stage_k: tuple
    stage_offsets: tuple
    block: tuple
    blocks: tuple


def stage_entries(plan, stage_exchange, nranks):
    """The Entries of `plan` (a DGCPlan) whose stages cross `nranks` workers as
    `stage_exchange` says."""
    stage_k = tuple(tuple(union_k(k, nranks) for k in ks) if ex == "union" else ks
                    for ks, ex in zip(plan.stage_k, stage_exchange))
    return Entries(stage_k=stage_k,
                   stage_offsets=tuple(tuple(sum(ks[:j]) for j in range(len(ks)))
                                       for ks in stage_k),
                   block=tuple(sum(ks) for ks in stage_k),
                   blocks=tuple(1 if ex == "leader" else nranks for ex in stage_exchange))


def applied_entries(ks, exchange, nranks):
    """The entries a stage applies among `nranks` workers, its parameters selecting `ks`:
    their sum, or with the union exchange every worker's ``union_k(k, nranks)`` proposals
    per parameter (``DGCMomentum.exchange_stats``' `selected`)."""
    if exchange == "union":
        return sum(nranks * union_k(k, nranks) for k in ks)
    return sum(ks)


class SparseBuckets(NamedTuple):
    """The native sparse step's buckets, as positions among the compressed parameters.

    Per stage, one select op (or propose and take ops) per ``select`` bucket (their
    residuals and gradients are float32 whatever the parameter's dtype); their outputs
    side by side are this worker's block of the fused exchange buffer.  One apply op per
    ``apply`` bucket (parameters of one dtype).  ``select_ks[s][b]`` are the k of select
    bucket b at stage s, ``take_layouts[s][b]`` its layout input of the take;
    ``apply_layouts[s][b]`` the layout input of apply bucket b at stage s: (blocks in the
    exchanged buffer, the bucket's offsets in a block, its k).
    """
    select: tuple
    apply: tuple
    select_ks: tuple
    take_layouts: tuple
    apply_layouts: tuple


def sparse_buckets(entries, comp_dtypes):
    """The SparseBuckets of `entries` (an Entries) whose compressed parameters have the
    dtypes `comp_dtypes`."""
    select = buckets((True,) * len(comp_dtypes))
    apply = buckets(tuple(comp_dtypes))

    def layouts(ranges):
        return tuple(tuple((r,) + offs[lo:hi] + ks[lo:hi] for lo, hi in ranges)
                     for r, offs, ks in zip(entries.blocks, entries.stage_offsets,
                                            entries.stage_k))

    return SparseBuckets(
        select=select, apply=apply,
        select_ks=tuple(tuple(ks[lo:hi] for lo, hi in select) for ks in entries.stage_k),
        take_layouts=layouts(select), apply_layouts=layouts(apply))


def stage_branches(plan):
    """The graph's stage branches: (stage, first step) for the stages of `plan` (a DGCPlan)
    that some step reaches; each runs until the next one's first step."""
    return tuple((s, plan.stage_starts[s]) for s in range(plan.stages) if plan.reached(s))
