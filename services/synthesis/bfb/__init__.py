"""Breadth-first-broadcast (BFB) schedules: the per-step linear programs (paper section 6), the
schedule-free evaluator and its compiled kernels, and the heterogeneous and discrete variants."""
