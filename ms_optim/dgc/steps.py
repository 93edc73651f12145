"""DGCMomentum's step as Cells, built from the optimizer's settings and state:

- ``DenseMomentum``: one group of parameters (a ``plan.MomentumGroup``) exchanged
  dense and stepped by plain momentum;
- ``NativeStep`` and ``OpsStep``: the compressed parameters' step at one warm-up
  stage (select, exchange, apply; with shared indices propose, the shared
  indices, take, the workers' values summed, apply their mean), by the
  multi-tensor native kernels or by MindSpore ops (``ops.topk``).
- ``ResidualFlush``: the residuals applied and cleared, where ``sparsity="auto"`` goes
  dense.

The small parameters' bucket (``bucket_sparsity``) is ``bucket.BucketStep``.  Every
native DGC kernel (``aot.dgc_*_op``) is built and called here or there.
"""
from typing import NamedTuple

import numpy as np
from mindspore import Tensor, nn, ops
from mindspore import dtype as mstype
from mindspore.ops import functional as F

from .. import aot
from .._step import GraphHelpers
from .plan import index_pick, pick, sparse_buckets, stage_entries


class StepState(NamedTuple):
    """What the step Cells take from DGCMomentum (its parameters and residuals are
    referenced, never copied)."""
    params: tuple       # every parameter
    u: tuple            # every parameter's residual u
    v: tuple            # every compressed parameter's residual v
    widened: tuple      # per parameter: compressed (or bucketed), narrower than float32
    grad_dtypes: tuple  # per parameter, the dtype of its local gradient
    momentum: float
    use_nesterov: bool
    is_group_lr: bool
    nranks: int
    device: str = "CPU"  # where the native kernels run: "CPU" (host) or "GPU" (CUDA)


class _Step(GraphHelpers, nn.Cell):
    """What the step Cells share: the momentum and the learning rates of the parameters
    `ids` (indices into ``state.params``)."""

    def __init__(self, state, ids):
        super().__init__(auto_prefix=False)
        self._init_graph_helpers()
        self.ids = tuple(ids)
        self.id_pick = index_pick(self.ids)
        self.params = tuple(state.params[i] for i in self.ids)
        self.us = tuple(state.u[i] for i in self.ids)
        self.widened = tuple(state.widened[i] for i in self.ids)
        self.is_group_lr = state.is_group_lr
        self.nranks = state.nranks
        self.use_nesterov = state.use_nesterov
        self.momentum = Tensor(state.momentum, mstype.float32)
        self.consts = aot.consts("dgc", momentum=state.momentum,
                                     nesterov=state.use_nesterov)

    def own(self, tensors):
        """tensors[i] for this Cell's parameters `ids`, inside ``construct`` (plan.pick).  A
        kernel that can take the whole tuple and pick its tensors by index
        (``ms_optim_dgc_momentum``, the bucket's select) compiles faster still."""
        return pick(tensors, self.id_pick)

    def lrs(self, lr):
        """The learning rates of the parameters, in their order (with group learning rates;
        else the one shared rate)."""
        if not self.is_group_lr:
            return lr
        return self.own(lr)

    def lr_at(self, lrs, j):
        """Parameter j's learning rate, from what ``lrs`` returned."""
        return lrs[j] if self.is_group_lr else lrs


