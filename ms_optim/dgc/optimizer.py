"""The DGCMomentum optimizer: its arguments, state and step."""
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, context
from mindspore import dtype as mstype
from mindspore.common.initializer import initializer
from mindspore.graph.api import jit
from mindspore.ops import functional as F

from .. import _checks
from .._base import _ALWAYS, Optimizer
from .._step import fault_in, kernel_device
from ..clip import ClipGradByNorm
from ..regularizer import L1Decay, L2Decay
from . import checks
from .auto import DENSE, MEASURING, AutoSparsity, dense_head
from .checkpoints import RANK_NAME, RESIDUAL_KIND_NAME, U_PREFIX, V_PREFIX, WORLD_SIZE_NAME, \
    residual_kind
from .exchange import (DenseExchange, Exchanges, ReplicaSync, SharedExchange, SparseExchange,
                       check_stand_alone_in_graph, model_signature, require_initialized,
                       require_stand_alone, world_rank, world_size)
from .density import SPARSITY_CHOICES
from .grads import LocalGrads
from .host_calls import _DECIDED_DENSE, _FLUSH, HostBranches
from .plan import momentum_group, stage_branches
from .reports import ExchangeReports
from .schedule import MIN_COMPRESSED_NUMEL, DGCPlan, compressed_alone
from .bucket import BucketStep
from .steps import DenseMomentum, NativeStep, OpsStep, ResidualFlush, StepState



def _residual(param, prefix, float32):
    """Zeros named `prefix.<param name>`: float32 when asked (v, and u of a widened,
    compressed float16 parameter), else of the parameter's dtype."""
    if float32:
        out = Parameter(initializer("zeros", param.shape, mstype.float32),
                        name=f"{prefix}.{param.name}")
    else:
        out = param.clone(init="zeros")
        out.name = f"{prefix}.{param.name}"
    return fault_in((out,))[0]


