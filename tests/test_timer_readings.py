"""The timer's own readings. The estimate that picks the timing method is the call's GPU time: each sample's call is
enqueued behind a spin
kernel sized from the host's enqueue time, so launch gaps (host jitter) cannot flip a 0.1 ms call between a CUDA
graph and per-call events (on the H200 a two-kernel softmax read 0.11-0.38 ms without the spin, 0.100-0.103 ms
with it). Faked CUDA entry points here (no GPU)."""

from __future__ import annotations

from egg_mcp.evaluation import timing


class _Clock:
    def __init__(self, step_ms):
        self.t, self.step = 0.0, step_ms / 1e3

    def __call__(self):
        self.t += self.step  # read before and after each call: each call costs `step` on the host
        return self.t


def _fake_cuda(monkeypatch, host_step_ms):
    log: list = []

    class Event:
        def __init__(self, enable_timing=True):
            pass

        def record(self):
            log.append("record")

        def elapsed_time(self, other):
            return 0.1

    monkeypatch.setattr(timing, "_Event", Event)
    monkeypatch.setattr(timing, "_synchronize", lambda: None)
    monkeypatch.setattr(timing, "_spin", lambda cycles: log.append(("spin", cycles)))
    monkeypatch.setattr(timing, "_perf_counter", _Clock(host_step_ms))
    t = timing.GpuTimer.__new__(timing.GpuTimer)
    t._flush = lambda: log.append("flush")
    return t, log


def test_each_sample_is_enqueued_behind_a_spin_twice_the_host_enqueue(monkeypatch):
    t, log = _fake_cuda(monkeypatch, host_step_ms=1.5)
    est = t.estimate_ms(lambda xs: log.append("call"), [])
    assert est == 0.1 and abs(t.host_enqueue_ms - 1.5) < 1e-9
    samples = [i for i, e in enumerate(log) if e == "flush"]
    assert len(samples) == 5
    for i in samples:  # flush, spin, start event, the call, end event
        assert log[i + 1][0] == "spin" and log[i + 2:i + 5] == ["record", "call", "record"]
        assert log[i + 1][1] == round(3.0 * timing.SPIN_CYCLES_PER_MS)


def test_the_spin_is_clamped(monkeypatch):
    low, high = timing.ESTIMATE_SPIN_MS
    t, log = _fake_cuda(monkeypatch, host_step_ms=0.001)
    t.estimate_ms(lambda xs: None, [])
    assert {c for e, c in (x for x in log if isinstance(x, tuple))} == {round(low * timing.SPIN_CYCLES_PER_MS)}
    t, log = _fake_cuda(monkeypatch, host_step_ms=500.0)
    t.estimate_ms(lambda xs: None, [])
    assert {c for e, c in (x for x in log if isinstance(x, tuple))} == {round(high * timing.SPIN_CYCLES_PER_MS)}


def test_per_call_run_count_pays_for_a_host_bound_call(monkeypatch):
    """A call the host needs 3 ms to launch is not run 1000 times because its GPU time is 0.3 ms."""
    t, _ = _fake_cuda(monkeypatch, host_step_ms=3.0)
    t.l2_bytes = 1 << 20
    t.host_enqueue_ms = 3.0
    t._flush = lambda: None
    stats = t._measure_events(lambda xs: None, lambda k: [], [], 1 << 30, 0.3, None)
    assert stats.n_runs == max(timing.MIN_RUNS, round(timing.TARGET_TOTAL_MS / 3.0))


def test_the_synced_calls_read_host_and_events_from_the_same_calls(monkeypatch):
    """host_synced reads the host clock and the current stream's events around the same synchronised calls, so the
    side_stream check holds host time against event time of the same moment: a GPU shared with other processes
    slows both, work escaping the timed stream only the host's."""
    t, log = _fake_cuda(monkeypatch, host_step_ms=2.5)
    host, events = t.host_synced(lambda xs: log.append("call"), [], runs=3)
    assert abs(host - 2.5) < 1e-9 and events == 0.1
    assert log.count("call") == 3 and log.count("record") == 6