class DenseMomentum(_Step):
    """u = m*u + g; p -= lr * u (Nesterov: lr * (g + m*u)) for the parameters of `group`
    (a MomentumGroup), their gradients averaged over the workers by `exchange` (a
    DenseExchange; unused with one worker).  Each of the group's runs is one native
    momentum op; the other parameters step in graph code.

    With several workers and every parameter in a run (float32 gradients), the gradients
    cross as one buffer that native ops build and read (``ms_optim_pack``, then
    ``ms_optim_dgc_momentum_flat`` on each run's slice of the mean): no tuple of one
    tensor per parameter is built in the graph, which MindSpore compiles slowly."""

    def __init__(self, state, group, exchange):
        super().__init__(state, group.ids)
        self.exchange = exchange
        self.run_bounds = tuple((run.lo, run.hi) for run in group.runs)
        self.others = group.others
        self.flat = (state.nranks > 1 and bool(group.runs) and not group.others
                     and all(state.grad_dtypes[i] == mstype.float32 for i in group.ids))
        if self.flat:
            sizes = [p.size for p in self.params]
            starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
            # each run's part of the buffer; None for a run that holds all of it (no copy)
            self.run_slices = tuple(None if (lo, hi) == (0, len(sizes))
                                    else (starts[lo], starts[hi]) for lo, hi in self.run_bounds)
            # the step's whole gradient tuple, of every parameter
            self.pack_op = aot.pack_op(state.grad_dtypes, starts[-1])
            self.pack_gidx = Tensor(np.array(group.ids, np.int32))
            self.pack_call = aot.caller("ms_optim_pack")
            self.run_ops = tuple(aot.dgc_momentum_flat_op(
                [self.params[j].dtype for j in range(run.lo, run.hi)]) for run in group.runs)
            self.run_call = aot.caller("ms_optim_dgc_momentum_flat")
            return
        src_dtypes = [state.grad_dtypes[i] for i in group.grad_ids]
        self.run_ops = tuple(aot.dgc_momentum_op(
            [self.params[j].dtype for j in range(run.lo, run.hi)], src_dtypes)
            for run in group.runs)
        self.run_gidx = tuple(Tensor(np.array(run.sources, np.int32)) for run in group.runs)
        self.run_call = aot.caller("ms_optim_dgc_momentum")

    def construct(self, lr, grads):
        lrs = self.lrs(lr)
        done = True
        if self.flat:
            mean = self.exchange.mean(self.pack_call(self.pack_op, src=grads,
                                                     gidx=self.pack_gidx))
            for r, (lo, hi) in enumerate(self.run_bounds):
                part = self.run_slices[r]
                done = F.depend(done, self.run_call(
                    self.run_ops[r], param=self.params[lo:hi], u=self.us[lo:hi],
                    flat=mean if part is None else mean[part[0]:part[1]],
                    lr=self.bucket_values(lrs, lo, hi, self.is_group_lr), consts=self.consts))
            return done
        src = grads
        if self.nranks > 1:
            src = self.exchange(self.own(grads))
        for r, (lo, hi) in enumerate(self.run_bounds):
            done = F.depend(done, self.run_call(
                self.run_ops[r], param=self.params[lo:hi], u=self.us[lo:hi],
                src=src, lr=self.bucket_values(lrs, lo, hi, self.is_group_lr),
                consts=self.consts, gidx=self.run_gidx[r]))
        for j, g in self.others:
            done = F.depend(done, self._momentum(j, lrs, src[g]))
        return done

    def _momentum(self, j, lrs, g):
        """The rule for parameter j in graph code."""
        p, u = self.params[j], self.us[j]
        # in u's dtype: the parameter's, or float32 for a widened one (g is float32 too)
        lr_j = F.cast(self.lr_at(lrs, j), F.dtype(u))
        m = F.cast(self.momentum, F.dtype(u))
        next_u = m * u + g
        # (not P.ApplyMomentum: its CPU kernel ignores use_nesterov in MindSpore 2.10)
        update = g + m * next_u if self.use_nesterov else next_u
        done = F.assign(u, next_u)
        if self.widened[j]:  # float32 math, one rounding to the parameter's dtype
            return F.depend(done, F.assign(
                p, F.cast(F.cast(p, mstype.float32) - lr_j * update, F.dtype(p))))
        return F.depend(done, F.assign(p, p - lr_j * update))


