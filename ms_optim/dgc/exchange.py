"""What crosses workers in DGCMomentum, and nothing else does.

- ``SparseExchange``: every compressed parameter's selection (int32 indices,
  float32 values) is concatenated into one index buffer and one value buffer
  per step, and each is all-gathered once (rank order).  Parameter j of
  worker r sits at ``r * L + offset_j`` (L = the buffer length).
- ``DenseExchange``: the gradients that go dense are flattened into one
  float32 buffer, all-reduced (sum) once, divided by the number of workers and
  split back.  DGC's sparse stages can use it too: each worker scatters its
  selections into zeros and the sum is the same scatter-add as the gathered
  path's (``wire.choose_sparse_exchange`` picks the cheaper of the two per
  stage).
- ``SharedExchange``: every worker takes its values at shared indices, the
  leader's (``step % N``; its fused index buffer broadcast) or every worker's
  proposals (the fused index buffers all-gathered, each of max(1, k // N)
  entries per parameter), and the values there are all-reduced (sum).  What a
  worker sends does not grow with the number of workers (for the union, while
  every parameter's k is at least N).
- ``ReplicaSync``: before anything else is exchanged, every worker's model
  signature, step and optimizer state (the world size it was saved by, a
  digest of its residual kinds) are all-gathered and compared (a mismatched
  worker fails with a clear error instead of hanging in, or corrupting, a
  collective, and so does every other worker).  On
  the first step a digest of every worker's parameters is compared too, and
  rank 0's parameters are broadcast only when the digests differ.

The bytes these collectives put on the wire are ``wire.py``'s model.

With one worker (no ``mindspore.communication.init()``, or a world of 1)
nothing is communicated: the buffers are still built, so their sizes are the
ones a worker would send.
"""
import os
import zlib
from typing import NamedTuple

import numpy as np
from mindspore import Tensor, context, nn, ops
from mindspore import dtype as mstype
from mindspore.ops import functional as F
from mindspore.ops.primitive import constexpr

from .. import aot
from .plan import assign_each, cut, cut_plan, flatten, index_pick, pick


def _initialized():
    """Whether mindspore.communication.init() has run in this process (before it,
    MindSpore's get_group_size and get_rank answer the RANK_SIZE and RANK_ID that msrun
    exports, a world that nothing can be sent to yet)."""
    from mindspore.communication import GlobalComm
    return bool(GlobalComm.INITED)


def world_size():
    """Number of workers: the size of MindSpore's world group, 1 without communication."""
    if not _initialized():
        return 1
    from mindspore.communication import get_group_size
    return int(get_group_size())


def world_rank():
    """This worker's rank in MindSpore's world group, 0 without communication."""
    if not _initialized():
        return 0
    from mindspore.communication import get_rank
    return int(get_rank())


def require_initialized(cls):
    """A process that msrun launched as one of several workers (RANK_SIZE above 1) must
    have called mindspore.communication.init() before building the optimizer: without it
    each worker would train alone on its share of the data."""
    workers = os.getenv("RANK_SIZE", "1")
    if not _initialized() and workers.isdigit() and int(workers) > 1:
        raise RuntimeError(
            f"{cls} is built in one of {workers} workers (RANK_SIZE={workers}, as msrun "
            f"sets it), but mindspore.communication.init() has not been called: call it "
            f"before building the optimizer, or unset RANK_SIZE to train in one process.")


def parallel_mode():
    import mindspore as ms
    return ms.get_auto_parallel_context("parallel_mode")


def require_stand_alone(cls):
    """DGC exchanges gradients itself: a framework gradient reducer in front of it
    (DATA_PARALLEL and the other parallel modes) would send them dense first."""
    mode = parallel_mode()
    if mode != "stand_alone":
        raise RuntimeError(
            f"{cls} exchanges compressed gradients itself, but the parallel mode is {mode!r}: "
            f"MindSpore would all-reduce every gradient densely before the optimizer and "
            f"defeat the compression. Keep the default parallel mode (STAND_ALONE): call "
            f"mindspore.communication.init() and do not call set_auto_parallel_context("
            f"parallel_mode=...); {cls} averages gradients across the workers itself.")


@constexpr
def _check_stand_alone_at_compile():
    require_stand_alone("DGCMomentum")
    return True


def check_stand_alone_in_graph():
    """The same check, evaluated when the training graph is compiled."""
    return _check_stand_alone_at_compile()


def model_signature(shapes, dtypes, extra):
    """int32 values that differ when two workers' exchange buffers would differ, or
    anything in `extra` (their settings)."""
    text = repr((tuple(tuple(s) for s in shapes), tuple(str(d) for d in dtypes), extra))
    total = sum(int(np.prod(s)) for s in shapes)
    return [len(shapes), total % (2 ** 31 - 1), zlib.crc32(text.encode()) & 0x7fffffff]


