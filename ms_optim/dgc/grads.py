"""The maps DGCMomentum runs over this worker's gradients before the exchange
(``DGCMomentum._local_grads``): ``widen`` (a widened parameter's gradient in
float32) and ``regularize`` (MindSpore's weight decay, then L2Decay, then
L1Decay).  The loss scale and the clip between them are StepSkeleton's
``unscale_and_clip``.  With ``lr_in_residuals``, ``fold_grad`` then multiplies
a compressed or bucketed parameter's gradient by its learning rate, and
``fold_lr`` gives that parameter a learning rate of 1 (``DGCMomentum._fold_lr``)."""
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