class _SparseStep(_Step):
    """The compressed parameters' step at stage `stage` (a constant of the graph), the
    selections crossing the workers as ``stage_exchange[stage]`` says:

    - "allgather" and "allreduce": each worker selects its k largest accumulated entries
      per parameter (``select``); they are gathered by `exchanges.sparse` (a
      SparseExchange), or scattered into zeros and summed by `exchanges.summed` (a
      DenseExchange), and every worker applies their mean;
    - "leader" and "union": each worker updates its residuals and proposes its top
      indices (``propose``), every worker takes its values at the shared indices, the
      leader's or every worker's proposals side by side (``take``; `exchanges.shared`, a
      SharedExchange, exchanges indices and values), and applies their mean.

    What each worker contributes per stage is ``plan.stage_entries``'s.  The step takes
    what ``inputs`` picks (the compressed parameters' learning rates and gradients): picked
    once before the stage branches, not in each of them, the graph compiles in less time."""

    def __init__(self, state, plan, stage_exchange, exchanges):
        super().__init__(state, plan.comp_ids)
        self.v = tuple(state.v)
        self.sizes = tuple((p.size,) for p in self.params)
        self.entries = stage_entries(plan, stage_exchange, state.nranks)
        self.stage_k, self.stage_offsets = self.entries.stage_k, self.entries.stage_offsets
        self.block, self.blocks = self.entries.block, self.entries.blocks
        self.stage_exchange = stage_exchange
        self.sparse_exchange = exchanges.sparse
        self.summed_exchange = exchanges.summed
        self.shared_exchange = exchanges.shared
        self.shares = any(ex in ("leader", "union") for ex in stage_exchange)
        self.nranks_t = Tensor(float(state.nranks), mstype.float32)

    def inputs(self, lr, grads):
        """(lrs, grads) of the compressed parameters, from the step's (of every
        parameter): what ``construct`` takes."""
        return self.lrs(lr), self.own(grads)

    def construct(self, stage, lrs, grads, step):
        exchange = self.stage_exchange[stage]
        if exchange == "leader":
            idx = self.shared_exchange.leader_indices(self.propose(stage, grads), step)
            val = self.shared_exchange.mean(self.take(stage, idx))
            return self.apply(stage, lrs, idx, val)
        if exchange == "union":
            idx = self.shared_exchange.union_indices(self.propose(stage, grads))
            val = self.shared_exchange.sum(self.take(stage, idx))
            return self.apply(stage, lrs, idx, val)
        idxs, vals = self.select(stage, grads)
        done = True
        if exchange == "allreduce":
            idxs, vals = self.per_parameter(stage, idxs, vals)
            sparse = ()
            for j in range(len(self.ids)):
                sparse = sparse + (ops.scatter_nd(idxs[j].reshape(-1, 1), vals[j], self.sizes[j]),)
            summed = self.summed_exchange(sparse)
            for j in range(len(self.ids)):
                done = F.depend(done, self._apply_summed(j, lrs, summed[j]))
            return done
        idx_all, val_all = self.sparse_exchange(idxs, vals)
        return self.apply(stage, lrs, idx_all, val_all)

    def _apply_summed(self, j, lrs, G):
        """p -= lr * G for compressed parameter j, G the dense mean of every worker's
        sparsified gradient (zero where no worker selected): the reference's rule, and
        the native apply kernel's bits (the ops path's scatter-add of each worker's
        share rounds differently where selections overlap)."""
        p = self.params[j]
        step = self.lr_at(lrs, j) * G.reshape(p.shape)
        return F.assign(p, F.cast(F.cast(p, mstype.float32) - step, F.dtype(p)))


def residual_update(momentum, nesterov, u, v, g):
    """DGC's momentum correction in graph code, the ops path's one writing of the rule
    (rules::dgc_accumulate): the new u and v after gradient `g`."""
    if nesterov:
        next_u = momentum * (u + g)
        return next_u, v + next_u + g
    next_u = momentum * u + g
    return next_u, v + next_u


def _int32_tensors(layouts):
    """Per stage, per bucket: the layout as an int32 Tensor."""
    return tuple(tuple(Tensor(np.array(layout, np.int32)) for layout in stage)
                 for stage in layouts)


def _fused(parts):
    """One buffer from the parts of a fused exchange buffer (the part itself when one)."""
    return parts[0] if len(parts) == 1 else ops.concat(parts)


