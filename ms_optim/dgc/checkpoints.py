"""DGCMomentum checkpoints across world sizes.

Each worker's residuals ``dgc_u.<name>`` and ``dgc_v.<name>`` are its own, and the
optimizer saves the number of workers they belong to as ``dgc_world_size`` and the rank
that holds them as ``dgc_rank``. A run that loads residuals saved by another number of
workers refuses to step (dropping a missing worker's ``v`` would lose gradient that was
never applied), and so does a run in which a worker loaded another rank's (its own would
be lost, the other's applied twice); ``resize_checkpoints`` converts one step's
per-worker checkpoints for a new number of workers first.  A state saved without
``dgc_rank`` is taken as the loading worker's own.  The state also saves, as
``dgc_residual_kind``, what each parameter's residuals hold (none, gradients or
learning-rate-scaled gradients); a run that would drop them or read them as another kind
refuses to step on them.

The rule (docs/dgc.md#resuming-at-another-number-of-workers): every new worker's ``u``
and ``v`` are the mean of the old workers'. The exchange divides the sum of the workers'
selections by the world size N, so the update the residuals still hold is
``sum_r v_r / N``; with N' workers each holding the mean it is
``N' * mean / N' = sum_r v_r / N``, the same. The same holds for ``u``, the momentum:
the update it carries into later steps is conserved.
"""
import os

import numpy as np

import mindspore as ms

from .. import _checks
from .auto import CHOICE_NAME

WORLD_SIZE_NAME = "dgc_world_size"
RANK_NAME = "dgc_rank"
# nn.Optimizer's step count
STEP_NAME = "global_step"
# per parameter, the kind of its residuals: none (sent dense: u is the momentum of the
# workers' mean gradient), gradients, or learning-rate-scaled gradients (lr_in_residuals)
RESIDUAL_KIND_NAME = "dgc_residual_kind"
RESIDUAL_NONE, RESIDUAL_GRADIENTS, RESIDUAL_LR_SCALED = 0, 1, 2
# the residuals' Parameters are named "<prefix>.<parameter name>"
U_PREFIX, V_PREFIX = "dgc_u", "dgc_v"
RESIDUAL_PREFIXES = (U_PREFIX + ".", V_PREFIX + ".")


def residual_kind(compressed, folded):
    """The residual kind of a parameter that DGC compresses (alone or in the bucket) or
    not, and whose residuals fold the learning rate or not."""
    if not compressed:
        return RESIDUAL_NONE
    return RESIDUAL_LR_SCALED if folded else RESIDUAL_GRADIENTS


_CHECK = "ms_optim_check_replicas"


def check_failure(exc):
    """(code, message) of the workers' check (ms_optim_check_replicas,
    ops/aot/aot_replicas.cpp) when it failed the step that raised MindSpore's RuntimeError
    `exc` (which shows only the kernel's return code), the message without the entry's
    name; None when `exc` is another error."""
    if _CHECK not in str(exc):
        return None
    from .._native import last_kernel_failure
    code, message = last_kernel_failure()
    if not message.startswith(_CHECK + ": "):
        return None
    return code, message[len(_CHECK) + 2:]


def stale_step(failure):
    """Whether the check's `failure` (check_failure's) says a branch was compiled for another
    step than global_step's (MSOPT_ERR_STALE): the caller reads global_step and runs the
    step again."""
    from ..capi import ERR_STALE
    return failure is not None and failure[0] == ERR_STALE


def refused_step(cls, failure):
    """The ValueError for a step of optimizer `cls` that the workers' check refused with
    `failure` (check_failure's), whose message names the parameter or the rank and what to
    do."""
    return ValueError(f"For '{cls}', {failure[1]}.")


