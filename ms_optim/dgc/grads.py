"""The maps DGCMomentum runs over this worker's gradients before the exchange
(``DGCMomentum._local_grads``): ``widen`` (a widened parameter's gradient in
float32) and ``regularize`` (MindSpore's weight decay, then L2Decay, then
L1Decay).  The loss scale and the clip between them are StepSkeleton's
``unscale_and_clip``."""
from mindspore import ops
from mindspore import dtype as mstype
from mindspore.ops import composite as C
from mindspore.ops import functional as F

widen = C.MultitypeFuncGraph("ms_optim_dgc_widen")
regularize = C.MultitypeFuncGraph("ms_optim_dgc_regularize")


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
