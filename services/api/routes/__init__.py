"""One router per resource: plans, fabrics, panels, frontiers, topologies, artifacts, health."""
