"""The maps DGCMomentum runs over this worker's gradients before the exchange
(``LocalGrads._local_grads``, DGCMomentum's): ``widen`` (a widened parameter's gradient in
float32) and ``regularize`` (MindSpore's weight decay, then L2Decay, then
L1Decay).  The loss scale and the clip between them are GraphHelpers's
``unscale_and_clip``.  With ``lr_in_residuals``, ``fold_grad`` then multiplies
a compressed or bucketed parameter's gradient by its learning rate, and
``fold_lr`` gives that parameter a learning rate of 1 (``LocalGrads._fold_lr``)."""
from mindspore import ops
from mindspore import dtype as mstype
from mindspore.ops import composite as C
from mindspore.ops import functional as F

widen = C.MultitypeFuncGraph("ms_optim_dgc_widen")
regularize = C.MultitypeFuncGraph("ms_optim_dgc_regularize")
fold_grad = C.MultitypeFuncGraph("ms_optim_dgc_fold_grad")
fold_lr = C.MultitypeFuncGraph("ms_optim_dgc_fold_lr")


@widen.register("Bool", "Tensor")
def _widen_grad(widened, g):
    """A widened parameter's gradient in float32."""
    if widened:
        return F.cast(g, mstype.float32)
    return g


def _regularized(l2, l1, use_l2, use_l1, wd, decay, widened, p, g):
    if widened:
        p = F.cast(p, mstype.float32)
    if decay:
        g = g + p * F.cast(wd, F.dtype(p))
    if use_l2:
        g = g + p * F.cast(l2, F.dtype(p))
    if use_l1:
        g = g + ops.sign(p) * F.cast(l1, F.dtype(p))
    return g


@regularize.register("Tensor", "Tensor", "Bool", "Bool", "Tensor", "Bool", "Bool", "Tensor",
                     "Tensor")
def _regularize_tensor_wd(l2, l1, use_l2, use_l1, wd, decay, widened, p, g):
    """MindSpore's weight decay (`decay`: this parameter's flag), then L2Decay, then L1Decay."""
    return _regularized(l2, l1, use_l2, use_l1, wd, decay, widened, p, g)


@regularize.register("Tensor", "Tensor", "Bool", "Bool", "Number", "Bool", "Bool", "Tensor",
                     "Tensor")
def _regularize_number_wd(l2, l1, use_l2, use_l1, wd, decay, widened, p, g):
    return _regularized(l2, l1, use_l2, use_l1, wd, decay, widened, p, g)


@fold_grad.register("Tensor", "Bool", "Tensor")
def _fold_grad(lr, folded, g):
    """lr * g for a folded parameter (its gradient is float32), else g."""
    if folded:
        return g * F.cast(lr, F.dtype(g))
    return g


@fold_lr.register("Tensor", "Tensor", "Bool")
def _fold_lr(one, lr, folded):
    """The learning rate a parameter is stepped with: 1 when its gradient carries lr."""
    if folded:
        return one
    return lr


class LocalGrads:
    """DGCMomentum's graph code over this worker's gradients, before the exchange (a
    mixin of the optimizer)."""

    def _local_grads(self, gradients, weight_decay):
        """This worker's gradients in the one preprocessing order (_step.py): a widened
        parameter's gradient in float32, the loss scale divided out, the local clip, then
        regularization (against the parameter's value, in float32 for a widened one).
        Each stage is one map over the tuple (a Python loop would cost the graph compiler
        about 10 ms and 10 levels of call depth per parameter)."""
        grads = gradients
        if self.any_widened:
            grads = self.hyper_map(widen, self.widened, grads)
        grads = self.unscale_and_clip(grads, self.loss_scale != 1.0, self.inv_scale,
                                      self.local_clip)
        if self.exec_weight_decay:
            if self.is_group:
                return self.hyper_map(F.partial(regularize, self.l2_t, self.l1_t, self.l2 > 0,
                                                self.l1 > 0), weight_decay, self.decay_flags,
                                      self.widened, self._parameters, grads)
            return self.hyper_map(F.partial(regularize, self.l2_t, self.l1_t, self.l2 > 0,
                                            self.l1 > 0, weight_decay), self.decay_flags,
                                  self.widened, self._parameters, grads)
        if self.l2 > 0 or self.l1 > 0:
            return self.hyper_map(F.partial(regularize, self.l2_t, self.l1_t, self.l2 > 0,
                                            self.l1 > 0, self.l2_t), self.no_decay,
                                  self.widened, self._parameters, grads)
        return grads

    def _fold_lr(self, lr, grads):
        """lr_in_residuals: the compressed and bucketed parameters' gradients multiplied by
        their learning rates, and the learning rates the step applies (1 for those, per
        parameter)."""
        if self.is_group_lr:
            return (self.hyper_map(fold_grad, lr, self.folded, grads),
                    self.hyper_map(F.partial(fold_lr, self.one), lr, self.folded))
        return (self.hyper_map(F.partial(fold_grad, lr), self.folded, grads),
                self.hyper_map(F.partial(fold_lr, self.one, lr), self.folded))