class NativeStep(_SparseStep):
    """The stage step by the multi-tensor kernels: per stage one select op (with shared
    indices one propose and one take op) per bucket of compressed parameters (their
    outputs side by side are the fused exchange buffer), one apply op per bucket of one
    dtype (``plan.SparseBuckets``); u and v in float32.  The kernels are the host CPU's,
    or the CUDA library's on the GPU (``state.device``)."""

    def __init__(self, state, plan, stage_exchange, exchanges):
        super().__init__(state, plan, stage_exchange, exchanges)
        b = sparse_buckets(self.entries, [p.dtype for p in self.params])
        self.select_ranges, self.apply_ranges = b.select, b.apply
        device = state.device
        self.select_ops = tuple(tuple(aot.dgc_select_multi_op(ks, device) for ks in stage_ks)
                                for stage_ks in b.select_ks)
        self.select_ks = tuple(tuple(Tensor(np.array(ks, np.int32)) for ks in stage_ks)
                               for stage_ks in b.select_ks)
        self.apply_ops = tuple(aot.dgc_apply_multi_op(hi - lo, self.params[lo].dtype, device)
                               for lo, hi in self.apply_ranges)
        self.apply_layouts = _int32_tensors(b.apply_layouts)
        self.select_call = aot.caller("ms_optim_dgc_select_multi")
        self.apply_call = aot.caller("ms_optim_dgc_apply_multi")
        if self.shares:
            self.propose_ops = tuple(tuple(aot.dgc_propose_multi_op(ks, device)
                                           for ks in stage_ks) for stage_ks in b.select_ks)
            self.take_ops = tuple(aot.dgc_take_multi_op(hi - lo, device)
                                  for lo, hi in self.select_ranges)
            self.take_layouts = _int32_tensors(b.take_layouts)
            self.propose_call = aot.caller("ms_optim_dgc_propose_multi")
            self.take_call = aot.caller("ms_optim_dgc_take_multi")

    def _local(self, stage, grads, call, stage_ops):
        """One op of ``stage_ops[stage]`` (select or propose ops, called by `call`) per
        bucket, on the compressed parameters' gradients `grads` alone (not the whole tuple
        with indices as the dense momentum takes it: MindSpore runs a step ten times slower
        when two in-place ops take the same gradient Parameters): the outputs, bucket by
        bucket, in the order of this worker's block of the fused buffer."""
        outs = ()
        for b in range(len(self.select_ranges)):
            lo, hi = self.select_ranges[b]
            outs = outs + (call(stage_ops[stage][b], u=self.us[lo:hi], v=self.v[lo:hi],
                                grad=grads[lo:hi], consts=self.consts,
                                ks=self.select_ks[stage][b]),)
        return outs

    def select(self, stage, grads):
        """One select op per bucket: the (idx, val) outputs, bucket by bucket."""
        idxs, vals = (), ()
        for idx, val in self._local(stage, grads, self.select_call, self.select_ops):
            idxs = idxs + (idx,)
            vals = vals + (val,)
        return idxs, vals

    def propose(self, stage, grads):
        """One propose op per bucket: this worker's indices, as one fused buffer."""
        return _fused(self._local(stage, grads, self.propose_call, self.propose_ops))

    def take(self, stage, idx):
        """One take op per bucket, each reading its parameters' entries of the exchanged
        index buffer `idx`: the values, as one buffer shaped as `idx` (the buckets' entries
        are disjoint)."""
        val = None
        for b in range(len(self.select_ranges)):
            lo, hi = self.select_ranges[b]
            part = self.take_call(self.take_ops[b], u=self.us[lo:hi], v=self.v[lo:hi], idx=idx,
                                  layout=self.take_layouts[stage][b])
            val = part if val is None else val + part
        return val

    def per_parameter(self, stage, idxs, vals):
        """Each parameter's (idx, val), cut from the fused buffer."""
        idx_f, val_f = _fused(idxs), _fused(vals)
        idxs, vals = (), ()
        for j in range(len(self.ids)):
            lo, k = self.stage_offsets[stage][j], self.stage_k[stage][j]
            idxs = idxs + (idx_f[lo:lo + k],)
            vals = vals + (val_f[lo:lo + k],)
        return idxs, vals

    def apply(self, stage, lrs, idx_all, val_all):
        """One apply op per bucket of compressed parameters of one dtype, over the blocks of
        the exchanged buffers (every worker's, or the leader exchange's one of means)."""
        done = True
        for b in range(len(self.apply_ranges)):
            lo, hi = self.apply_ranges[b]
            done = F.depend(done, self.apply_call(
                self.apply_ops[b], param=self.params[lo:hi], idx=idx_all,
                val=val_all, lr=self.bucket_values(lrs, lo, hi, self.is_group_lr),
                layout=self.apply_layouts[stage][b]))
        return done


