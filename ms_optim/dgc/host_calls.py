"""DGCMomentum called from Python: the step's branch chosen on the host.

Called from Python (a PyNative loop, ms.Model in PyNative, or the optimizer on its own in
GRAPH_MODE), DGCMomentum chooses each step's branch on the host and compiles it in as a
constant, one small graph per branch, with no control flow on the device (which costs
MindSpore's runtime 0.3 to 3 ms a step on a CPU).  The host counts the steps it ran, reading
global_step only when it has no count (first, or after a failed step); the workers' check
compares the count with global_step on the device, and when global_step was set since (a
compiled train step ran, say) the step fails before anything is applied and runs again on a
fresh read.  Inside a compiled train step (TrainOneStepCell in GRAPH_MODE, ms.jit) MindSpore
compiles construct itself and the graph branches on the device.
"""
import numpy as np
from mindspore import Tensor, mutable, nn

from .checkpoints import check_failure, refused_step, stale_step

# construct's branch for the step on which sparsity="auto" leaves its probe for dense steps,
# and for its dense steps after that
_FLUSH, _DECIDED_DENSE = -3, -4


class HostBranches:
    """DGCMomentum's calls from Python (the module's docstring): the branch of each step,
    and the workers' check's refusal raised as the ValueError it is."""

    def __call__(self, *args, **kwargs):
        # opt(gradients) alone: construct's other arguments are the host's to give
        grads = self._call_gradients(args, kwargs)
        try:
            return self._call(grads)
        except RuntimeError as exc:
            failure = check_failure(exc)
            if failure is None:
                raise
            raise refused_step(self._NAME, failure) from None

    def _call(self, grads):
        if not self.host_branches:
            return super().__call__(grads)
        self._check_python_gradients(grads)
        # (marked mutable: the same graph serves any gradient values, without MindSpore's
        # warning when a second branch compiles)
        grads = mutable(grads) if isinstance(grads, tuple) else grads
        try:
            return self._counted_step(grads)
        except RuntimeError as exc:
            if not stale_step(check_failure(exc)):
                raise
        return self._counted_step(grads)  # global_step was set since: read, and again

    def _counted_step(self, grads):
        """One step from Python, its branch that of the host's count of steps (global_step
        read when there is none); the count is dropped when the step fails."""
        if self._host_step is None:
            self._host_step = int(self.global_step.asnumpy().reshape(-1)[0])
        step = self._host_step
        try:
            done = nn.Optimizer.__call__(self, grads, *self._branch_at(step),
                                         Tensor(np.array([step], np.int32)))
        except BaseException:
            self._host_step = None
            raise
        self._host_step = step + 1
        return done

    def _branch_at(self, step):
        """construct's constants for `step`: the stage (-1 for the dense warm-up) and whether
        the workers' parameters are compared first (step 0, several workers).  Without a
        warm-up (nothing compressed) every step takes the first stage's branch, as on the
        device."""
        if self.auto is None:
            stage = self.plan.stage(step)
        else:
            stage, leaves_probe = self.auto.branch(step)
            if leaves_probe:
                return _FLUSH, False  # sparsity="auto" leaves the probe for dense steps
            if stage is None and step > self.auto.choose_begin:
                return _DECIDED_DENSE, False  # it chose dense: a plain dense step
        if stage is None:
            stage = -1 if self.has_warmup else self.stage_bounds[0][0]
        return stage, self.nranks > 1 and step == 0
