"""DGCMomentum's exchange (``ms_optim.dgc.exchange``: what crosses the workers) and
its wire model (``ms_optim.dgc.wire``), by their names in one module."""
from .dgc.exchange import (DenseExchange, ReplicaSync, SparseExchange,
                           check_stand_alone_in_graph, model_signature, parallel_mode,
                           require_stand_alone, world_size)
from .dgc.wire import (SPARSE_ENTRY_BYTES, WIRE_FACTOR, allgather_wire_bytes,
                       allreduce_wire_bytes, choose_sparse_exchange)

__all__ = ["SPARSE_ENTRY_BYTES", "WIRE_FACTOR", "DenseExchange", "ReplicaSync", "SparseExchange",
           "allgather_wire_bytes", "allreduce_wire_bytes", "check_stand_alone_in_graph",
           "choose_sparse_exchange", "model_signature", "parallel_mode", "require_stand_alone",
           "world_size"]