class DGCMomentum(HostBranches, Optimizer, LocalGrads, ExchangeReports):
    r"""Momentum SGD with Deep Gradient Compression (PaddlePaddle's ``DGCMomentumOptimizer``).

    Each worker sends only the largest ``1 - sparsity`` fraction of its accumulated
    gradient (the top 0.1% at the default 0.999); the rest stays in local residuals until
    it has grown (Lin, Han, Mao, Wang, Dally, "Deep Gradient Compression", ICLR 2018,
    arXiv 1712.01887).  Per parameter :math:`w`, step :math:`t` (from 0), :math:`N`
    workers, momentum :math:`\mu` and learning rate :math:`\eta`:

    1. The local gradient :math:`g` is divided by `loss_scale`, clipped per tensor to
       norm :math:`c / \sqrt{N}` (`local_grad_clip_norm` or `grad_clip`), then
       regularized (`weight_decay` or `regularization`).
    2. Compressed parameters (float32 or float16, at least 16384 elements, not in
       `dense_params`, nor the last weight that ``sparsity="auto"`` sends dense), from
       `rampup_begin_step` on: :math:`u = \mu u + g,\ v = v + u` (Nesterov:
       :math:`u = \mu (u + g),\ v = v + u + g`); the :math:`k` entries of largest
       :math:`|v|` are selected, :math:`u` and :math:`v` set to 0 there, every worker's
       selection exchanged, and :math:`w = w - \eta \sum \text{selections} / N`.
       ``k = max(1, int(numel * (1 - sparsity[i])))`` with ``i = min(int((t -
       rampup_begin_step) * len(sparsity) / rampup_step), len(sparsity) - 1)``.
    3. The other parameters, and all of them before `rampup_begin_step`: with :math:`G`
       the workers' mean gradient, :math:`u = \mu u + G,\ w = w - \eta u` (Nesterov:
       :math:`w = w - \eta (G + \mu u)`).
    4. With `bucket_sparsity` :math:`b`, the float32 and float16 parameters below 16384
       elements are compressed too, as one bucket: step 2 with one top-k over their
       concatenation of :math:`n_b` elements, ``k = max(1, int(n_b * (1 - min(sparsity[i],
       b))))``, each parameter applying its share with its own learning rate.
    5. With `lr_in_residuals`, a compressed or bucketed parameter's gradient is replaced by
       :math:`\eta g` after step 1, on every step, and the parameter is then stepped with a
       learning rate of 1: from `rampup_begin_step` on :math:`u = \mu u + \eta g,\ v = v +
       u,\ w = w - \sum \text{selections} / N` (Nesterov alike), before it
       :math:`u = \mu u + \eta G,\ w = w - u`.  The other parameters keep step 3.

    Note:
        - The residuals are the Parameters ``dgc_u.*`` and ``dgc_v.*``; checkpoints carry
          them with ``dgc_world_size``, ``dgc_rank`` and ``dgc_residual_kind`` (per
          parameter: none, gradients or learning-rate-scaled gradients).  A step on a
          state saved by another number of workers or by another rank (each worker loads
          its own file), or on residuals this run would drop or read as the other kind
          (another `bucket_sparsity`, `dense_params`, `lr_in_residuals`, or
          ``sparsity="auto"``'s last weight sent dense), fails on every
          worker before anything is applied or counted: ``ValueError`` called from
          Python, ``RuntimeError`` in a compiled train step (docs/dgc.md, "Resuming with
          other settings").
        - ``compressed_params``, ``bucketed_params``, ``stage(step)`` and
          ``exchange_stats(step)`` say what is compressed alone and in the bucket, the
          `sparsity` index of a step, and what a worker sends.
        - A compressed float16 parameter is stepped in float32 (one rounding per update).
          A parameter of 16384 or more elements that is not compressed (float64, bfloat16)
          gets one ``UserWarning``.
        - Distributed: call ``mindspore.communication.init()`` and keep the default
          (stand-alone) parallel mode; the optimizer averages over the workers itself.

    Args:
        params (Union[list[Parameter], list[dict]]): The parameters (float32, float16,
            float64; bfloat16 off CPU), or parameter groups with the keys ``"params"``,
            ``"lr"``, ``"weight_decay"``, ``"order_params"``.  Each parameter once.
        learning_rate (Union[float, int, Tensor, Iterable, LearningRateSchedule]): A number
            >= 0, a scalar or 1-D Tensor (or numpy array), an Iterable of per-step values
            (read once) or a ``LearningRateSchedule``; every value finite and >= 0.  A list
            (or 1-D Tensor) has a value per step: a run past its end raises ValueError,
            naming it, when the optimizer is called from Python (PyNative); inside a compiled
            train step (GRAPH_MODE) MindSpore's Gather raises RuntimeError at that step.
        momentum (Union[float, int]): :math:`\mu`, in [0.0, 1.0).
        rampup_begin_step (int): The first step that compresses, >= 0.
        rampup_step (int, optional): Steps over which `sparsity` is spread, >= 1.  Default: ``1``.
        sparsity (Union[list[float], tuple[float], str], optional): The warm-up sparsities,
            in [0.0, 1.0), non-decreasing; the last one holds afterwards.  Or ``"auto"``:
            from `rampup_begin_step` on, 3 steps at 0.999 time the compute, the exchange
            and the link, and the workers pick from ``SPARSITY_CHOICES`` the sparsity with
            the least modeled time to accuracy, or stay dense where compression would not
            pay (with one worker, every step is dense; `rampup_step` is not used;
            docs/dgc.md, "sparsity="auto"").  Without `dense_params` it also sends the
            last weight dense (a classifier's last layer) when that is compressible and
            holds at most 0.4% of the compressible elements.
            Default: ``(0.999,)``.
        use_nesterov (bool, optional): Nesterov momentum.  Default: ``False``.
        local_grad_clip_norm (Union[float, int], optional): :math:`c`, > 0.  Default: ``None``.
        num_trainers (int, optional): >= 1, the number of workers if given.  Default: ``None``.
        regularization (Union[L1Decay, L2Decay], optional): From ``ms_optim.regularizer``,
            on every parameter; not with a non-zero `weight_decay`.  Default: ``None``.
        grad_clip (ClipGradByNorm, optional): ``ClipGradByNorm(c)``, the same as
            ``local_grad_clip_norm=c``; not with it.  Default: ``None``.
        weight_decay (Union[float, int, Cell], optional): MindSpore's L2 decay, >= 0 or a
            Cell of the global step; without groups it skips parameters named "beta" or
            "gamma".  Default: ``0.0``.
        loss_scale (Union[float, int], optional): Divides the gradients, > 0.  Default: ``1.0``.
        impl (str, optional): ``"native"`` (multi-tensor kernels, exact top-k: the CPU
            kernels on a CPU device target, the CUDA kernels of ``ops/cuda/dgc_*.cu`` on a
            GPU one where the install found nvcc, else ``"ops"`` with a logged warning),
            ``"ops"`` (MindSpore ops, ``ops.topk``) or ``"auto"`` (``"native"`` on a CPU or
            GPU device target, else ``"ops"``).  Default: ``"auto"``.
        exchange (str, optional): How the selections cross the workers.  Exact, every
            worker's own top-k applied: ``"allgather"`` of the (index, value) entries,
            ``"allreduce"`` of the sparsified gradient, or ``"auto"``: per stage, whichever
            sends fewer bytes for the number of workers.  Shared indices, a worker
            putting about :math:`4k/N + 4k` (union) or :math:`8k` (leader) bytes into
            the collectives whatever :math:`N` (docs/dgc.md): ``"union"``, every worker
            proposes its top :math:`\max(1, k // N)` indices per parameter (AllGather)
            and every worker's values at all of them are summed (AllReduce);
            ``"leader"``, every worker takes its values at worker :math:`t \bmod N`'s
            top-k indices (Broadcast; ScaleCom's cyclic leader).  What a worker does
            not send stays in its residuals.  Default: ``"auto"``.
        bucket_sparsity (Union[float, int], optional): In [0.0, 1.0): compress the float32
            and float16 parameters below 16384 elements together as one bucket at
            ``min(sparsity[i], bucket_sparsity)`` (biases and normalization parameters; a
            denser setting than `sparsity`, such as 0.9, keeps their accuracy).  Its
            selection is one native kernel (``impl="native"``) or ``ops.topk``, and it
            crosses the workers in its own buffer as `exchange` says.  None sends them
            dense.  Default: ``None``.
        lr_in_residuals (bool, optional): The compressed and bucketed parameters' residuals
            accumulate learning-rate-scaled gradients, so that an entry held back is
            applied at the rate of the steps that produced it, not at the rate of the step
            that sends it; the same up to rounding at a constant rate.  Default: ``False``.
        dense_params (Union[list, tuple], optional): Parameters, or their names, that are
            never compressed: all-reduced dense on every step with the small ones (step 3).
            A classifier's last layer trains in fewer steps sent whole: its gradient is
            small next to the other layers' and feeds every class (docs/dgc.md, "The
            classifier sent dense").  With ``sparsity="auto"``, None lets the run pick
            (see `sparsity`) and an empty list or tuple compresses every compressible
            parameter.  Default: ``None``.

    Inputs:
        - **gradients** (tuple[Tensor]) - The gradients of `params`, of the same shapes.

    Outputs:
        bool, ``True`` (the updates are side effects on the Parameters).

    Raises:
        TypeError: If a keyword argument is not one of the constructor's (the message
            names the argument meant: ``lr`` -> ``learning_rate``, a misspelling).
        TypeError: If `params` is not a list of Parameter or of dict, or a parameter is
            not float32, float16 or float64 (bfloat16 is accepted off CPU).
        TypeError: If `learning_rate` is not an int, float, Tensor, Iterable or
            LearningRateSchedule; `momentum`, `local_grad_clip_norm`, `loss_scale` or a
            `sparsity` entry not a float or an int (numpy's are taken, a bool is neither,
            here and for the ints below); `sparsity` not ``"auto"``, a
            list or a tuple; `rampup_begin_step`, `rampup_step` or `num_trainers` not an
            int; `use_nesterov` not a bool; `weight_decay` not a float, an int or a Cell;
            `grad_clip` not None or a ClipGradByNorm; `regularization` not None, L1Decay
            or L2Decay; `bucket_sparsity` not None, a float or an int; `lr_in_residuals`
            not a bool; `dense_params` not None, a list or a tuple, or an entry of it not
            a Parameter or a str; `impl` or `exchange` not a str.
        ValueError: If `params` is empty, names a parameter twice or has a group that sets
            ``"grad_centralization"``; `learning_rate` (or a group's ``"lr"``) is negative
            or not finite, a Tensor or numpy array of more than one dimension, or a
            sequence that is empty, nested or holds a negative or non-finite value;
            `momentum` or a `sparsity` entry is not in [0.0, 1.0); `sparsity` is a str other
            than ``"auto"``, empty or decreases; `rampup_begin_step` < 0; `rampup_step` < 1;
            `local_grad_clip_norm` <= 0; `loss_scale` <= 0 or not finite; `weight_decay` < 0
            or not finite; `num_trainers` < 1 or not the number of workers; `impl` or
            `exchange` is not one of its choices; `bucket_sparsity` is not in [0.0, 1.0);
            `dense_params` names a parameter that is not among `params`, or one twice.
        ValueError: If both `grad_clip` and `local_grad_clip_norm`, or `regularization`
            and a non-zero `weight_decay`, are given.
        RuntimeError: If the parallel mode is not stand-alone, or msrun started it before init().
        ValueError: If a number is not finite in float32 (`momentum` 1.0 there, a rate, decay,
            `loss_scale` or its reciprocal above 3.4e38, `local_grad_clip_norm` 0 there),
            `rampup_begin_step` + `rampup_step` > 2**31 - 1, or a parameter has no elements.
        TypeError: If called with other arguments than the gradients, or with none.
        KeyError: If a parameter group lacks ``"params"`` or has a key groups do not take.

    Supported Platforms:
        ``CPU`` ``GPU`` ``Ascend``

        Verified on CPU (``impl="native"`` and ``"ops"``, one worker and several under
        msrun).  On GPU, ``impl="native"`` runs the CUDA kernels for the compressed
        parameters' select and apply (the dense momentum and the bucket of small
        parameters in graph code, the workers' agreement check on the host); the kernels
        are tested on a GPU against the reference and the CPU kernels (tests/gpu), not
        inside MindSpore's GPU build.  On Ascend
        ``impl="auto"`` runs ``"ops"`` (MindSpore ops and collectives), not tested there.

    Examples:
        >>> import numpy as np
        >>> import mindspore as ms
        >>> from mindspore import nn
        >>> import ms_optim
        >>> net = nn.Dense(128, 128)  # the 128 x 128 weight is compressed, the bias is not
        >>> opt = ms_optim.DGCMomentum(net.trainable_params(), learning_rate=0.1, momentum=0.9,
        ...                            rampup_begin_step=2, rampup_step=4,
        ...                            sparsity=[0.75, 0.9375, 0.984375, 0.999])
        >>> opt.compressed_params, [opt.stage(step) for step in range(7)]
        (['weight'], [None, None, 0, 1, 2, 3, 3])
        >>> train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
        >>> x = ms.Tensor(np.random.default_rng(0).normal(size=(4, 128)).astype(np.float32))
        >>> y = ms.Tensor(np.zeros((4, 128), np.float32))
        >>> for step in range(4):  # steps 0 and 1 dense, 2 and 3 compressed
        ...     _ = train(x, y)
        >>> before = net.weight.asnumpy().copy()
        >>> _ = train(x, y)  # step 4, sparsity 0.984375: 1.5625% of the 16384 weights change
        >>> int((net.weight.asnumpy() != before).sum())
        256
        >>> stats = opt.exchange_stats(4)  # what one worker sends at step 4 (8 bytes an entry)
        >>> stats["selected"], stats["sparse_part_bytes"], stats["exchange"]
        (256, 2048, 'allgather')

    See docs/dgc.md (the kernels, the exchange, half precision) and docs/distributed.md.
    """

    _NAME = "DGCMomentum"
    _REPR_OMITS = {"num_trainers": _ALWAYS}  # checked against the world size, shown as nranks

    def __init__(self, params, learning_rate, momentum, rampup_begin_step, rampup_step=1,
                 sparsity=(0.999,), use_nesterov=False, local_grad_clip_norm=None,
                 num_trainers=None, regularization=None, grad_clip=None, weight_decay=0.0,
                 loss_scale=1.0, impl="auto", exchange="auto", bucket_sparsity=None,
                 lr_in_residuals=False, dense_params=None):
        cls = self._NAME
        params = _checks.check_params(cls, params)
        checked = checks.validate(cls, **self._arguments)
        (learning_rate, momentum, rampup_begin_step, rampup_step, sparsity, local_grad_clip_norm,
         num_trainers, weight_decay, loss_scale, impl, bucket_sparsity) = (
            checked.learning_rate, checked.momentum, checked.rampup_begin_step,
            checked.rampup_step, checked.sparsity, checked.local_grad_clip_norm,
            checked.num_trainers, checked.weight_decay, checked.loss_scale, checked.impl,
            checked.bucket_sparsity)
        # the loss scale is divided out here, before clipping (the base class would fold it
        # into the weight decay)
        super().__init__(learning_rate, params, weight_decay, 1.0)
        target = context.get_context("device_target")
        checks.check_bfloat16(cls, self._parameters, target)
        _checks.check_param_dtypes(cls, self._parameters,
                                   (mstype.float32, mstype.float16, mstype.float64)
                                   + (() if target == "CPU" else (mstype.bfloat16,)))
        self.loss_scale = loss_scale

        require_stand_alone(cls)
        require_initialized(cls)
        self.nranks = world_size()
        self.rank = world_rank()
        if num_trainers is not None and num_trainers != self.nranks:
            raise ValueError(f"For '{cls}', 'num_trainers' is {num_trainers} but the world group has "
                             f"{self.nranks} worker(s).")
        self.impl = impl
        self.kernel_device = kernel_device(impl, cuda=True)
        self._record_args(params, locals(), nranks=self.nranks)
        # impl="ops"'s per-parameter loops, and the bucket's, nest deeper than MindSpore's
        # default allows
        if impl == "ops" or bucket_sparsity is not None:
            checks.raise_call_depth(len(self._parameters))
        self._init_graph_helpers()
        self.use_nesterov = use_nesterov
        # sparsity="auto": a stage per choice, entered by the measured choice (auto.py)
        auto = sparsity == "auto"
        if auto:
            sparsity, rampup_step = SPARSITY_CHOICES, 1
        self.rampup_begin_step, self.rampup_step, self.sparsity = (rampup_begin_step, rampup_step,
                                                                    sparsity)
        clip = grad_clip.clip_norm if grad_clip is not None else local_grad_clip_norm
        self.clip_norm = None if clip is None else clip * self.nranks ** -0.5
        # per tensor, before regularization: clip.py's norm clip at c / sqrt(nranks)
        self.local_clip = None if clip is None else ClipGradByNorm(self.clip_norm)
        self.l1 = regularization.coeff if isinstance(regularization, L1Decay) else 0.0
        self.l2 = regularization.coeff if isinstance(regularization, L2Decay) else 0.0

        self.asked_dense = checks.dense_mask(cls, dense_params, [p.name for p in self._parameters])
        sizes = [p.size for p in self._parameters]
        able = [p.dtype in checks.COMPRESSED_DTYPES for p in self._parameters]
        # sparsity="auto" without dense_params: a small last layer (a classifier) sent dense
        head = None
        if auto and dense_params is None:
            head = dense_head([p.ndim for p in self._parameters], sizes,
                              compressed_alone(sizes, able))
        self.dense_head = None if head is None else self._parameters[head].name
        self.auto_dense_mask = tuple(i == head for i in range(len(self._parameters)))
        asked_dense = tuple(a or h for a, h in zip(self.asked_dense, self.auto_dense_mask))
        self.plan = DGCPlan(sizes, [a and not d for a, d in zip(able, asked_dense)],
                            sparsity, rampup_begin_step, rampup_step,
                            bucket_sparsity=bucket_sparsity)
        plan = self.plan
        self.is_compressed, self.comp_ids, self.dense_ids = (plan.is_compressed, plan.comp_ids,
                                                             plan.dense_ids)
        self.bucket_ids = plan.bucket_ids
        self.stage_k, self.stage_offsets = plan.stage_k, plan.stage_offsets
        # compressed and bucketed parameters narrower than float32: gradient, residuals and
        # update in float32
        self.widened = tuple((c or b) and p.dtype != mstype.float32
                             for c, b, p in zip(self.is_compressed, plan.in_bucket,
                                                self._parameters))
        checks.warn_uncompressed(cls, self._parameters, self.is_compressed,
                                 bucketed=bool(self.bucket_ids), asked_dense=asked_dense)
        self.any_widened = any(self.widened)
        # with lr_in_residuals, the parameters whose gradients enter u (and the exchange)
        # multiplied by their learning rate, then stepped with a learning rate of 1
        self.folded = tuple(lr_in_residuals and (c or b)
                            for c, b in zip(self.is_compressed, plan.in_bucket))
        self.folds = any(self.folded)
        self.one = Tensor(1.0, mstype.float32)
        self.no_decay = (False,) * len(self._parameters)
        # the dtypes of the local gradients (_local_grads)
        self.grad_dtypes = tuple(mstype.float32 if w else p.dtype
                                 for w, p in zip(self.widened, self._parameters))
        # _step_of's (stage, first key) pairs: the stages by their first step; with
        # sparsity="auto" every choice by its index
        self.stage_bounds = stage_branches(plan)
        self.choice_keys = tuple((s, s) for s in range(len(self.sparsity)))
        self.u = ParameterTuple(_residual(p, U_PREFIX, w)
                                for p, w in zip(self._parameters, self.widened))
        self.v = ParameterTuple(_residual(self._parameters[i], V_PREFIX, True)
                                for i in self.comp_ids)
        self.bucket_v = ParameterTuple(_residual(self._parameters[i], V_PREFIX, True)
                                       for i in self.bucket_ids)

        # the number of workers whose residuals u, v hold: saved with them, so that a run
        # resumed at another world size refuses the step (resize_checkpoints converts)
        self.world_size = Parameter(Tensor(np.array([self.nranks], np.int32)),
                                    name=WORLD_SIZE_NAME, requires_grad=False)
        # and the rank that holds them: a worker that loaded another rank's file refuses
        # (its own residuals would be lost, the other's applied twice); a state saved
        # without it keeps this worker's rank
        self.saved_rank = Parameter(Tensor(np.array([self.rank], np.int32)), name=RANK_NAME,
                                    requires_grad=False)
        # and, per parameter, what its residuals hold (checkpoints.py): resumed as the other
        # kind every pending entry would be applied at lr times its size, or 1/lr; by a run
        # that sends the parameter dense, its v would be dropped
        self.residual_kinds = tuple(residual_kind(c or b, f) for c, b, f in zip(
            self.is_compressed, plan.in_bucket, self.folded))
        self.residual_kind = Parameter(Tensor(np.array(self.residual_kinds, np.int32)),
                                       name=RESIDUAL_KIND_NAME, requires_grad=False)
        self.inv_scale = Tensor(1.0 / loss_scale, mstype.float32)
        self.l1_t = Tensor(self.l1, mstype.float32)
        self.l2_t = Tensor(self.l2, mstype.float32)
        self._build_exchanges(exchange)
        self.auto = None
        if auto and (self.comp_ids or self.bucket_ids):
            self.auto = AutoSparsity(
                rampup_begin_step, self.nranks,
                [self._stats_at(s, 0, self.nranks)["wire_bytes"] for s in range(plan.stages)],
                self._stats_at(None, 0, self.nranks)["wire_bytes"],
                sum(p.size for p in self._parameters))
        self._build_steps(momentum)

    def _build_exchanges(self, exchange):
        shapes = [p.shape for p in self._parameters]
        self.sparse_exchange = SparseExchange(self.nranks)
        self.shared_exchange = SharedExchange(self.nranks)
        self.dense_exchange = DenseExchange(self.nranks, [shapes[i] for i in self.dense_ids])
        # the compressed parameters' sparsified gradients, summed (exchange "allreduce")
        self.summed_exchange = DenseExchange(self.nranks, [shapes[i] for i in self.comp_ids])
        # before compression (and when sparsity="auto" stays dense) every gradient crosses
        # in one fused AllReduce
        self.all_exchange = DenseExchange(self.nranks, shapes)
        self.exchange = exchange
        self.stage_exchange = tuple(self._plan_exchange(s, self.nranks)
                                    for s in range(len(self.sparsity)))
        self.bucket_exchange = tuple(self._plan_bucket_exchange(s, self.nranks)
                                     for s in range(len(self.sparsity)))
        # (what the workers exchange, whether they fold the rate into it, names, settings)
        self.replicas = ReplicaSync(self.nranks, model_signature(
            shapes, [p.dtype for p in self._parameters],
            (self.stage_k, self.rampup_begin_step, self.rampup_step, self.is_compressed,
             self.stage_exchange, self.plan.bucket_k, self.bucket_ids, self.bucket_exchange,
             self.folded, tuple(p.name for p in self._parameters), self._repr_args)),
            self._parameters, residual_kinds=self.residual_kinds,
            roles=[int(d) + 2 * (p.size < MIN_COMPRESSED_NUMEL) + 4 * h
                   for p, d, h in zip(self._parameters, self.asked_dense,
                                      self.auto_dense_mask)])

    def _build_steps(self, momentum):
        """The step's Cells (steps.py): the compressed parameters' stage step and the dense
        momentum of the small parameters, of the compressed ones before compression, and
        of all of them at once on one worker before compression."""
        state = StepState(params=tuple(self._parameters), u=tuple(self.u), v=tuple(self.v),
                          widened=self.widened, grad_dtypes=self.grad_dtypes, momentum=momentum,
                          use_nesterov=self.use_nesterov,
                          # folding gives each parameter its own learning rate
                          is_group_lr=self.is_group_lr or self.folds, nranks=self.nranks,
                          device=self.kernel_device)
        sparse = NativeStep if self.impl == "native" else OpsStep
        # the host's kernels for the bucket and the dense momentum; on a GPU the CUDA
        # kernels run the compressed parameters' stages and graph code the rest
        host_native = self.impl == "native" and self.kernel_device == "CPU"
        self.sparse_step = sparse(state, self.plan, self.stage_exchange, Exchanges(
            self.sparse_exchange, self.summed_exchange, self.shared_exchange))
        self.bucket_step = (BucketStep(state, self.plan, self.bucket_v, self.bucket_exchange,
                                       native=host_native)
                            if self.bucket_ids else None)
        # the bucket's own branches (_step_of)
        self.bucket_stage_bounds = self.bucket_choice_keys = ()
        if self.bucket_step is not None:
            self.bucket_stage_bounds = self.bucket_step.bucket_keys(self.stage_bounds)
            self.bucket_choice_keys = self.bucket_step.bucket_keys(self.choice_keys)

        def momentum_step(ids, exchange):
            # the native op steps the parameters whose u is float32
            native = [host_native and self.u[i].dtype == mstype.float32 for i in ids]
            group = momentum_group(ids, native, self.nranks, len(self._parameters))
            return DenseMomentum(state, group, exchange)

        self.dense_momentum = momentum_step(self.dense_ids, self.dense_exchange)
        self.compresses = bool(self.comp_ids or self.bucket_ids)
        self.has_warmup = self.compresses and (self.rampup_begin_step > 0
                                               or self.auto is not None)
        # every parameter in one op before compression, their gradients in one AllReduce
        # (on one worker: MindSpore runs a step ten times slower when two in-place ops take
        # the same gradient Parameters)
        self.all_momentum = (momentum_step(range(len(self._parameters)), self.all_exchange)
                             if self.has_warmup else None)
        # sparsity="auto" that chooses dense after its probe: the residuals flushed first
        self.residual_flush = None
        if self.auto is not None and self.auto.measures:
            ids = self.comp_ids + self.bucket_ids
            self.residual_flush = ResidualFlush(
                state, ids, tuple(self.v) + tuple(self.bucket_v),
                DenseExchange(self.nranks, [self._parameters[i].shape for i in ids] * 2),
                native=host_native)
        # whether a step has a branch to choose (warm-up or stage; the first step's check
        # of the workers' parameters): __call__ chooses it on the host
        self.host_branches = (self.has_warmup or self.nranks > 1 or self.auto is not None
                              or (self.compresses and len(self.stage_bounds) > 1))
        # the host's count of the steps run from Python (None: read global_step)
        self._host_step = None

    # ---------------------------------------------------------------- step --

    @jit(backend="ms_backend")  # compiled in PyNative too, as MindSpore's optimizers
    def construct(self, gradients, _stage=None, _first_step=None, _host_step=None):
        check_stand_alone_in_graph()
        gradients = self.flatten_gradients(self.check_gradients(gradients))
        lr = self.get_lr()
        weight_decay = self.get_weight_decay()
        step = self.global_step.reshape(()) * 1
        grads = self._local_grads(gradients, weight_decay)
        if self.folds:
            grads, lr = self._fold_lr(lr, grads)
        # nothing is exchanged before every worker is known to hold the same model, nor
        # stepped on residuals saved by another number of workers, rank or kind
        synced = self.replicas.check(step, self.world_size, self.saved_rank, self.residual_kind,
                                     _host_step)
        # from here the residuals are of this run's kinds (a resumed parameter sent dense
        # may have started in the bucket), and so are the checkpoints it saves
        synced = F.depend(synced, F.assign(self.residual_kind,
                                           F.depend(self.replicas.kinds_t, synced)))
        # the step counts once the check has passed: a refused step leaves global_step as
        # it was
        synced = F.depend(synced, self.assignadd(
            self.global_step, F.depend(self.global_step_increase_tensor, synced)))
        if self.auto is not None and self.auto.measures:
            # sparsity="auto" past its probe, its choice made: the chosen step and nothing
            # more (no clock, no first-step branch), through as few branches on the device
            # as there are: MindSpore's runtime pays for each in a graph with collectives
            checked = F.depend(grads, synced)
            if _stage is None:
                choice = self.auto.choice.reshape(()) * 1
                # (one tensor condition: `and` between tensors compiles to a branch of its own)
                if F.logical_and(step > self.auto.choose_begin, choice == DENSE):
                    return self._warmup_step(lr, checked)
                if F.logical_and(step >= self.auto.choose_begin, choice >= 0):
                    return self._step_of(choice, self.choice_keys, self.bucket_choice_keys,
                                         step, lr, checked)
            elif _stage == _DECIDED_DENSE:
                return self._warmup_step(lr, checked)
        if self.nranks > 1:
            if _first_step is None:
                if step == 0:
                    synced = self.replicas.sync_params(self._parameters, synced)
            elif _first_step:
                synced = self.replicas.sync_params(self._parameters, synced)
        grads = F.depend(grads, synced)
        if self.auto is not None and self.auto.measures:
            # the step's clock, read once the gradients are there and at the end of the
            # update (with the link's chunk); the choice made on the last probing step
            grads = F.depend(grads, self.auto.start(step, grads))
            done = self._auto_branch(_stage, step, lr, grads)
            return F.depend(done, self.auto.update(step, self.auto.end(step, done)))
        if _stage is not None:  # the branch given by __call__
            if _stage < 0:
                return self._warmup_step(lr, grads)
            return self._stage_step(_stage, step, lr, grads)
        if self.auto is not None:  # one worker: dense
            return self._warmup_step(lr, grads)
        if self.has_warmup:
            if step < self.rampup_begin_step:
                done = self._warmup_step(lr, grads)
            else:
                done = self._compressing_step(step, lr, grads)
        else:
            done = self._compressing_step(step, lr, grads)
        return done

    def _auto_branch(self, _stage, step, lr, grads):
        """sparsity="auto" with several workers: the branch given by __call__, or on the
        device dense before the probe, the probe's stage, then dense while no choice is
        made (construct has taken a choice made past the probe before the clock)."""
        if _stage is not None:
            if _stage == _FLUSH:
                return self._warmup_step(lr, self._leave_probe(lr, grads))
            if _stage < 0:
                return self._warmup_step(lr, grads)
            return self._stage_step(_stage, step, lr, grads)
        auto = self.auto
        if F.logical_and(step >= auto.probe_begin, step < auto.choose_begin):
            return self._stage_step(auto.probe, step, lr, grads)
        if step >= auto.choose_begin:
            choice = auto.choice.reshape(()) * 1
            if F.logical_or(step == auto.choose_begin, choice == MEASURING):
                grads = self._leave_probe(lr, grads)
        return self._warmup_step(lr, grads)

    def _step_of(self, key, keyed, bucket_keyed, step, lr, grads):
        """The stage step of the entry of `keyed` ((stage, first key) pairs, the keys
        ascending; constants) whose range of keys, from its first to the next entry's,
        holds `key` (a scalar Tensor: the step, or sparsity="auto"'s choice), found by
        halving: a step passes log2(len(keyed)) branches on the device, not one or two per
        stage (MindSpore's runtime pays for each in a graph with collectives).  What is the
        same at every stage runs or is picked once before the branches (the small
        parameters' dense momentum, the compressed ones' gradients and learning rates), and
        the bucket branches over `bucket_keyed`, its own steps (``BucketStep.bucket_keys``
        of `keyed`: stages where the bucket selects alike share one), so the graph compiles
        in less time."""
        done = self.dense_momentum(lr, grads)
        if self.comp_ids:
            lrs, comp = self.sparse_step.inputs(lr, grads)
            done = F.depend(done, self._branch(True, key, keyed, 0, len(keyed), step, lrs,
                                               comp))
        if self.bucket_ids:
            done = F.depend(done, self._branch(False, key, bucket_keyed, 0, len(bucket_keyed),
                                               step, lr, grads))
        return done

    def _branch(self, sparse, key, keyed, lo, hi, step, lr, grads):
        """_step_of's branches: the step of the compressed parameters (`sparse`; `lr` and
        `grads` theirs, from ``sparse_step.inputs``) or of the bucket, at the stage of the
        entry of ``keyed[lo:hi]`` that holds `key`."""
        if hi - lo == 1:
            if sparse:
                return self.sparse_step(keyed[lo][0], lr, grads, step)
            return self.bucket_step(keyed[lo][0], lr, grads, step)
        mid = (lo + hi) // 2
        if key < keyed[mid][1]:
            return self._branch(sparse, key, keyed, lo, mid, step, lr, grads)
        return self._branch(sparse, key, keyed, mid, hi, step, lr, grads)

    def _leave_probe(self, lr, grads):
        """sparsity="auto" goes dense: the residuals flushed (steps.ResidualFlush) and the
        choice set to dense, once; also for a state that never chose (saved by a run
        without "auto") resumed past the probe, which steps dense from there."""
        done = F.depend(self.residual_flush(lr), F.assign(self.auto.choice, self.auto.dense_t))
        return F.depend(grads, done)

    def _warmup_step(self, lr, grads):
        """Before rampup_begin_step: dense momentum for every parameter."""
        return self.all_momentum(lr, grads)

    def _compressing_step(self, step, lr, grads):
        """From rampup_begin_step on: dense momentum for the small parameters, and the
        compressed ones in the stage of `step` (the plan's stages as step ranges,
        schedule.DGCPlan.stage_starts; found on the device by halving when there are
        several)."""
        return self._step_of(step, self.stage_bounds, self.bucket_stage_bounds, step, lr,
                             grads)

    def _stage_step(self, stage, step, lr, grads):
        """Stage `stage` (a constant) at `step`: dense momentum for the small parameters,
        and the compressed ones at that stage's sparsity."""
        return self._step_of(step, ((stage, 0),), ((stage, 0),), step, lr, grads)
