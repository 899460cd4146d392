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
    host, events, _ = t.host_synced(lambda xs: log.append("call"), [], runs=3)
    assert abs(host - 2.5) < 1e-9 and events == 0.1
    assert log.count("call") == 3 and log.count("record") == 12  # each call paired with one of ours


def test_a_call_of_ours_beside_each_synced_call_tells_a_time_sliced_gpu_from_escaped_work(monkeypatch):
    """Time-sliced with other processes, every call waits for its slice before its start event runs, ours too:
    `busy` reads that wait. Work escaping the timed stream delays the candidate's calls only."""
    t, _ = _fake_cuda(monkeypatch, host_step_ms=0.05)
    clock = timing._perf_counter
    host, events, busy = t.host_synced(lambda xs: setattr(clock, "t", clock.t + 0.003), [], runs=3)
    assert abs(host - 3.05) < 1e-6 and events == 0.1 and busy == 0.0  # escaped work, a quiet GPU
    t, _ = _fake_cuda(monkeypatch, host_step_ms=2.5)
    host, events, busy = t.host_synced(lambda xs: None, [], runs=3)
    assert abs(host - 2.5) < 1e-9 and abs(busy - 2.4) < 1e-9 and busy > timing.BUSY_MS  # everyone waits


def test_a_busy_reading_is_taken_again_after_each_pause(monkeypatch):
    t, _ = _fake_cuda(monkeypatch, host_step_ms=2.5)
    pauses: list = []
    monkeypatch.setattr(timing, "_sleep", pauses.append)
    assert t.synced_reading(lambda xs: None, [])[2] > timing.BUSY_MS
    assert pauses == list(timing.BUSY_PAUSES_S)
    t, _ = _fake_cuda(monkeypatch, host_step_ms=0.05)
    pauses.clear()
    t.synced_reading(lambda xs: None, [])
    assert pauses == []
