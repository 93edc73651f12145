"""What DGCMomentum reports of itself: which parameters it compresses, the stage of a
step, and what a worker sends (``exchange_stats``, from ``wire.py``'s model)."""
from .. import _checks
from . import wire
from .plan import applied_entries


class ExchangeReports:
    """DGCMomentum's reports, read from its plan (``self.plan``), its exchanges and, with
    ``sparsity="auto"``, its choice (``self.auto``)."""

    @property
    def compressed_params(self):
        """Names of the parameters DGC compresses (float32 or float16, >= 16384 elements)."""
        return [self._parameters[i].name for i in self.comp_ids]

    @property
    def bucketed_params(self):
        """Names of the parameters compressed together as one bucket (``bucket_sparsity``)."""
        return [self._parameters[i].name for i in self.bucket_ids]

    def stage(self, step):
        """Index into `sparsity` used at `step` (counted from 0), or None for a dense step
        (before compression; with ``sparsity="auto"``, also when it chose dense or has not
        chosen yet by `step`, and the index is into ``SPARSITY_CHOICES``).  TypeError when
        `step` is not an int, ValueError when it is negative."""
        step = self._step_arg(step)
        if self.auto is None:
            return self.plan.stage(step)
        return self.auto.branch(step)[0]

    def _step_arg(self, step):
        """A step asked about: an int (Python's or numpy's, not a bool), >= 0."""
        return _checks.check_non_negative(self._NAME, "step",
                                          _checks.check_int(self._NAME, "step", step))

    def _plan_exchange(self, stage, workers):
        """How stage `stage`'s selections cross `workers` workers: the `exchange` asked
        for, or for "auto" 'allgather' of the (index, value) entries or 'allreduce' of the
        sparsified gradient, whichever sends fewer bytes."""
        return wire.stage_exchange(self.exchange, sum(self.stage_k[stage]),
                                   self.summed_exchange.send_elements, workers)

    def _plan_bucket_exchange(self, stage, workers):
        """How the bucket's selection crosses `workers` workers at stage `stage`, as
        `exchange` says (None without a bucket)."""
        if not self.bucket_ids:
            return None
        return wire.stage_exchange(self.exchange, self.plan.bucket_k[stage],
                                   self.plan.bucket_numel, workers)

    def exchange_stats(self, step=None, workers=None):
        """What one worker sends at `step` (default: the next step) against dense fp32 gradients.

        ``exchange`` is how the compressed parameters' gradients cross the
        workers at that step: "dense" before ``rampup_begin_step``, then per
        warm-up stage "allgather" (k int32 indices and k float32 values per
        parameter) or "allreduce" (the sparsified gradient, 4 bytes per
        element), with ``exchange="auto"`` the cheaper one for the number of
        workers (see ``wire.choose_sparse_exchange``); or "union" or "leader"
        when asked for (``selected`` is then the entries applied:
        ``workers * max(1, k // workers)`` per parameter for "union").  ``bytes``
        is what the worker puts into the collectives' buffers; ``wire_bytes`` is
        the payload one host sends for them with MindSpore's CPU collectives
        (``wire.WIRE_FACTOR``; headers of the network protocols not included).  `workers` (default:
        the world size) asks what would be sent among that many workers.  TypeError when
        `step` or `workers` is not an int, ValueError when `step` < 0 or `workers` < 1.
        """
        if step is None:
            step = int(self.global_step.asnumpy().reshape(-1)[0])
        step = self._step_arg(step)
        workers = self.nranks if workers is None else _checks.check_int(
            self._NAME, "workers", workers)
        if workers < 1:
            raise ValueError(f"For '{self._NAME}', the 'workers' must be >= 1, but got {workers}.")
        stats = self._stats_at(self.stage(step), step, workers)
        if self.auto is not None:
            stats["auto"] = dict(self.auto.report(), dense_head=self.dense_head)
        return stats

    def _stats_at(self, stage, step, workers):
        """exchange_stats of `stage` (None: dense) at `step` among `workers` workers."""
        exchange = "dense" if stage is None else (
            self.stage_exchange[stage] if workers == self.nranks else
            self._plan_exchange(stage, workers))
        selected = 0 if stage is None else applied_entries(self.stage_k[stage], exchange,
                                                            workers)
        # the bucket (sent with the small tensors before compression)
        bucket = dict(bucket_elements=self.plan.bucket_numel)
        if stage is not None and self.bucket_ids:
            how = (self.bucket_exchange[stage] if workers == self.nranks
                   else self._plan_bucket_exchange(stage, workers))
            bucket.update(bucket_exchange=how, bucket_selected=applied_entries(
                (self.plan.bucket_k[stage],), how, workers))
        return wire.exchange_stats(
            step=step, stage=stage, sparsity=None if stage is None else self.sparsity[stage],
            workers=workers, exchange=exchange, selected=selected,
            small_elements=self.dense_exchange.send_elements,
            compressed_elements=self.summed_exchange.send_elements,
            # the signature check's gather
            signature_bytes=4 * int(self.replicas.width.asnumpy()[0]), **bucket)