class OpsStep(_SparseStep):
    """The stage step from MindSpore ops, per parameter: exact top-k (``ops.topk``) and
    masking, then a scatter-add of every worker's share."""

    def select(self, stage, grads):
        idxs, vals = (), ()
        for j in range(len(self.ids)):
            idx = self._propose(stage, j, grads[j])
            idxs = idxs + (idx,)
            vals = vals + (self._take(j, idx, False),)
        return idxs, vals

    def propose(self, stage, grads):
        idxs = ()
        for j in range(len(self.ids)):
            idxs = idxs + (self._propose(stage, j, grads[j]),)
        return _fused(idxs)

    def take(self, stage, idx):
        """Per parameter, its entries of every block (in block order) taken at once, then
        the values put back in the buffer's order."""
        blocks = self.blocks[stage]
        per_param = ()
        for j in range(len(self.ids)):
            per_param = per_param + (self._take(j, ops.concat(self._entries(stage, j, idx)),
                                                blocks > 1),)
        parts = ()
        for r in range(blocks):
            for j in range(len(self.ids)):
                k = self.stage_k[stage][j]
                parts = parts + (per_param[j][r * k:(r + 1) * k],)
        return _fused(parts)

    def per_parameter(self, stage, idxs, vals):
        return idxs, vals

    def apply(self, stage, lrs, idx_all, val_all):
        done = True
        for j in range(len(self.ids)):
            done = F.depend(done, self._apply(stage, j, lrs, idx_all, val_all))
        return done

    def _entries(self, stage, j, buffer):
        """Compressed parameter j's entries of every block of an exchanged buffer."""
        block = self.block[stage]
        lo, k = self.stage_offsets[stage][j], self.stage_k[stage][j]
        out = ()
        for r in range(self.blocks[stage]):
            out = out + (buffer[r * block + lo:r * block + lo + k],)
        return out

    def _propose(self, stage, j, grad):
        """Residual update and exact top-k for compressed parameter j: the indices."""
        u, v = self.us[j], self.v[j]
        k = self.stage_k[stage][j]
        next_u, next_v = residual_update(self.momentum, self.use_nesterov, u, v, grad)
        _, idx = ops.topk(ops.abs(next_v.reshape(-1)), k)
        idx = F.depend(idx, F.assign(u, next_u))
        return F.depend(idx, F.assign(v, next_v))

    def _take(self, j, idx, may_repeat):
        """Compressed parameter j's values at `idx`, then masking there; an index that
        repeats (`may_repeat`) takes its value at its first entry and 0 after."""
        u, v = self.us[j], self.v[j]
        flat_v = v.reshape(-1)
        val = ops.gather(flat_v, idx, 0)
        if may_repeat:
            pos = ops.arange(0, idx.shape[0], dtype=mstype.int32)
            first = ops.unsorted_segment_min(pos, idx, flat_v.shape[0])
            val = ops.select(ops.gather(first, idx, 0) == pos, val, ops.zeros_like(val))
        rows = idx.reshape(-1, 1)
        zeros = ops.zeros(idx.shape, mstype.float32)
        val = F.depend(val, F.assign(u, ops.tensor_scatter_update(u.reshape(-1), rows, zeros)
                                     .reshape(u.shape)))
        return F.depend(val, F.assign(v, ops.tensor_scatter_update(flat_v, rows, zeros)
                                      .reshape(v.shape)))

    def _apply(self, stage, j, lrs, idx_all, val_all):
        """p -= lr * scatter_add(the values of every block) / blocks for compressed parameter
        j (one block: the leader exchange's mean, already divided)."""
        p = self.params[j]
        lr_j = self.lr_at(lrs, j)
        idx = ops.concat(self._entries(stage, j, idx_all))
        val = ops.concat(self._entries(stage, j, val_all))
        step = lr_j * (val if self.blocks[stage] == 1 else val / self.nranks_t)
        if self.widened[j]:  # float32 math, one rounding to the parameter's dtype
            flat = ops.tensor_scatter_add(F.cast(p, mstype.float32).reshape(-1),
                                          idx.reshape(-1, 1), -step)
            return F.assign(p, F.cast(flat.reshape(p.shape), F.dtype(p)))
        flat = ops.tensor_scatter_add(p.reshape(-1), idx.reshape(-1, 1), -step)
        return F.assign(p, flat.reshape(p.shape))


