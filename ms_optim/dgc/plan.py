"""The op-level plans of DGCMomentum's step, refined from its ``DGCPlan``
(``ms_optim.dgc.schedule``: what is compressed, k per stage, the fused buffer's
offsets): which parameters each multi-tensor op steps, where each op reads its
gradients, and which stages the step's graph branches to.  Plain Python over
indices; the Cells of ``steps.py`` build their ops from these plans, and take the
tensors at a plan's indices inside their graphs with ``pick``.
"""
from typing import NamedTuple

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


def index_chunks(ids):
    """`ids` cut into about sqrt(len(ids)) consecutive chunks: a graph that builds a tuple
    of one tensor per index grows it chunk by chunk (a small tuple per chunk, then the
    chunks joined), which MindSpore compiles in about half the time of a tuple grown one
    element at a time (its nodes grow with the square of the tuple's length)."""
    ids = tuple(ids)
    width = int(len(ids) ** 0.5) + 1
    return tuple(ids[j:j + width] for j in range(0, len(ids), width))


def index_pick(ids):
    """How ``pick`` builds the tuple of the tensors at the indices `ids` inside a graph:
    (run, chunks), run (first, end) when they are consecutive (one slice of the tuple),
    else None, and chunks the indices as ``index_chunks`` (a plain tuple: a graph reads
    it as a constant)."""
    ids = tuple(ids)
    consecutive = bool(ids) and ids == tuple(range(ids[0], ids[-1] + 1))
    return (ids[0], ids[-1] + 1) if consecutive else None, index_chunks(ids)


def pick(tensors, how):
    """tensors[i] for the indices of `how` (``index_pick``'s), in graph code: one slice of
    the tuple when they are consecutive (every parameter, say), else a tuple grown chunk
    by chunk (a generator expression compiles several times slower; a tuple grown one
    element at a time, in time that grows with the square of its length)."""
    run, chunks = how
    if run is not None:
        return tensors[run[0]:run[1]]
    out = ()
    for chunk in chunks:
        part = ()
        for i in chunk:
            part = part + (tensors[i],)
        out = out + part
    return out


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