class SparseExchange(nn.Cell):
    """One worker's selections -> (all indices, all values), gathered in rank order.

    The selections come as blocks (one per parameter, or one per bucket of the
    native multi-tensor select) and are concatenated, unless there is one."""

    def __init__(self, nranks):
        super().__init__()
        self.nranks = nranks
        if nranks > 1:
            self.all_gather = ops.AllGather()

    def construct(self, indices, values):
        # one block (the native multi-tensor select of one bucket) is the buffer itself
        idx = indices[0] if len(indices) == 1 else ops.concat(indices)
        val = values[0] if len(values) == 1 else ops.concat(values)
        if self.nranks > 1:
            # the second collective waits for the first: every worker must issue them in
            # the same order
            idx = self.all_gather(idx)
            val = self.all_gather(F.depend(val, idx))
        return idx, val


class DenseExchange(nn.Cell):
    """Mean over workers of dense gradients, through one fused float32 buffer."""

    def __init__(self, nranks, shapes):
        super().__init__()
        self.nranks = nranks
        self.shapes = tuple(tuple(s) for s in shapes)
        sizes = [int(np.prod(s)) for s in self.shapes]
        self.cut_plan = cut_plan(sizes)
        self.send_elements = sum(sizes)
        if nranks > 1 and sizes:
            self.all_reduce = ops.AllReduce()
            self.nranks_t = Tensor(float(nranks), mstype.float32)

    def construct(self, grads):
        if self.nranks == 1 or not self.shapes:
            return grads
        return cut(self.mean(flatten(grads, mstype.float32)), grads, self.cut_plan)

    def mean(self, flat):
        """The mean over the workers of `flat`, the gradients' fused float32 buffer (built
        here by ``flatten``, or by a native pack): a sum, then a division, as the reference
        and the gathered path's apply kernel do (RealDiv: on CPU, MindSpore's Div takes
        buffers of its own, docs/platform.md)."""
        return F.tensor_div(self.all_reduce(flat), self.nranks_t)


class SharedExchange(nn.Cell):
    """The exchanges of shared indices: the indices every worker takes (the leader's, or
    every worker's proposals), and the sum or mean of every worker's values there."""

    def __init__(self, nranks):
        super().__init__()
        self.nranks = nranks
        if nranks > 1:
            # Broadcast's root is an attribute: one per worker, the step picks the leader's
            self.broadcasts = tuple(ops.Broadcast(r) for r in range(nranks))
            self.all_gather = ops.AllGather()
            self.all_reduce = ops.AllReduce()
            self.nranks_t = Tensor(float(nranks), mstype.float32)

    def leader_indices(self, idx, step):
        """The fused index buffer of the leader of `step` (int32 scalar): worker step % N."""
        if self.nranks == 1:
            return idx
        leader = step % self.nranks
        out = idx
        for r in range(self.nranks):
            if leader == r:
                out = self.broadcasts[r]((idx,))[0]
        return out

    def union_indices(self, idx):
        """Every worker's fused index buffer, side by side in rank order."""
        return idx if self.nranks == 1 else self.all_gather(idx)

    def sum(self, val):
        """The sum over the workers of the fused value buffer."""
        return val if self.nranks == 1 else self.all_reduce(val)

    def mean(self, val):
        """The mean: the sum, then a division (RealDiv), as the reference's."""
        return val if self.nranks == 1 else F.tensor_div(self.all_reduce(val), self.nranks_t)


class Exchanges(NamedTuple):
    """The exchanges a sparse step may use (one per collective pattern)."""
    sparse: SparseExchange
    summed: DenseExchange
    shared: SharedExchange


def _by_dtype(params):
    """The parameters' indices grouped by dtype, the dtypes in the order they first appear:
    {dtype: [index, ...]}."""
    groups = {}
    for i, p in enumerate(params):
        groups.setdefault(p.dtype, []).append(i)
    return groups