class ResidualFlush(_Step):
    """Compression left for dense steps (``sparsity="auto"`` that chose dense after its
    probe): each compressed and bucketed parameter applies the mean of the workers'
    residuals v, ``p -= lr * mean(v)`` (the selections they still hold, at the rate of the
    step, 1 for learning-rate-scaled residuals), v is set to zero, and u becomes the mean
    of the workers' u, so every worker continues from one state.

    With the host's kernels (`native`) and float32 or float16 parameters, the residuals
    cross as one buffer that native ops build and read (``ms_optim_pack``, then
    ``ms_optim_dgc_flush_flat``), as the dense momentum's gradients do; otherwise graph
    code steps each parameter."""

    def __init__(self, state, ids, vs, exchange, native):
        super().__init__(state, ids)
        self.vs = tuple(vs)  # per parameter of `ids`, its v
        self.exchange = exchange  # a DenseExchange of the parameters' shapes, twice
        f32 = mstype.float32
        self.native = (native and bool(self.ids)
                       and all(p.dtype in (f32, mstype.float16) for p in self.params)
                       and all(t.dtype == f32 for t in self.us + self.vs))
        if self.native:
            n, total = len(self.ids), sum(p.size for p in self.params)
            # every v, then every u, in one buffer
            self.pack_op = aot.pack_op([f32] * (2 * n), 2 * total)
            self.pack_gidx = Tensor(np.arange(2 * n, dtype=np.int32))
            self.pack_call = aot.caller("ms_optim_pack")
            self.flush_op = aot.dgc_flush_flat_op([p.dtype for p in self.params])
            self.flush_call = aot.caller("ms_optim_dgc_flush_flat")

    def construct(self, lr):
        lrs = self.lrs(lr)
        if self.native:
            mean = self.exchange.mean(self.pack_call(self.pack_op, src=self.vs + self.us,
                                                     gidx=self.pack_gidx))
            return self.flush_call(self.flush_op, param=self.params, u=self.us, v=self.vs,
                                   mean=mean, lr=self.bucket_values(lrs, 0, len(self.ids),
                                                                    self.is_group_lr))
        means = self.exchange(self.vs + self.us)  # one AllReduce of both
        n = len(self.ids)
        done = True
        for j in range(n):
            p, u, v = self.params[j], self.us[j], self.vs[j]
            mean_u = means[n + j]
            step = F.cast(self.lr_at(lrs, j), mstype.float32) * means[j]
            done = F.depend(done, F.assign(p, F.cast(F.cast(p, mstype.float32) - step,
                                                     F.dtype(p))))
            done = F.depend(done, F.assign(v, ops.zeros_like(v)))
            done = F.depend(done, F.assign(u, mean_u))
        return done
