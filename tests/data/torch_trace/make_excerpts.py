"""Re-creates the *.excerpt.json.gz test files from the real upstream traces (see PROVENANCE.md).

An excerpt keeps the upstream file's top-level keys in their order and a subset of its
events, unchanged: the metadata events, the profiler's own spans/instants, ProfilerStep
markers, every NCCL kernel / c10d op / record_param_comms / nccl: annotation and, for the
sampled traces, every GPU busy span (kernel, gpu_memcpy, gpu_memset). One event per line.
Usage: python make_excerpts.py /path/to/shared/real_traces/torch_trace
"""
import gzip
import json
import sys
from pathlib import Path

SRC = Path(sys.argv[1])


def keep(e, gpu_busy):
    n = str(e.get("name", ""))
    if e.get("ph") in ("M", "i") and n != "[memory]":
        return True
    if e.get("cat") == "Trace" or n.startswith(("ProfilerStep#", "nccl", "c10d::", "record_param_comms")):
        return True
    return gpu_busy and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")


for name, gpu_busy in (("hta__nccl_data.json.gz", False), ("hta__sampled_rank-0.json.gz", True),
                       ("hta__sampled_rank-1.json.gz", False)):
    doc = json.loads(gzip.decompress((SRC / name).read_bytes()))
    evs = [e for e in doc["traceEvents"] if keep(e, gpu_busy)]
    parts = []
    for k, v in doc.items():
        if k == "traceEvents":
            parts.append('"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in evs) + "\n]")
        else:
            parts.append(f"{json.dumps(k)}: {json.dumps(v)}")
    out = Path(__file__).parent / name.replace(".json.gz", ".excerpt.json.gz")
    out.write_bytes(gzip.compress(("{\n" + ",\n".join(parts) + "\n}\n").encode(), mtime=0))
    print(out.name, len(evs), out.stat().st_size)
