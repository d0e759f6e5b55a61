"""Evaluating topologies beyond one collective: all-to-all throughput and today's baselines."""
