"""One router per resource (FastAPI's "bigger applications" layout)."""
