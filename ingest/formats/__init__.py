"""One module per input format. ``PARSERS`` is the registry's list."""
from .dmesg import DmesgCtimeParser, DmesgRawParser
from .host_info import HostInfoParser

PARSERS = (
    DmesgRawParser,
    DmesgCtimeParser,
    HostInfoParser,
)
