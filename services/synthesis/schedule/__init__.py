"""Schedules: the IR of the paper's transfer tuples, the alpha-beta cost model, the model checker and
the summary reports (DESIGN section 2), the size limits of a schedule, and the GPU graph of hierarchical
collectives with their per-phase cost."""
