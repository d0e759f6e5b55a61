"""Topology search: expansions (line graph, degree expansion, Cartesian products), the base catalogue,
candidate generation, schedule construction, the Pareto finder and workload selection (paper section 7)."""
