"""Line-oriented job logs: one engine, two formats.

A job's stdout interleaves the launcher's lines, PyTorch's C++ and Python logging, tracebacks and
NCCL's debug lines, so both log formats are read by one engine, whichever of them claimed a file:

* :mod:`.engine` reads the lines chunk by chunk: wrapper prefixes, line families, messages,
  multi-line blocks, times and ranks, and what is one event and what is collapsed (its docstring
  has the whole flow).
* :mod:`.grammar` is what a line is read as, as data: the wrappers, the line families, the
  messages, the step and rank patterns, the block patterns.
* :mod:`.blocks` groups and walks the multi-line blocks (tracebacks, faulthandler dumps,
  ChildFailedError summaries) and makes their rows.
* :mod:`.nccl_grammar` is the NCCL line grammar the engine applies (header, INFO facts, WARN
  classes, the collapsing of repetitive INFO lines).
* :mod:`.logtime` turns the families' stamps into times (zone, year, untimed lines);
  :mod:`.c10phase` reads the wall clock's phase from c10's stamps.
* :mod:`.frames` holds the frame helpers the grammars share.
* :mod:`.applog` (``app_log``) and :mod:`.nccl` (``nccl_log``) are the two parsers: each is the
  dry run of its format and hands the file to the engine.
"""
from .applog import AppLogParser
from .nccl import NcclLogParser

PARSERS = (AppLogParser, NcclLogParser)