class ReplicaSync(nn.Cell):
    """Checks that every worker built the same model at the same step, and that the
    optimizer state was saved by as many workers as this run has, each worker holding its
    own rank's, with residuals of kinds it can step on (`residual_kinds`: this run's, per
    parameter, checkpoints.py), the same on every worker; makes the parameters identical
    on the first step.  `roles` (per parameter: 1 when dense_params names it, plus 2 when
    it is below the size compressed alone, plus 4 when sparsity="auto" sends it dense)
    and the parameters' names are what a refusal says (ops/aot/aot_replicas.cpp).

    A worker's gathered row is `signature`, the step, the state's world size, the rank
    that saved the state, a 64-bit digest of the state's residual kinds and the step its
    branch was compiled for: a state that one worker refuses differs from the others' and
    every worker refuses it, and so does a branch that one worker compiled for another
    step."""

    # device targets whose parameters cross the first step's broadcast packed by the host's
    # native ops; elsewhere (the ops would write host copies of device memory) one tensor per
    # parameter crosses and is assigned
    PACKED_TARGETS = ("CPU",)

    def __init__(self, nranks, signature, params, residual_kinds, roles):
        super().__init__()
        self.nranks = nranks
        self.nranks_t = Tensor(np.array([nranks], np.int32))
        self.kinds_t = Tensor(np.array(residual_kinds, np.int32).reshape(-1))
        # what a refusal names: the parameters, and per parameter whether dense_params
        # names it (1) and whether it is below the size compressed alone (2)
        self.names = Tensor(np.frombuffer(b"".join(p.name.encode() + b"\0" for p in params),
                                          np.uint8).copy())
        self.roles = Tensor(np.array(roles, np.int32).reshape(-1))
        self.signature = Tensor(np.array(signature, np.int32))
        self.width = Tensor(np.array([len(signature) + 6], np.int32))
        # the step a branch compiled on the device is for: any (the check's -1)
        self.any_step = Tensor(np.array([-1], np.int32))
        self.check_op = aot.check_replicas_op()
        self.check_call = aot.caller("ms_optim_check_replicas")
        # one worker's digest column is compared with nobody's
        self.no_digest = Tensor(np.zeros(2, np.int32))
        if nranks > 1:
            self.all_gather = ops.AllGather()
            self.kinds_digest = aot.digest_op(1, mstype.int32)
            self.broadcast = ops.Broadcast(0)
            self.digest_call = aot.caller("ms_optim_digest")
            self.digest_groups = self._digest_groups(params)
            self.packed = context.get_context("device_target") in self.PACKED_TARGETS
            if self.packed:
                self._init_packed(params)

    def _init_packed(self, params):
        """Rank 0's parameters cross as one buffer per dtype (``_by_dtype``), packed and
        unpacked in place by the host's native ops."""
        dtypes = [p.dtype for p in params]
        groups = _by_dtype(params)
        self.sync_gidx = tuple(Tensor(np.array(ids, np.int32)) for ids in groups.values())
        self.pack_ops = tuple(aot.pack_op(dtypes, sum(params[i].size for i in ids), d)
                              for d, ids in groups.items())
        self.unpack_ops = tuple(aot.unpack_op(dtypes, d) for d in groups)
        self.pack_call = aot.caller("ms_optim_pack")
        self.unpack_call = aot.caller("ms_optim_unpack")

    @staticmethod
    def _digest_groups(params):
        """(plan.index_pick of the parameters, digest op) per bucket of parameters of one
        dtype: the indices grouped by dtype (``_by_dtype``), then cut by ``aot.buckets``."""
        order = [i for ids in _by_dtype(params).values() for i in ids]
        dtypes = [params[i].dtype for i in order]
        return tuple((index_pick(order[lo:hi]), aot.digest_op(hi - lo, dtypes[lo]))
                     for lo, hi in aot.buckets(dtypes))

    def check(self, step, saved_world, saved_rank, saved_kinds, expected=None):
        """int32[1] once every worker's signature, step and optimizer state matched,
        `saved_world` (int32[1], the world size the optimizer state was saved by) is this
        run's, every worker's `saved_rank` (int32[1], the rank that saved its state) is its
        own, every parameter's residual kind in the state (`saved_kinds`, int32[n]) can
        be stepped on as this run's, and every worker's `expected` (int32[1], the step its
        branch was compiled for; None: any) is `step` (fails otherwise: with
        MSOPT_ERR_STALE on that last)."""
        digest = self.no_digest
        if self.nranks > 1:
            digest = self.digest_call(self.kinds_digest, p=(saved_kinds,))
        if expected is None:
            expected = self.any_step
        mine = ops.concat((self.signature, F.cast(step, mstype.int32).reshape(1), saved_world,
                           saved_rank, digest, expected))
        return self.check_call(
            self.check_op,
            signatures=self.all_gather(mine) if self.nranks > 1 else mine, width=self.width,
            world=ops.concat((saved_world, self.nranks_t)),
            residuals=ops.concat((saved_kinds, self.kinds_t)), names=self.names,
            roles=self.roles)

    def sync_params(self, params, after):
        """After `after`: compares a digest of every worker's parameters and, only
        if they differ, overwrites every parameter with rank 0's."""
        digests = ()
        for how, op in self.digest_groups:
            digests = digests + (self.digest_call(op, p=pick(params, how)),)
        gathered = self.all_gather(F.depend(ops.concat(digests), after))
        rows = gathered.reshape(self.nranks, -1)
        done = after
        if not ops.equal(rows, rows[0:1]).all():
            done = F.depend(done, self._take_rank0s(F.depend(params, gathered), params))
        return F.depend(done, gathered)

    def _take_rank0s(self, values, params):
        """Every parameter of `params` overwritten with rank 0's `values` (the parameters'
        values, after the digests' exchange): one buffer per dtype, broadcast (or one
        tensor per parameter)."""
        if not self.packed:
            return assign_each(params, self.broadcast(values))
        packed = ()
        for g in range(len(self.sync_gidx)):
            packed = packed + (self.pack_call(self.pack_ops[g], src=values,
                                              gidx=self.sync_gidx[g]),)
        synced = self.broadcast(packed)
        done = True
        for g in range(len(self.sync_gidx)):
            done = F.depend(done, self.unpack_call(self.unpack_ops[g], dst=params,
                                                   gidx=self.sync_gidx[g], flat=synced[g]))
        return done
