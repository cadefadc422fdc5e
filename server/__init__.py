"""aftertrace server: service layer, store, CLI and the FastAPI app."""