def resize_checkpoints(sources, world_size, dest):
    """Converts one step's DGCMomentum checkpoints, one per worker, for another number of
    workers.

    Every new worker's residuals (``dgc_u.*``, ``dgc_v.*``) are the mean of the old
    workers' (summed in float64, stored in their dtype), which keeps the update they still
    hold: the exchange divides the workers' sum by the world size, and
    ``world_size * mean / world_size`` is the old ``sum / len(sources)``. Every other entry
    (the model, ``global_step``, the learning rate) is rank 0's: DGCMomentum keeps the
    model identical on every worker. ``dgc_world_size`` becomes `world_size`, and each new
    file's ``dgc_rank`` the rank that loads it.

    Args:
        sources (Union[list[str], tuple[str]]): the checkpoint files of one step, one per
            worker of the saving run, in rank order.
        world_size (int): the number of workers that resume (at least 1).
        dest (str): the path of each new checkpoint, with ``{rank}`` where the new rank
            goes, e.g. ``"resume/rank{rank}.ckpt"``. Missing folders are created.

    Returns:
        list[str], the new checkpoint files in rank order.

    Raises:
        TypeError: If `sources` is not a list or tuple of str, `world_size` not an int or
            `dest` not a str.
        ValueError: If `sources` is empty, a file is missing or holds no DGCMomentum
            residuals, the files' entries differ in names, shapes or dtypes, their
            ``dgc_world_size`` is not the number of files, a file's ``dgc_rank`` is not its
            place in `sources`, their ``dgc_residual_kind``, ``global_step`` or
            ``dgc_auto_choice`` differ, `world_size` is not positive, or `dest` has no
            ``{rank}`` or names a source file.

    Supported Platforms:
        ``CPU`` ``GPU`` ``Ascend``

    Examples:
        >>> import ms_optim
        >>> files = [f"ckpt/rank_{r}/net-5_100.ckpt" for r in range(4)]  # doctest: +SKIP
        >>> ms_optim.dgc.resize_checkpoints(files, 2, "resume/rank{rank}.ckpt")  # doctest: +SKIP
        ['resume/rank0.ckpt', 'resume/rank1.ckpt']
    """
    name = "resize_checkpoints"
    if not isinstance(sources, (list, tuple)) or not all(isinstance(s, str) for s in sources):
        raise TypeError(f"For '{name}', 'sources' must be a list or tuple of checkpoint paths "
                        f"(str), but got {sources!r}.")
    if not sources:
        raise ValueError(f"For '{name}', 'sources' must name one checkpoint per worker, but "
                         f"got none.")
    world_size = _checks.check_positive(name, "world_size",
                                        _checks.check_int(name, "world_size", world_size))
    if not isinstance(dest, str):
        raise TypeError(f"For '{name}', 'dest' must be a str, but got "
                        f"{type(dest).__name__}.")
    if "{rank}" not in dest:
        raise ValueError(f"For '{name}', 'dest' must contain '{{rank}}' where each new "
                         f"worker's rank goes, but got {dest!r}.")
    targets = [dest.replace("{rank}", str(rank)) for rank in range(world_size)]
    overwritten = {os.path.abspath(t) for t in targets} & {os.path.abspath(s) for s in sources}
    if overwritten:
        raise ValueError(f"For '{name}', 'dest' would overwrite the source checkpoint "
                         f"{sorted(overwritten)[0]!r}: write the new ones elsewhere.")
    states = [_load(name, path) for path in sources]
    first = states[0]
    for path, state in zip(sources[1:], states[1:]):
        _check_same_entries(name, sources[0], first, path, state)
    if not any(k.startswith(RESIDUAL_PREFIXES) for k in first):
        raise ValueError(f"For '{name}', the checkpoint {sources[0]!r} holds no DGCMomentum "
                         f"residuals (entries named dgc_u.* or dgc_v.*).")
    if WORLD_SIZE_NAME in first:
        for path, state in zip(sources, states):
            saved = int(state[WORLD_SIZE_NAME].reshape(-1)[0])
            if saved != len(sources):
                raise ValueError(f"For '{name}', the checkpoint {path!r} was saved by {saved} "
                                 f"worker(s), but 'sources' names {len(sources)} checkpoint(s): "
                                 f"give one per worker of that run.")
    if RANK_NAME in first:
        for rank, (path, state) in enumerate(zip(sources, states)):
            saved = int(state[RANK_NAME].reshape(-1)[0])
            if saved != rank:
                raise ValueError(f"For '{name}', the checkpoint {path!r} holds the residuals of "
                                 f"rank {saved}, but is sources[{rank}]: give each worker's "
                                 f"checkpoint once, in rank order.")
    for key in (STEP_NAME, CHOICE_NAME):  # what every worker of one save holds alike
        values = [state[key].reshape(-1).tolist() for state in states] if key in first else []
        for path, value in zip(sources, values):
            if value != values[0]:
                raise ValueError(f"For '{name}', the checkpoints' {key} differ ({values[0]} in "
                                 f"{sources[0]!r}, {value} in {path!r}): they are not one "
                                 f"save's; give the checkpoints of one step.")
    if RESIDUAL_KIND_NAME in first:
        kinds = {tuple(state[RESIDUAL_KIND_NAME].reshape(-1).tolist()) for state in states}
        if len(kinds) > 1:
            raise ValueError(f"For '{name}', the checkpoints' {RESIDUAL_KIND_NAME} differ: "
                             f"their residuals are not of one kind (another lr_in_residuals "
                             f"or bucket_sparsity), so they are not one run's.")
    merged = {}
    for key, value in first.items():
        if key.startswith(RESIDUAL_PREFIXES):
            total = np.zeros(value.shape, np.float64)
            for state in states:
                total += state[key]
            merged[key] = (total / len(states)).astype(value.dtype)
        else:
            merged[key] = value
    merged[WORLD_SIZE_NAME] = np.array([world_size], np.int32)
    for rank, path in enumerate(targets):
        merged[RANK_NAME] = np.array([rank], np.int32)
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        ms.save_checkpoint([{"name": k, "data": ms.Tensor(v)} for k, v in merged.items()], path)
    return targets


def _load(name, path):
    """A checkpoint's entries as numpy arrays, by name."""
    if not os.path.isfile(path):
        raise ValueError(f"For '{name}', the checkpoint {path!r} does not exist.")
    return {k: v.asnumpy().copy() for k, v in ms.load_checkpoint(path).items()}


def _check_same_entries(name, path0, state0, path, state):
    if state.keys() != state0.keys():
        diff = sorted(set(state) ^ set(state0))
        raise ValueError(f"For '{name}', the checkpoints {path0!r} and {path!r} hold different "
                         f"entries (for instance {diff[0]!r}): they are not one run's workers.")
    for key, value in state.items():
        if value.shape != state0[key].shape or value.dtype != state0[key].dtype:
            raise ValueError(f"For '{name}', the entry {key!r} is {value.dtype}{list(value.shape)} "
                             f"in {path!r} but {state0[key].dtype}{list(state0[key].shape)} in "
                             f"{path0!r}.")
