"""What the Kineto parser reads out of event names and ``args``: the declarative tables.

``ARG_FIELDS`` is the ONE table that maps raw ``args`` keys (as Kineto/PyTorch write them,
across versions) to typed columns. The parser fills the ``collectives`` columns from it,
and the analysis layer reads ``events.attrs`` (the raw args, unchanged) through it, so a
key that changes its spelling in a new PyTorch release is added here once.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ArgField:
    column: str                  # column name in aftertrace (collectives.<column>)
    keys: tuple[str, ...]        # raw args keys, first present wins
    type: type                   # int or str
    doc: str


ARG_FIELDS: tuple[ArgField, ...] = (
    ArgField("external_id", ("External id", "external id"), int, "links cpu_op <-> runtime call <-> kernel"),
    ArgField("correlation", ("correlation",), int, "CUPTI/roctracer correlation id; the ac2g flow id"),
    ArgField("device", ("device", "Device"), int, "GPU index of a GPU-side event"),
    ArgField("stream", ("stream",), int, "GPU stream of a GPU-side event"),
    ArgField("collective", ("Collective name",), str, "collective as PyTorch names it (allreduce, ...)"),
    ArgField("in_nelems", ("In msg nelems",), int, "input elements"),
    ArgField("out_nelems", ("Out msg nelems",), int, "output elements"),
    ArgField("group_size", ("Group size",), int, "ranks in the process group"),
    ArgField("dtype", ("dtype",), str, "element type (Float, BFloat16, ...)"),
    ArgField("pg", ("Process Group Name", "Process Group ID", "pg_name"), str,
             "process group name (newer) / id (early 2024)"),
    ArgField("pg_desc", ("Process Group Description", "pg_desc"), str, "default_pg, ..."),
    ArgField("seq", ("Seq",), int, "collective sequence number (ProcessGroupNCCL SeqNum)"),
    ArgField("input_dims", ("Input Dims",), list, "shapes of the inputs (record_shapes=True)"),
    ArgField("input_type", ("Input type",), list, "element types of the inputs (record_shapes=True)"),
)
ARG = {f.column: f for f in ARG_FIELDS}


def read_args(args: dict) -> dict:
    """The ARG_FIELDS values present in one raw ``args`` dict, typed; absent/untypable -> missing."""
    out = {}
    for f in ARG_FIELDS:
        for k in f.keys:
            if k in args:
                v = args[k]
                if f.type is int:
                    if isinstance(v, bool):
                        break
                    if isinstance(v, (int, float)):
                        out[f.column] = int(v)
                    elif isinstance(v, str) and v.strip().lstrip("-").isdigit():
                        out[f.column] = int(v)
                elif f.type is str:
                    if v is not None:
                        out[f.column] = str(v)
                elif isinstance(v, f.type):
                    out[f.column] = v
                break
    return out


# Older traces (PyTorch 1.8-1.10, e.g. the TensorBoard plugin samples of 2021) named the
# categories differently; they are stored under today's names.
CATEGORY_ALIASES = {
    "Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel", "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset", "Python": "python_function", "Trace": "Trace",
}
# Categories of GPU-side activity: Kineto writes pid = device index and tid = stream for
# them, so their pid/tid are not OS ids (stored as null; device/stream stay in attrs).
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})
# GPU categories that occupy a stream (idle gaps are the time between them).
GPU_BUSY_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")

# Step markers: torch.profiler's ProfilerStep#N (cpu_op in 1.x, user_annotation in 2.x,
# gpu_user_annotation on the GPU side).
STEP_MARKER = re.compile(r"^ProfilerStep#(\d+)$")
# Without ProfilerStep markers (a profiler driven by hand), the optimizer's own annotation
# (record_function "Optimizer.step#<Optimizer>.step", once per training step) marks steps;
# its step number is then its order in the file ("steps.name" says which marker it was).
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#\w+\.step$")

# NCCL kernels, every naming generation:
#   NCCL <= 2.6   ncclAllReduceRingLLKernel_sum_f32(ncclColl)
#   NCCL 2.7-2.18 ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem) / (ncclDevComm*, unsigned long, ncclWork*)
#   NCCL >= 2.19  ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>),
#                 ncclDevKernel_SendRecv(...), ncclDevKernel_Generic_1(...) (op not in the name)
NCCL_KERNEL = re.compile(
    r"^(?:void )?(?:nccl(?:Dev)?Kernel_([A-Za-z]+)"
    r"|nccl(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|Send|Recv|AllToAll)[A-Za-z]*Kernel)")
# CPU side: c10d dispatcher ops on the calling thread; backend annotations (gloo: on the
# gloo worker threads = the communication itself; nccl: etc. on the caller = enqueue).
C10D_OP = re.compile(r"^c10d::([A-Za-z_]+)$")
BACKEND_ANNOTATION = re.compile(r"^(gloo|nccl|ucc|mpi|xccl):([A-Za-z_]+)$")
C10D_NOT_COLLECTIVE = frozenset({"wait", "work", "abort", "shutdown", "allreduce_wait"})
# Names the parser looks at more closely (a cheap vectorised prefilter).
DERIVED_NAMES = r"^(?:ProfilerStep#|Optimizer\.step#|c10d::|record_param_comms$|(?:gloo|nccl|ucc|mpi|xccl):|(?:void )?nccl)"


@functools.lru_cache(maxsize=4096)
def canonical_collective(raw: str | None) -> str | None:
    """'c10d::_allgather_base_' / 'all_to_all' / 'AllReduce' -> 'allgather' / 'alltoall' / 'allreduce'."""
    if not raw:
        return None
    s = re.sub(r"[^a-z]", "", raw.lower())
    for suffix in ("coalesced", "into", "tensor", "base"):
        if s.endswith(suffix) and len(s) > len(suffix) + 3:
            s = s[: -len(suffix)]
    if s in ("generic", ""):
        return None
    return s


# Element sizes of the dtype spellings found in traces (args dtype = c10 ScalarType names;
# Input type = C++ type names).
DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "c10::half": 2, "float16": 2,
    "bfloat16": 2, "c10::bfloat16": 2, "int": 4, "int32": 4, "long": 8, "long int": 8, "int64": 8,
    "short": 2, "short int": 2, "int16": 2, "byte": 1, "unsigned char": 1, "uint8": 1, "char": 1,
    "signed char": 1, "int8": 1, "bool": 1, "complexfloat": 8, "c10::complex<float>": 8,
    "complexdouble": 16, "c10::complex<double>": 16, "float8_e4m3fn": 1, "float8_e5m2": 1,
}


def dtype_bytes(dtype: str | None) -> int | None:
    return DTYPE_BYTES.get(dtype.strip().lower()) if isinstance(dtype, str) else None
