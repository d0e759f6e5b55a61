"""The synthesis library (paper sections 5-9): topologies and their collective schedules. A stack of
subpackages, each importing only those below it: topology < schedule < forest < bfb < search < evaluate
(docs/architecture.md, "Layout"; tests/project/test_import_graph.py enforces it)."""
