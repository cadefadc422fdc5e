"""Kernel logs: one engine, every format that carries the kernel's ring buffer.

* :mod:`.engine` is what every kernel-log format shares: the record frame, boots, continuation
  lines, crash reports and their classification, the events written (its docstring has the
  algorithm), and the frame helpers the formats use to cut their prefixes.
* :mod:`.signatures` is the versioned library of kernel message signatures (OOM kills, Xid,
  hung tasks, soft lockups, ...) the engine classifies reports with.
* :mod:`.dmesg` (raw, ``-T``, ``--time-format iso``, ``/dev/kmsg``), :mod:`.journal` (syslog and
  journald exports) and :mod:`.nvbug` (the kernel log inside ``nvidia-bug-report.log``) each
  say how to split their line prefix from the message; ``kernel_notime`` (lines without a
  timestamp) is in :mod:`.engine` itself.
"""
from .dmesg import PARSERS as _DMESG
from .engine import PARSERS as _ENGINE
from .journal import PARSERS as _JOURNAL
from .nvbug import PARSERS as _NVBUG

PARSERS = _DMESG + _JOURNAL + _NVBUG + _ENGINE
