"""The command line answers its errors before the heavy libraries are loaded.

Each case runs ``server.cli.main`` in a fresh interpreter and then reads ``sys.modules``: what
is checked is which modules were imported, never how long it took, so the test cannot flake on
a slow machine. The parse workers of the local executor are spawned processes that import the
main module again, so a light ``import aftertrace.server.cli`` keeps them light too.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("duckdb", "polars", "pyarrow", "plotly")

# argv: the file to write the result to, "import" (only) or "main", then the command line. The
# command's own output goes to the subprocess's stdout and stderr untouched.
PROBE = """
import json, sys
out, what, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
from aftertrace.server import cli
after_import = sorted(sys.modules)
try:
    code = cli.main(argv) if what == "main" else None
except SystemExit as e:
    code = e.code
with open(out, "w") as f:
    json.dump({"code": code, "after_import": after_import, "after_main": sorted(sys.modules)}, f)
"""


def probe(tmp_path, *argv, what="main"):
    out = tmp_path / "probe.json"
    env = dict(os.environ, AFTERTRACE_HOME=str(tmp_path / "home"), COLUMNS="200")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-c", PROBE, str(out), what, *argv], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=120)
    assert out.exists(), r.stderr
    res = json.loads(out.read_text())
    return r, res["code"], res["after_import"], res["after_main"]


def heavy(modules):
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_import_is_light(tmp_path):
    r, code, after_import, _ = probe(tmp_path, what="import")
    assert heavy(after_import) == []
    # rich, the store and the service come with the command that needs them
    assert not {"rich.console", "aftertrace.server.store", "aftertrace.server.service", "aftertrace.ingest.bundle"} & set(after_import)


@pytest.mark.parametrize("argv, code", [
    (["--version"], 0),
    (["--help"], 0),
    (["analyze", "--help"], 0),
    ([], 2),                                            # no command: the help, exit 2
    (["analyze"], 2),                                   # missing argument
    (["frobnicate"], 2),                                # unknown command
    (["analyze", "x.tgz", "--executor", "dask"], 2),    # bad choice
])
def test_parser_answers_without_heavy_imports(tmp_path, argv, code):
    r, got, _, after_main = probe(tmp_path, *argv)
    assert got == code, r.stderr
    assert heavy(after_main) == []


def test_missing_path_is_answered_without_heavy_imports(tmp_path):
    missing = tmp_path / "missing.tgz"
    r, code, _, after_main = probe(tmp_path, "analyze", str(missing))
    assert code == 2
    assert r.stderr.strip() == f"aftertrace: cannot read {missing}: no such file or directory"
    assert heavy(after_main) == []
    assert not (tmp_path / "home").exists()     # and no store was created for it


def test_unusable_parts_dir_is_answered_without_heavy_imports(tmp_path):
    bundle = tmp_path / "train.log"
    bundle.write_text("hello\n")
    r, code, _, after_main = probe(tmp_path, "analyze", str(bundle), "--parts-dir", "s3://bucket/parts")
    assert code == 2 and "object storage is not supported" in r.stderr
    assert heavy(after_main) == []


def test_export_with_unknown_format_is_answered_without_heavy_imports(tmp_path):
    r, code, _, after_main = probe(tmp_path, "export", "abc123", "-o", str(tmp_path / "x.svg"))
    assert code == 2 and r.stderr.startswith("aftertrace: ")
    assert heavy(after_main) == []


def test_a_real_analysis_still_loads_what_it_needs(tmp_path):
    # the other side of the deferral: a command that does work imports the service inside it
    f = tmp_path / "tiny.log"
    f.write_text("hello world\n")
    r, code, _, after_main = probe(tmp_path, "analyze", str(f))
    assert code == 0, r.stderr
    assert "duckdb" in after_main and "aftertrace.server.service" in after_main
    assert "tiny.log" in r.stdout


def test_commands_that_read_the_store_load_no_parser(tmp_path):
    """``incidents`` (like report, clocks, export) reads the store: the parser registry and the
    format modules are loaded only when a bundle is analysed."""
    r, code, _, after = probe(tmp_path, "incidents")
    assert code == 0, r.stderr
    assert "aftertrace.server.service" in after
    assert not [m for m in after if m.startswith("aftertrace.ingest.formats")]


def test_the_console_script_ends_its_process_once_everything_is_written(tmp_path):
    # ``run`` (the installed ``aftertrace``) ends the process without the interpreter's teardown:
    # before that its output is complete, its store closed (no write-ahead log left), the exit
    # handlers run, and its exit code is main's
    marker = tmp_path / "atexit-ran"
    sample = ROOT / "tests" / "data" / "perf_script" / "flamegraph__perf-funcab-pid-01.txt"
    code = ("import atexit, sys; p = sys.argv[1]; atexit.register(lambda: open(p, 'w').write('ran')); "
            "sys.argv = ['aftertrace'] + sys.argv[2:]; from aftertrace.server.cli import run; run()")
    env = dict(os.environ, AFTERTRACE_HOME=str(tmp_path / "home"), COLUMNS="200")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))

    def aftertrace(*argv):
        return subprocess.run([sys.executable, "-c", code, str(marker), *argv], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=300)

    r = aftertrace("analyze", str(sample), "--json", "-")
    assert r.returncode == 0, r.stderr
    # (the summary, the report, then where it is stored: the last line, written before the exit)
    start, end = r.stdout.index("\n{\n") + 1, r.stdout.rindex("\n}\n") + 2
    iid = json.loads(r.stdout[start:end])["incident"]["id"]
    assert r.stdout.rstrip().endswith(f"/incidents/{iid}") and marker.read_text() == "ran"
    home = tmp_path / "home"
    assert sorted(p.name for p in home.glob("aftertrace.duckdb*")) == ["aftertrace.duckdb"]
    import duckdb
    con = duckdb.connect(str(home / "aftertrace.duckdb"), read_only=True)
    assert con.execute("SELECT status FROM incidents WHERE incident_id = ?", [iid]).fetchall() == [
        ("done",)]
    con.close()
    marker.unlink()
    r = aftertrace("analyze", str(tmp_path / "missing.txt"))
    assert r.returncode == 2 and "no such file" in r.stderr and marker.read_text() == "ran"
