"""The signature library: every signature's real example types as that signature, exact attributes."""
from __future__ import annotations

import re

import pytest

from aftertrace.analysis.links import LinkKind
from aftertrace.ingest.formats.kernel import signatures as ks


@pytest.mark.parametrize("sig", ks.SIGNATURES, ids=lambda s: s.id)
def test_every_example_is_typed_by_its_own_signature(sig):
    found = ks.classify(sig.example)
    assert found is not None, sig.id
    assert found[0] is sig                        # and by no earlier signature
    assert sig.needle in sig.example
    assert sig.source                              # where the real line was seen


@pytest.mark.parametrize("sig", [s for s in ks.SIGNATURES if s.kind], ids=lambda s: s.id)
def test_finding_kinds_exist_in_linkkind(sig):
    assert LinkKind(sig.kind)


def test_ids_unique_and_version_stated():
    assert len({s.id for s in ks.SIGNATURES}) == len(ks.SIGNATURES)
    assert re.fullmatch(r"kernel-signatures/\d+", ks.VERSION)


@pytest.mark.parametrize("text,sig_id,attrs", [
    # real lines (sources in ingest/formats/kernel/signatures.py / tests/data/kernel/PROVENANCE.md)
    ("Memory cgroup out of memory: Killed process 29133 (python3) total-vm:78072kB, anon-rss:65280kB, "
     "file-rss:6640kB, shmem-rss:0kB, UID:0 pgtables:184kB oom_score_adj:0", "oom.kill",
     {"scope_text": "Memory cgroup out of memory", "victim_pid": 29133, "victim_comm": "python3",
      "total_vm_kb": 78072, "anon_rss_kb": 65280, "file_rss_kb": 6640, "shmem_rss_kb": 0, "uid": 0,
      "pgtables_kb": 184, "oom_score_adj": 0}),
    # RHEL 7 (3.10) wording: UID between comm and sizes, no prefix
    ("Killed process 42424 (memcg_test_1), UID 0, total-vm:7296kB, anon-rss:96kB, file-rss:0kB, shmem-rss:0kB",
     "oom.kill", {"victim_pid": 42424, "victim_comm": "memcg_test_1", "uid2": 0, "total_vm_kb": 7296,
                  "anon_rss_kb": 96, "file_rss_kb": 0, "shmem_rss_kb": 0}),
    ("NVRM: Xid (PCI:0000:19:00): 94, pid=1248209, name=python3.10, Ch 00000008", "nvidia.xid",
     {"pci": "0000:19:00", "xid": 94, "pid": 1248209, "process": "python3.10", "detail": "Ch 00000008"}),
    ("NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x546fb0=0x11f000e",
     "nvidia.xid", {"pci": "0000:38:00", "xid": 13, "detail": "Graphics Exception: ESR 0x546fb0=0x11f000e"}),
    ("task:kworker/u32:2   state:D stack:13032 pid:  113 ppid:     2 flags:0x00004000", None, None),
    ("INFO: task kworker/u32:2:113 blocked for more than 122 seconds.", "hung_task",
     {"comm": "kworker/u32:2", "pid": 113, "blocked_s": 122}),
    ("pcieport 0000:00:1c.1: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)",
     "pcie.aer", {"driver": "pcieport", "device": "0000:00:1c.1", "aer_severity": "Corrected",
                  "aer_type": "Data Link Layer"}),
    ("IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready", None, None),
    ("mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE", None, None),
])
def test_real_lines_exact_attributes(text, sig_id, attrs):
    found = ks.classify(text)
    if sig_id is None:
        assert found is None
        return
    sig, got = found
    assert sig.id == sig_id
    assert got == attrs


@pytest.mark.parametrize("code,mnemonic", [
    (13, "ROBUST_CHANNEL_GR_EXCEPTION"), (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT"),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR"), (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL"),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE"), (61, "PMU_BREAKPOINT"), (62, "PMU_HALT_ERROR"),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT"), (64, "INFOROM_DRAM_RETIREMENT_FAILURE"), (74, "NVLINK_ERROR"),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"), (92, "EXCESSIVE_SBE_INTERRUPTS"),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR"), (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR"), (119, "GSP_RPC_TIMEOUT"),
    (154, "GPU_RECOVERY_ACTION_CHANGED"),
])
def test_xid_meanings(code, mnemonic):
    mn, meaning, action = ks.xid_info(code)
    assert mn == mnemonic and meaning and action


def test_unknown_xid_is_named_not_guessed():
    assert ks.xid_info(9999) == ks.XID_UNKNOWN
    assert ks.xid_info(9999)[1] == "unknown Xid (not in aftertrace's table)"


def test_summary_template_prints_missing_fields_as_question_marks():
    sig = ks.BY_ID["pcie.aer"]
    assert ks.summarize(sig, {"aer_severity": "Corrected", "aer_type": "Physical Layer"}) == \
        "PCIe AER Corrected error (Physical Layer) on ?"
