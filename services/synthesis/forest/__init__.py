"""Throughput-optimal allgather on heterogeneous links by spanning out-tree packing (the cut bound; ForestColl,
Zhao et al. 2024): the packing (`packing`) on a compiled max-flow (`flow`), and each packing pipelined as a
step schedule (`pipeline`)."""
