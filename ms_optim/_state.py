"""Optimizer state shared by the host-moment optimizers (AdamOffload and the like) and Lamb."""
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, ops
from mindspore import dtype as mstype
from mindspore.common.initializer import initializer

from . import aot


class BetaPowers:
    """beta1^t and beta2^t kept in Parameters (checkpointed), advanced once per step."""

    def _init_beta_powers(self, beta1, beta2):
        self.beta1 = Tensor([beta1], mstype.float32)
        self.beta2 = Tensor([beta2], mstype.float32)
        self.beta1_power = Parameter(initializer(1, [1], mstype.float32), name="beta1_power")
        self.beta2_power = Parameter(initializer(1, [1], mstype.float32), name="beta2_power")

    def _advance_beta_powers(self):
        """The powers for this step (t = 1 on the first), stored for the next."""
        beta1_power = self.beta1_power * self.beta1
        self.beta1_power = beta1_power
        beta2_power = self.beta2_power * self.beta2
        self.beta2_power = beta2_power
        return beta1_power, beta2_power


class HostState:
    """The state of an optimizer whose moments live on the host and are stepped by
    multi-tensor native ops, one per bucket of parameters: the moments, the ops and their
    call order, and the rounding key and weight decay each bucket's op takes."""

    def _host_state(self, prefix, dtype, block=None):
        """Zeros of `dtype` shaped like each parameter (or one per `block` elements of it,
        flat), named like MindSpore's clone()."""
        def shape(p):
            return p.shape if block is None else (-(-int(np.prod(p.shape)) // block),)
        return ParameterTuple(
            Parameter(initializer("zeros", shape(p), dtype), name=f"{prefix}.{p.name}")
            for p in self._parameters)

    def _init_host_step(self, moment_dtype, names, rule, delta):
        """The host step's state and ops: a moment Parameter per parameter for each of
        `names` (stored as `moment_dtype`: the first name takes aot.moment_storage's m
        dtype, the second its v dtype), with int8 scales ``<name>_scale``; the buckets of
        parameters of one dtype, one op each of host-moment kernel `rule`
        (``aot.host_step_op``), called in its entry's order; each bucket's first position
        (the int8 rounding key's); and the per-bucket weight decay."""
        m_dtype, v_dtype, self.scaled = aot.moment_storage(moment_dtype)
        block = aot.q8_block() if self.scaled else None
        for name, dtype in zip(names, (m_dtype, v_dtype)):
            setattr(self, name, self._host_state(name, dtype))
            setattr(self, f"{name}_scale",
                    self._host_state(f"{name}_scale", mstype.float32, block) if self.scaled
                    else ParameterTuple(()))
        self.concat = ops.Concat()
        self.buckets = aot.buckets([p.dtype for p in self._parameters])
        # int8: each bucket's first parameter's position, with global_step the key of its
        # codes' stochastic rounding (docs/algorithms.md §1.1; unused otherwise)
        self.q8_first = tuple(Tensor(np.array([lo], np.int32)) for lo, _ in self.buckets)
        self.step_ops = tuple(aot.host_step_op(rule, hi - lo, self._parameters[lo].dtype, delta,
                                               moment_dtype)
                              for lo, hi in self.buckets)
        self.step_order = aot.call_order(aot.host_step_entry(rule, delta, self.scaled))
        self._init_bucket_decay(self.buckets)

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
