"""cpu_throttle's episodes when throttled seconds come in bursts (a quota of 1 ms per 1 s period
sampled every 0.5 s): the module docstring's case, with the values such a group really shows."""
from aftertrace.analysis.detectors import cpu_throttle
from aftertrace.analysis.detectors._series import Series

S = 10**9


def series(metric, values, t0=0, step=S // 2):
    ts = [t0 + i * step for i in range(len(values))]
    return Series("x", 1, "vm", "/job/rank1", metric, "", ts, ts, list(values), {}, None)


def test_bursty_seconds_fall_back_to_the_fraction_of_periods():
    # throttled s/s: single spikes every few snapshots between zeros (the counter moves once per
    # period or less); the fraction of periods throttled is 1.0 at every snapshot that saw one end
    secs = series("cpu.throttled_s_per_s", [0, 0, 0, 7.75, 0, 0, 0, 0, 6.0, 0, 0, 0, 8.0, 0, 0])
    frac = series("cpu.throttled_fraction", [1.0] * 7, step=S)
    (x, a, b, med, _, floor), = cpu_throttle._episodes(secs, frac)
    assert x is frac and (a, b) == (0, 6) and med == 1.0 and floor == cpu_throttle.FRAC_MIN


def test_routine_throttling_stays_quiet():
    secs = series("cpu.throttled_s_per_s", [0.01, 0, 0.015, 0, 0.01, 0, 0.012, 0])
    frac = series("cpu.throttled_fraction", [0.1, 0.2, 0.1, 0.15, 0.1, 0.2, 0.1, 0.1])
    assert cpu_throttle._episodes(secs, frac) == []


def test_steady_seconds_are_read_first():
    secs = series("cpu.throttled_s_per_s", [0, 0, 0, 0, 0.5, 0.6, 0.55, 0.5])
    frac = series("cpu.throttled_fraction", [0, 0, 0, 0, 0.7, 0.8, 0.7, 0.7])
    (x, a, b, *_), = cpu_throttle._episodes(secs, frac)
    assert x is secs and (a, b) == (4, 7)
