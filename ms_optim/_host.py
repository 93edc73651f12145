"""The base of the optimizers whose moments live on the host (``HostMomentOptimizer``):
declared by their kernel and state, built and stepped here.

A subclass declares:

- ``RULE``: its host-moment step kernel (``aot.host_step_op``: ``"adam"`` runs the
  ``ms_optim_adam_*`` entries);
- ``MOMENTS``: the names of its moment Parameters, one per parameter each (checkpointed
  under those names): the first is stored as the kernel's ``m``, the second as its ``v``
  (``aot.moment_storage``), each with ``<name>_scale`` when stored as int8;
- ``POWERS``: whether the kernel takes the beta powers (bias correction);

and, in ``__init__``, checks its own arguments and calls ``_build`` with its constants
tensor and how its weight decay applies.  The one ``construct`` (ms_optim._base) runs the
one preprocessing order (ms_optim._step): on the delta path ``_prepare`` applies
MindSpore's coupled decay, then the loss scale, on the device; on the native path the
kernel does both in its loop.  A
subclass whose decay can be decoupled defines how the device applies it on the delta path:
``_apply_delta(param, step, lr, wd)``, the update of one parameter by its step `step` with
its learning rate and decay, as the kernel's rule has it.
"""
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, ops
from mindspore import dtype as mstype
from mindspore.common.initializer import initializer
from mindspore.ops import functional as F

from . import _checks, aot
from ._base import Optimizer
from ._step import fault_in


