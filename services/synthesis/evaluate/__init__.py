"""Evaluating topologies beyond one collective: all-to-all throughput, today's baselines and a workload's time
on them, training iterations."""
