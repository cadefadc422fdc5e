"""What the recorder writes and the analyser reads: the manifest's name and schema version.

The recorder (this package) runs on training nodes with the standard library alone; the analyser
(``ingest/formats/manifest.py``) reads the manifest it writes. Both take these from here, and only
these: this module imports nothing.
"""

# The manifest file at the top of every bundle the recorder writes.
MANIFEST_NAME = "aftertrace-manifest.json"

# The manifest's ``"schema"`` value, its first key. The number changes when a key is removed or
# changes meaning; keys are added without one (a reader ignores what it does not know).
SCHEMA = "aftertrace.collect/1"
