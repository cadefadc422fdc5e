"""Wheel build hook: compile the line engine (ingest/native/scan.c) into the wheel.

A regular wheel gets the library built in a temporary folder (nothing is written into the
checkout); an editable install builds it next to its source, where the package is imported from.
"""
from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class NativeBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        if self.target_name != "wheel":
            return
        spec = importlib.util.spec_from_file_location("_aftertrace_native_build",
                                                      Path(self.root) / "ingest/native/build.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if version == "editable":
            mod.build(Path(self.root) / "ingest/native")
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="aftertrace-native-")
            lib = mod.build(Path(self._tmp.name))
            build_data["force_include"][str(lib)] = f"ingest/native/{lib.name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version, build_data, artifact_path):
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            tmp.cleanup()
