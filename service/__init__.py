"""The planning service (FastAPI)."""
