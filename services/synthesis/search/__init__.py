"""Topology search: expansion schedules (Definitions 1, 2, 14; the expanded graphs are topology.expansions),
the base catalogue, candidate generation, schedule construction, the Pareto finder and workload selection (paper
section 7), and hierarchical collectives from the finder's host schedules."""
