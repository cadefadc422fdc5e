"""``python -m aftertrace.ingest.collect ...``: the recorder without the analysis stack loaded."""
import sys

from . import main

sys.exit(main())
