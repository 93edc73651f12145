"""DGCMomentum's bucket of small parameters (``bucket_sparsity``) as a Cell: top-k over
their concatenation, by the bucket kernels (``ms_optim_dgc_bucket_*``) or by MindSpore ops,
with any of the exchanges."""
import numpy as np
from mindspore import Tensor, ops
from mindspore import dtype as mstype
from mindspore.ops import functional as F

from .. import aot
from .exchange import DenseExchange, SharedExchange, SparseExchange
from .plan import assign_each, cut, cut_plan, flatten
from .schedule import union_k
from .steps import _Step, residual_update

# The largest bucket whose indices cross as float32 (every int32 below 2**24 is exact)
FUSED_INDEX_LIMIT = 2 ** 24


class BucketStep(_Step):
    """The bucket of small parameters (``DGCPlan.bucket_ids``) at stage `stage`: each
    parameter's residuals updated as a compressed one's, then exact top-k selections over
    the concatenation of their ``|v|``, crossing the workers as ``bucket_exchange[stage]``
    says, and each parameter's share of the mean applied (`native`: the kernels
    ``ms_optim_dgc_bucket_*``; else MindSpore ops, ``ops.topk`` and graph code per
    parameter):

    - "allgather" and "allreduce": each worker's top ``plan.bucket_k[stage]`` entries,
      masked there, gathered as (index, value) entries or scattered into zeros and the
      sparsified buckets all-reduced, and their mean applied;
    - "leader" and "union": every worker takes (and masks) its values at the leader's top-k
      indices or at every worker's top ``max(1, k // N)`` side by side (`shared`, a
      SharedExchange), the values are all-reduced and their mean applied.

    u, v and the update are float32 whatever the parameter's dtype.  The gathered entries
    cross in one AllGather, not two: the indices travel as float32 beside the values
    (exact below 2**24, ``FUSED_INDEX_LIMIT``; a bigger bucket gathers them in a second
    collective).  Each collective costs a round trip between the hosts."""

    def __init__(self, state, plan, bucket_v, bucket_exchange, native):
        super().__init__(state, plan.bucket_ids)
        self.v = tuple(bucket_v)
        self.native = native
        self.numel = plan.bucket_numel
        # each parameter's part of the bucket's concatenation
        self.cut_plan = cut_plan(p.size for p in self.params)
        self.stage_exchange = bucket_exchange
        # per stage, the indices each worker selects (with the union, its proposals)
        self.k = tuple(union_k(k, state.nranks) if ex == "union" else k
                       for k, ex in zip(plan.bucket_k, bucket_exchange))
        self.gathered = SparseExchange(state.nranks)
        self.summed = DenseExchange(state.nranks, [(self.numel,)])
        self.shared = SharedExchange(state.nranks)
        self.fused = self.numel <= FUSED_INDEX_LIMIT
        if state.nranks > 1:
            self.all_gather = ops.AllGather()
        self.nranks_t = Tensor(float(state.nranks), mstype.float32)
        if native:
            count = len(self.ids)
            # the kernels take the step's whole gradient tuple and pick the bucket's: a
            # graph that selects them tuple by tuple compiles seconds longer
            self.gidx = Tensor(np.array(self.ids, np.int32))
            src = state.grad_dtypes
            self.select_ops = tuple(aot.dgc_bucket_select_op(count, k, src) for k in self.k)
            self.propose_ops = tuple(aot.dgc_bucket_propose_op(count, k, src) for k in self.k)
            self.take_op = aot.dgc_bucket_take_op(count)
            self.select_call = aot.caller("ms_optim_dgc_bucket_select")
            self.propose_call = aot.caller("ms_optim_dgc_bucket_propose")
            self.take_call = aot.caller("ms_optim_dgc_bucket_take")
            dtypes = [p.dtype for p in self.params]
            self.apply_op = aot.dgc_bucket_apply_op(dtypes)
            self.apply_call = aot.caller("ms_optim_dgc_bucket_apply")
            self.entries_op = aot.dgc_bucket_apply_entries_op(dtypes)
            self.entries_call = aot.caller("ms_optim_dgc_bucket_apply_entries")

    def bucket_keys(self, keyed):
        """`keyed` ((stage, first key) pairs, as DGCMomentum's step branches on) without the
        entries whose stage steps the bucket as the entry before does (the same k and
        exchange: the bucket's sparsity stops at ``bucket_sparsity``): the bucket's own
        branches, each running on to the next one's first key."""
        out = keyed[:1]
        for stage, first in keyed[1:]:
            last = out[-1][0]
            if (self.k[stage], self.stage_exchange[stage]) != (self.k[last],
                                                               self.stage_exchange[last]):
                out = out + ((stage, first),)
        return out

    def construct(self, stage, lr, grads, step):
        exchange = self.stage_exchange[stage]
        if self.native:
            idx, val = self.local_native(stage, exchange, grads, step)
        else:
            idx, val = self.local_ops(stage, exchange, grads, step)
        if exchange == "allreduce":
            summed = self.summed((ops.scatter_nd(idx.reshape(-1, 1), val, (self.numel,)),))
            return self.apply(lr, summed[0])
        if exchange in ("leader", "union"):
            val = self.shared.sum(val)
        else:
            idx, val = self.gather(idx, val, self.k[stage])
        return self.apply_entries(lr, idx, val)

    def shared_indices(self, exchange, idx, step):
        """The indices every worker takes its values at: the leader's or every worker's."""
        if exchange == "leader":
            return self.shared.leader_indices(idx, step)
        return self.shared.union_indices(idx)

    def local_native(self, stage, exchange, grads, step):
        """This worker's (idx, val) by the kernels: one select op, or with shared indices
        one propose op, the exchange of indices and one take op; u and v masked in place."""
        if exchange in ("leader", "union"):
            idx = self.propose_call(self.propose_ops[stage], u=self.us, v=self.v, src=grads,
                                    consts=self.consts, gidx=self.gidx)
            idx = self.shared_indices(exchange, idx, step)
            # an index proposed twice takes its value once (the kernel gives 0 after)
            return idx, self.take_call(self.take_op, u=self.us, v=self.v, idx=idx)
        return self.select_call(self.select_ops[stage], u=self.us, v=self.v, src=grads,
                                consts=self.consts, gidx=self.gidx)

    def local_ops(self, stage, exchange, grads, step):
        """This worker's (idx, val) by MindSpore ops, u and v masked by assignment."""
        all_u, all_v = self.accumulate(grads)
        _, idx = ops.topk(ops.abs(all_v), self.k[stage])
        if exchange in ("leader", "union"):
            idx = self.shared_indices(exchange, idx, step)
        val = ops.gather(all_v, idx, 0)
        if exchange == "union" and self.nranks > 1:  # an index proposed twice: taken once
            pos = ops.arange(0, idx.shape[0], dtype=mstype.int32)
            first = ops.unsorted_segment_min(pos, idx, self.numel)
            val = ops.select(ops.gather(first, idx, 0) == pos, val, ops.zeros_like(val))
        return idx, F.depend(val, self.mask(all_u, all_v, idx.reshape(-1, 1)))

    def accumulate(self, grads):
        """Momentum correction of the bucket, on the concatenations of its parameters'
        u, v and gradients (one op per term, not per parameter): the new u and v,
        concatenated (assigned by ``mask``)."""
        g = flatten(self.own(grads), mstype.float32)
        u, v = flatten(self.us, mstype.float32), flatten(self.v, mstype.float32)
        return residual_update(self.momentum, self.use_nesterov, u, v, g)

    def mask(self, all_u, all_v, rows):
        """u and v set to 0 at `rows` (the taken indices) and assigned, per parameter."""
        zeros = ops.zeros((rows.shape[0],), mstype.float32)
        done = self.unflatten(self.us, ops.tensor_scatter_update(all_u, rows, zeros))
        return F.depend(done, self.unflatten(self.v, ops.tensor_scatter_update(all_v, rows,
                                                                                zeros)))

    def unflatten(self, targets, flat):
        """`flat` (a concatenation as ``flatten`` makes) cut and assigned to `targets`."""
        return assign_each(targets, cut(flat, targets, self.cut_plan))

    def apply(self, lr, mean):
        """p -= lr * mean for each parameter (its share of the bucket), in float32: one op
        (`native`) or graph code per parameter."""
        lrs = self.lrs(lr)
        if self.native:
            return self.apply_call(self.apply_op, param=self.params, mean=mean,
                                   lr=self.bucket_values(lrs, 0, len(self.ids), self.is_group_lr))
        if not self.is_group_lr:
            mean = lrs * mean
        # each parameter's share in its shape, float32 as its residual u
        steps = cut(mean, self.us, self.cut_plan)
        done = True
        for j in range(len(self.ids)):
            p = self.params[j]
            step = steps[j]
            if self.is_group_lr:
                step = self.lr_at(lrs, j) * step
            done = F.depend(done, F.assign(
                p, F.cast(F.cast(p, mstype.float32) - step, F.dtype(p))))
        return done

    def apply_entries(self, lr, idx, val):
        """``apply`` of the mean scatter_add(0, idx, val) / the workers, from the entries
        (idx, val) at the bucket's positions: one op (`native`, no dense mean built)."""
        if not self.native:
            total = ops.tensor_scatter_add(ops.zeros((self.numel,), mstype.float32),
                                           idx.reshape(-1, 1), val)
            return self.apply(lr, F.tensor_div(total, self.nranks_t))
        lr_b = self.bucket_values(self.lrs(lr), 0, len(self.ids), self.is_group_lr)
        return self.entries_call(self.entries_op, param=self.params, idx=idx, val=val, lr=lr_b,
                                 ranks=self.nranks_t)

    def gather(self, idx, val, k):
        """Every worker's `k` (index, value) entries, in rank order."""
        if self.nranks == 1 or not self.fused:
            return self.gathered((idx,), (val,))
        rows = self.all_gather(ops.concat((F.cast(idx, mstype.float32), val)))
        rows = rows.reshape(self.nranks, 2 * k)
        return F.cast(rows[:, :k], mstype.int32).reshape(-1), rows[:, k:].reshape(-1)
