"""Wheel build hook: the ``aftertrace`` package that holds the others, and the line engine
(ingest/native/scan.c) compiled into the wheel.

Installed, the checkout's top-level folders are the packages of one ``aftertrace`` package
(``aftertrace.ingest``, ``aftertrace.analysis``, ``aftertrace.server``, ``aftertrace.web``: see
pyproject.toml), whose ``__init__`` this hook writes: in a regular wheel a plain package; in an
editable install one whose packages are the checkout's folders (its ``__path__`` is the checkout),
since an editable install cannot move a folder under another name.

A regular wheel gets the library built in a temporary folder (nothing is written into the
checkout); an editable install builds it next to its source, where the package is imported from.
"""
from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

_TOP = '''"""aftertrace: post-mortem trace correlation and timeline analysis for distributed ML training.

Its packages: ``aftertrace.ingest`` (bundle intake, the format parsers, the event model),
``aftertrace.analysis`` (clocks, findings, causal chains, report), ``aftertrace.server`` (the
service, the store, the HTTP API and the command line) and ``aftertrace.web`` (the pages).
"""
'''
_EDITABLE = '''
# An editable install: the packages are the folders of the checkout at {root!r}.
__path__ = [{root!r}]
'''


class NativeBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        if self.target_name != "wheel":
            return
        spec = importlib.util.spec_from_file_location("_aftertrace_native_build",
                                                      Path(self.root) / "ingest/native/build.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        self._tmp = tempfile.TemporaryDirectory(prefix="aftertrace-build-")
        top = Path(self._tmp.name) / "__init__.py"
        if version == "editable":
            top.write_text(_TOP + _EDITABLE.format(root=str(Path(self.root).resolve())))
            mod.build(Path(self.root) / "ingest/native")
        else:
            top.write_text(_TOP)
            lib = mod.build(Path(self._tmp.name))
            build_data["force_include"][str(lib)] = f"aftertrace/ingest/native/{lib.name}"
        build_data["force_include"][str(top)] = "aftertrace/__init__.py"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version, build_data, artifact_path):
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            tmp.cleanup()
