"""HTTP gateway (FastAPI)."""
