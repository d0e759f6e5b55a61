"""Topologies: the digraph class, the expression grammar, the generative families, the catalogued
distance-regular graphs and building a graph from its expression (DESIGN section 3)."""
