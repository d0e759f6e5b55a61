"""Topologies: the digraph class, the expression grammar, the generative families, the catalogued
distance-regular graphs, the expansion operators (line graph, degree expansion, Cartesian products) and
building a graph from its expression (DESIGN section 3)."""
