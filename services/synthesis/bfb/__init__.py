"""Breadth-first-broadcast (BFB) schedules: the per-step linear programs (paper section 6), the
schedule-free evaluator and its compiled kernels, the heterogeneous and discrete variants, BFB near a
vertex-transitive topology, BFB on the fastest links only, the greedy link-chunk scheduler (TACOS) it is compared
with, schedules after link failures, and the comparison of every builder (with tree packing, forest/)."""
