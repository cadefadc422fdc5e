"""Write ``index.json``: every recorded case of the corpus, its half and its variants.

    python3 sample_traces/corpus/make_index.py

Each bundle is kept as the ``.tar.gz`` a user would upload (``<name>/<host>/...``), its truth
beside it. The half is the folder a case was recorded into (``dev/`` or ``heldout/``); the split was fixed
before any recording was analysed. Variants drop sources the way real bundles lack them (see
``tests/analysis/corpus.py``): bundles gathered by hand get ``no-anchors`` (no uptime/date/btime
files) and ``dmesg-T-only`` (only the human-readable kernel log, no perf, no anchors), and every
bundle with perf data a ``no-perf`` variant and, where the bundle holds clock anchors, ``bare``
(no anchor at all: no uptime/date/btime files and no ``perf -k`` reference time).
"""
import json
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def main() -> None:
    out = []
    for half in ("dev", "heldout"):
        for truth in sorted((HERE / half).glob("*.truth.json")):
            t = json.loads(truth.read_text())
            name = truth.name[:-len(".truth.json")]
            b = truth.with_name(name + ".tar.gz")
            if not b.is_file():
                continue
            with tarfile.open(b) as tf:
                has_perf = any(m.name.split("/")[2:3] == ["perf"] for m in tf.getmembers())
            variants = ["full"]
            if t.get("via") == "hand":
                variants += ["no-anchors", "dmesg-T-only"]
            if has_perf:
                variants.append("no-perf")
                # (perf's -k reference time pairs the clocks too: without anchors it is the one to take out)
                if t.get("anchors_in_bundle", True) or t.get("perf_clock", "monotonic") == "monotonic":
                    variants.append("bare")
            out.append({"id": f"{half}/{name}", "half": half, "scenario": t["scenario"], "via": t.get("via"),
                        "bundle": str(b.relative_to(ROOT)), "truth": str(truth.relative_to(ROOT)),
                        "variants": variants, "decoys": [d["what"] for d in t.get("decoys", [])]})
    (HERE / "index.json").write_text(json.dumps({"schema": "aftertrace.corpus_index/1", "cases": out}, indent=1) + "\n")
    print(f"{len(out)} cases, {sum(len(c['variants']) for c in out)} with variants")


if __name__ == "__main__":
    main()
