"""DGCMomentum's exchange under its short name: ``ms_optim.dgc.exchange`` (what
crosses the workers) and its wire model."""
from .dgc.exchange import (SPARSE_ENTRY_BYTES, WIRE_FACTOR, DenseExchange, ReplicaSync,
                           SparseExchange, allgather_wire_bytes, allreduce_wire_bytes,
                           check_stand_alone_in_graph, choose_sparse_exchange, model_signature,
                           parallel_mode, require_stand_alone, world_size)

__all__ = ["SPARSE_ENTRY_BYTES", "WIRE_FACTOR", "DenseExchange", "ReplicaSync", "SparseExchange",
           "allgather_wire_bytes", "allreduce_wire_bytes", "check_stand_alone_in_graph",
           "choose_sparse_exchange", "model_signature", "parallel_mode", "require_stand_alone",
           "world_size"]
