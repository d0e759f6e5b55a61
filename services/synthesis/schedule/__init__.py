"""Schedules: the IR of the paper's transfer tuples, the alpha-beta cost model, the model checker and
the summary reports (DESIGN section 2)."""
