"""Bundle intake, the format parsers and the event model.

Nothing here knows about HTTP or the store: parsers write typed row batches
(:mod:`ingest.sink`) that the pipeline loads.
"""
__version__ = "0.1.0"