class HostMomentOptimizer(Optimizer):
    """The optimizers whose moments live on the host and are stepped by multi-tensor native
    ops, one per bucket of parameters of one dtype (see ms_optim._host)."""

    RULE = None
    MOMENTS = ()

    def _build(self, params, values, learning_rate, weight_decay, loss_scale, impl,
               moment_dtype, consts, decoupled, betas=None):
        """What follows a subclass's checks: nn.Optimizer's construction, the parameters'
        dtypes (float32 or float16), the arguments kept for repr (`values`: the
        constructor's ``locals()``), the beta powers (``POWERS``), the constants tensor
        `consts`, and the host step's state and ops.  `decoupled`: the weight decay is
        decoupled (AdamW's, Lion's: lr * wd * p, without the loss scale nn.Optimizer
        multiplies into it), else MindSpore's coupled decay."""
        _checks.check_decay_times_scale(self._NAME, params, weight_decay, loss_scale)
        Optimizer.__init__(self, learning_rate, params, weight_decay, loss_scale)
        _checks.check_param_dtypes(self._NAME, self._parameters,
                                   (mstype.float32, mstype.float16))
        self._record_args(params, values)
        self.impl = impl
        self.moment_dtype = moment_dtype
        self.decoupled = decoupled
        if self.POWERS:
            self._init_beta_powers(*betas)
        self._init_graph_helpers()
        self.consts = consts
        self.inv_loss_scale = 1.0 / loss_scale
        self._init_host_step(moment_dtype, impl == "delta")

    def _host_state(self, prefix, dtype, block=None):
        """Zeros of `dtype` shaped like each parameter (or one per `block` elements of it,
        flat), named like MindSpore's clone()."""
        def shape(p):
            return p.shape if block is None else (-(-int(np.prod(p.shape)) // block),)
        return ParameterTuple(fault_in([
            Parameter(initializer("zeros", shape(p), dtype), name=f"{prefix}.{p.name}")
            for p in self._parameters]))

    def _init_host_step(self, moment_dtype, delta):
        """The host step's state and ops: a moment Parameter per parameter for each of
        ``MOMENTS`` (stored as `moment_dtype`: the first name takes aot.moment_storage's m
        dtype, the second its v dtype), with int8 scales ``<name>_scale``; the buckets of
        parameters of one dtype, one op each of kernel ``RULE`` (``aot.host_step_op``),
        called in its entry's order; each bucket's first position (the int8 rounding
        key's); and the per-bucket weight decay."""
        m_dtype, v_dtype, self.scaled = aot.moment_storage(moment_dtype)
        block = aot.q8_block() if self.scaled else None
        for name, dtype in zip(self.MOMENTS, (m_dtype, v_dtype)):
            setattr(self, name, self._host_state(name, dtype))
            setattr(self, f"{name}_scale",
                    self._host_state(f"{name}_scale", mstype.float32, block) if self.scaled
                    else ParameterTuple(()))
        self.concat = ops.Concat()
        self.buckets = aot.buckets([p.dtype for p in self._parameters])
        # int8: each bucket's first parameter's position, with global_step the key of its
        # codes' stochastic rounding (docs/algorithms.md §1.1; unused otherwise)
        self.q8_first = tuple(Tensor(np.array([lo], np.int32)) for lo, _ in self.buckets)
        self.step_ops = tuple(aot.host_step_op(self.RULE, hi - lo, self._parameters[lo].dtype,
                                               delta, moment_dtype)
                              for lo, hi in self.buckets)
        self.step_call = aot.caller(aot.host_step_entry(self.RULE, delta, self.scaled))
        self._init_bucket_decay(self.buckets)

    # ---------------------------------------------------------------- a step --

    def _prepare(self, gradients):
        # the delta path: MindSpore's coupled decay, then the loss scale, on the device
        if self.impl == "delta":
            if not self.decoupled:
                gradients = self.decay_weight(gradients)
            gradients = self.scale_grad(gradients)
        return gradients

    def _update(self, gradients, lr, weight_decay, beta1_power, beta2_power):
        params = self._parameters
        powers = None
        if self.POWERS:
            powers = self.concat((beta1_power, beta2_power))
        first = getattr(self, self.MOMENTS[0])
        first_scale = getattr(self, self.MOMENTS[0] + "_scale")
        second, second_scale = first, first_scale  # read only by kernels with a v slot
        if len(self.MOMENTS) > 1:
            second = getattr(self, self.MOMENTS[1])
            second_scale = getattr(self, self.MOMENTS[1] + "_scale")
        done = True
        for b, (lo, hi) in enumerate(self.buckets):
            lr_b = self.bucket_values(lr, lo, hi, self.is_group_lr)
            # the scales and the key are read only by the int8 kernels' order
            m, m_scale = first[lo:hi], first_scale[lo:hi]
            v, v_scale = second[lo:hi], second_scale[lo:hi]
            key = self.q8_key(b)
            if self.impl == "delta":
                steps = self.step_call(
                    self.step_ops[b], m=m, v=v, m_scale=m_scale,
                    v_scale=v_scale, grad=gradients[lo:hi], lr=lr_b, powers=powers,
                    consts=self.consts, key=key)
                if hi - lo == 1:
                    steps = (steps,)
                for j in range(hi - lo):
                    i = lo + j
                    if self.decoupled and self.decay_flags[i] and self.exec_weight_decay:
                        lr_i, wd_i = self.decoupled_decay_at(lr, weight_decay, i)
                        done = F.depend(done, self._apply_delta(params[i], steps[j], lr_i, wd_i))
                    else:
                        done = F.depend(done, F.assign_add(params[i], steps[j]))
            else:
                wd_b = self.bucket_weight_decay(weight_decay, b, lo, hi)
                if self.decoupled:
                    wd_b = wd_b * self.inv_loss_scale
                done = F.depend(done, self.step_call(
                    self.step_ops[b], param=params[lo:hi], m=m, v=v,
                    m_scale=m_scale, v_scale=v_scale, grad=gradients[lo:hi], lr=lr_b, wd=wd_b,
                    powers=powers, consts=self.consts, key=key))
        return done

    def q8_key(self, b):
        """Bucket b's int8 rounding key inside ``construct``: the step (after its increment)
        and the bucket's first position; None without int8 moments."""
        return self.concat((self.global_step, self.q8_first[b])) if self.scaled else None

    def decoupled_decay_at(self, lr, weight_decay, i):
        """Parameter i's learning rate and decoupled weight decay inside ``construct``, for
        the delta path's decay on the device: per parameter with groups, else shared; the
        decay without the loss scale nn.Optimizer multiplies into it (``inv_loss_scale``)."""
        lr_i = lr[i] if self.is_group_lr else lr
        wd_i = (weight_decay[i] if self.is_group else weight_decay) * self.inv_loss_scale
        return lr_i, wd_i

    def _init_bucket_decay(self, buckets):
        """Weight decay per parameter: MindSpore's decay flags (without groups, parameters
        named beta/gamma are not decayed) as a 0/1 mask per bucket, None where all or none
        decay; a bucket none of whose parameters decay gets a constant 0 (no graph op)."""
        flags = tuple(f and self.exec_weight_decay for f in self.decay_flags)
        self.decay_masks = tuple(None if all(flags[lo:hi]) or not any(flags[lo:hi]) else
                                 Tensor(np.array(flags[lo:hi], np.float32))
                                 for lo, hi in buckets)
        self.no_decay = tuple(not any(flags[lo:hi]) for lo, hi in buckets)
        self.zero_wd = Tensor(0.0, mstype.float32)

    def bucket_weight_decay(self, weight_decay, b, lo, hi):
        """Bucket b's (parameters lo..hi) weight decay input, inside ``construct``."""
        if self.no_decay[b]:
            return self.zero_wd
        wd_b = self.bucket_values(weight_decay, lo, hi, self.is_group)
        if self.decay_masks[b] is not None:
            wd_b = wd_b * self.decay_masks[b]
        return wd_b
