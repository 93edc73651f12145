"""DGCMomentum's wire model: the bytes its collectives carry, in plain Python.

What a collective puts on the wire (``allreduce_wire_bytes``,
``allgather_wire_bytes``, ``broadcast_wire_bytes``) is MindSpore 2.10's CPU
collectives as measured with interface counters between network namespaces: a
host sends ``WIRE_FACTOR`` times what a bandwidth-optimal ring needs, for
AllReduce and AllGather alike; a Broadcast's root sends the buffer to each other
worker, which sends it on once.
``choose_sparse_exchange`` picks, per warm-up stage, the collective that sends
fewer bytes (from 4 workers on, the union of shared indices among them), and
``exchange_stats`` adds up what one worker sends at a step.
No MindSpore here: the optimizer feeds these functions its sizes.

Examples:
    >>> from ms_optim.dgc import wire
    >>> wire.allreduce_wire_bytes(1000, 4), wire.allgather_wire_bytes(1000, 4)
    (3000.0, 6000.0)
    >>> wire.choose_sparse_exchange(selected=249, elements=1000, nranks=2)
    'allgather'
    >>> wire.choose_sparse_exchange(selected=249, elements=1000, nranks=4)  # shared indices
    'union'
    >>> s = wire.exchange_stats(step=5, stage=0, sparsity=0.75, workers=2, exchange="allgather",
    ...                         selected=250, small_elements=10, compressed_elements=1000,
    ...                         signature_bytes=28)
    >>> s["bytes"], s["wire_bytes"], s["dense_bytes"], s["compression"]
    (2040, 4136, 4040, 1.9803921568627452)
"""

# Measured (tx_bytes of each host's interface, 2, 4 and 8 hosts): an AllReduce of B
# bytes sent 2.0 B per host with 2 hosts, 3.0 B with 4 and 3.6 B with 8, an
# AllGather of b bytes per worker 2 (N - 1) b: twice a ring's 2 (N - 1) / N B and
# (N - 1) b.  A Broadcast of b bytes: (N - 1) b from the root and b from each other
# host, 2 (N - 1) / N b per host on average.
WIRE_FACTOR = 2.0
FLOAT32_BYTES = 4  # a dense or sparsified gradient's element on the wire
INDEX_BYTES = 4  # an int32 index
SPARSE_ENTRY_BYTES = INDEX_BYTES + FLOAT32_BYTES
# exchange="auto" considers the union of shared indices from this many workers on: the
# exact exchange's bytes per host grow with the workers (5.99x from 2 to 8 hosts for the
# link experiment's MLP), the union's stay near flat (1.78x), and its accuracy stayed
# within 0.22 points of the exact exchange's at 2, 4 and 8 hosts (benchmarks/README.md,
# "DGC across 2, 4 and 8 hosts"); at 2 and 3 workers it saves little
UNION_FROM_WORKERS = 4

EXCHANGES = ("auto", "allgather", "allreduce", "leader", "union")


def allreduce_wire_bytes(nbytes, nranks):
    """Payload bytes one host sends for an AllReduce of `nbytes` among `nranks` hosts."""
    return 0.0 if nranks < 2 else WIRE_FACTOR * 2.0 * (nranks - 1) / nranks * nbytes


def allgather_wire_bytes(nbytes, nranks):
    """Payload bytes one host sends for an AllGather of `nbytes` per worker among `nranks`."""
    return 0.0 if nranks < 2 else WIRE_FACTOR * (nranks - 1) * nbytes


def broadcast_wire_bytes(nbytes, nranks):
    """Payload bytes a host sends for a Broadcast of `nbytes` among `nranks` hosts, on
    average over the hosts (the root sends more; a root that rotates evens it out)."""
    return 0.0 if nranks < 2 else WIRE_FACTOR * (nranks - 1) / nranks * nbytes


def choose_sparse_exchange(selected, elements, nranks):
    """'allgather' of the `selected` entries (index + value) or 'allreduce' of the
    `elements` float32 of the sparsified gradient: whichever sends fewer bytes
    for `nranks` workers (with the model above: gather while selected * nranks
    < elements).  Both give the same sum; ties go to the AllReduce.  From
    ``UNION_FROM_WORKERS`` workers on, 'union' (each worker's
    ``max(1, selected // nranks)`` proposals, the values at all of them summed) when
    it sends fewer bytes than both."""
    gather = allgather_wire_bytes(SPARSE_ENTRY_BYTES * selected, nranks)
    reduce = allreduce_wire_bytes(FLOAT32_BYTES * elements, nranks)
    exact = "allgather" if nranks < 2 or gather < reduce else "allreduce"
    if nranks >= UNION_FROM_WORKERS:
        # schedule.union_k per worker, written here: this module imports nothing
        proposed = nranks * max(1, selected // nranks)
        if sparse_part("union", proposed, elements, nranks)[2] < min(gather, reduce):
            return "union"
    return exact


def stage_exchange(choice, selected, elements, nranks):
    """How a stage's selections cross `nranks` workers: `choice` ('allgather',
    'allreduce', 'leader' or 'union', DGCMomentum's `exchange`), or for 'auto' the cheaper
    of the two exact ones, or from ``UNION_FROM_WORKERS`` workers the union where it is
    cheaper still (``choose_sparse_exchange``)."""
    if choice != "auto":
        return choice
    return choose_sparse_exchange(selected, elements, nranks)


def sparse_part(exchange, selected, elements, workers):
    """(index bytes, value bytes, wire bytes) of one worker's share of a sparse exchange:
    `exchange` "allgather", "leader", "union" (`selected` the entries applied: for the
    union ``workers`` times each worker's proposals) or "allreduce" (and "dense": the
    `elements` in float32)."""
    index_bytes, value_bytes = INDEX_BYTES * selected, FLOAT32_BYTES * selected
    if exchange == "union":  # each worker's share of the indices, gathered
        index_bytes //= workers
        return (index_bytes, value_bytes, allgather_wire_bytes(index_bytes, workers)
                + allreduce_wire_bytes(value_bytes, workers))
    if exchange == "leader":
        return (index_bytes, value_bytes, broadcast_wire_bytes(index_bytes, workers)
                + allreduce_wire_bytes(value_bytes, workers))
    if exchange == "allgather":
        return index_bytes, value_bytes, allgather_wire_bytes(index_bytes + value_bytes, workers)
    value_bytes = FLOAT32_BYTES * elements  # dense, or the sparsified gradient
    return 0, value_bytes, allreduce_wire_bytes(value_bytes, workers)


def exchange_stats(*, step, stage, sparsity, workers, exchange, selected, small_elements,
                   compressed_elements, signature_bytes, bucket_elements=0, bucket_selected=0,
                   bucket_exchange=None):
    """What one worker sends at `step` against dense float32 gradients (the dict of
    ``DGCMomentum.exchange_stats``).

    `exchange` is "dense" (before compression), "allgather", "allreduce",
    "leader" (the leader's int32 indices broadcast, then the float32 values there
    all-reduced: ``bytes`` counts both buffers, as every worker's, and
    ``wire_bytes`` the average host's) or "union" (each worker's selected /
    workers int32 indices all-gathered, then the float32 values at all of them
    all-reduced); `selected` the entries the stage applies (the sum of k, for
    "union" of workers * max(1, k // workers); not sent when dense);
    `small_elements` and `compressed_elements` the elements of the parameters
    always sent dense and of the compressed ones; `signature_bytes` what each
    worker's replica check gathers.  The buffers are the exchange's fused ones:
    small tensors and (before compression, or with the AllReduce exchange) the
    compressed ones in float32, selections as index + value (``sparse_part``).

    The bucket of small parameters (`bucket_elements`, none without
    ``bucket_sparsity``) is sent dense before compression, then as its own buffers,
    `bucket_exchange` of its `bucket_selected` applied entries (``bucket_bytes``; the
    large parameters' buffers are ``sparse_part_bytes``).
    """
    bucketed = exchange != "dense" and bucket_elements > 0
    if not bucketed:  # sent with the small tensors
        small_elements, bucket_elements, bucket_selected = small_elements + bucket_elements, 0, 0
    selected = 0 if exchange == "dense" else selected
    small_bytes = FLOAT32_BYTES * small_elements
    index_bytes, value_bytes, sparse_wire = sparse_part(exchange, selected,
                                                        compressed_elements, workers)
    bucket_bytes, bucket_wire = 0, 0.0
    if bucketed:
        b_index, b_value, bucket_wire = sparse_part(bucket_exchange, bucket_selected,
                                                    bucket_elements, workers)
        bucket_bytes = b_index + b_value
    sparse_bytes = index_bytes + value_bytes
    sent_bytes = small_bytes + sparse_bytes + bucket_bytes
    wire = (allreduce_wire_bytes(small_bytes, workers)
            + allgather_wire_bytes(signature_bytes, workers) + sparse_wire + bucket_wire)
    dense_elements = small_elements + compressed_elements + bucket_elements
    dense_bytes = FLOAT32_BYTES * dense_elements
    entries = ("allgather", "leader", "union")  # sent as indices and values
    return {"step": step, "stage": stage, "sparsity": sparsity, "workers": workers,
            "exchange": exchange,
            "elements": (small_elements
                         + (selected if exchange in entries else compressed_elements)
                         + (bucket_selected if bucket_exchange in entries
                            else bucket_elements)),
            "selected": selected, "bytes": sent_bytes, "wire_bytes": int(round(wire)),
            "dense_part_bytes": small_bytes, "sparse_part_bytes": sparse_bytes,
            "bucket_exchange": bucket_exchange if bucketed else None,
            "bucket_selected": bucket_selected, "bucket_bytes": bucket_bytes,
            "dense_elements": dense_elements, "dense_bytes": dense_bytes,
            "dense_wire_bytes": int(round(allreduce_wire_bytes(dense_bytes, workers))),
            "compression": dense_bytes / sent_bytes}
