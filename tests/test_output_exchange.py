"""Large trial outputs through the judge's shared region (evaluation/exchange.py) instead of the socket.

The runner copies each output leaf into a memfd the judge handed it once and sends only offsets; the judge checks
every range and compares its own copy. Units drive the wire over a real socket pair; the end-to-end cases verify
through the engine in the interpreter with the region used for every output (EGG_MCP_EXCHANGE_FROM_BYTES=1).
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest
import torch

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation import wire
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.evaluation.exchange import OutputExchange, Placer, Ranges
from egg_mcp.problems.builtin import builtin_source


def _runner_side_of(judge_region: OutputExchange) -> OutputExchange:
    """The runner's mapping, from the descriptor the judge sends with a command (SCM_RIGHTS), as in production."""
    ours, theirs = socket.socketpair()
    try:
        wire.send(ours, {"type": "exchange", "bytes": judge_region.size}, fds=[judge_region.fd])
        fds: list[int] = []
        cmd, _ = wire.recv(theirs, max_blob_bytes=0, fds=fds)
        assert cmd["type"] == "exchange" and len(fds) == 1
        return OutputExchange(cmd["bytes"], fd=fds[0])
    finally:
        ours.close()
        theirs.close()


def test_outputs_placed_in_the_region_arrive_as_the_judges_own_copy():
    judge_region = OutputExchange(3 * 4096 + 10)
    runner_region = _runner_side_of(judge_region)
    out = (torch.arange(1000, dtype=torch.float32).reshape(10, 100), {"idx": torch.arange(7), "n": 3},
           torch.ones(5000, dtype=torch.float64))  # the last does not fit: it takes the socket
    structure, leaves = wire.flatten_output(out)
    specs, blobs = wire.encode_values([leaf for _, leaf in leaves], Placer(runner_region))
    assert [("at" in s) for s in specs if s["kind"] == "tensor"] == [True, True, False]
    got = wire.decode_output(structure, specs, [bytearray(b) for b in blobs], judge_region, "cpu")
    assert torch.equal(got[0], out[0]) and torch.equal(got[1]["idx"], out[1]["idx"]) and got[1]["n"] == 3
    assert torch.equal(got[2], out[2])
    runner_region.base().fill_(0)  # what the runner writes afterwards changes nothing the judge took
    assert torch.equal(got[0], out[0]) and got[0].data_ptr() != judge_region.base().data_ptr()
    runner_region.close()
    judge_region.close()


def test_the_judge_refuses_ranges_outside_the_region_overlapping_or_unoffered():
    region = OutputExchange(8192)
    spec = {"kind": "tensor", "dtype": "float32", "shape": [1024], "nbytes": 4096}
    for bad, words in ((dict(spec, at=8192 - 100), "outside"), (dict(spec, at=-1), "outside"),
                       (dict(spec, at="0"), "outside"), (dict(spec, at=0, nbytes=8), "bytes declared")):
        with pytest.raises(wire.WireError, match=words):
            wire.decode_values([bad], [], region)
    with pytest.raises(wire.WireError, match="overlap"):
        wire.decode_values([dict(spec, at=0), dict(spec, at=2048)], [], region)
    with pytest.raises(wire.WireError, match="none was offered"):
        wire.decode_values([dict(spec, at=0)], [])
    assert Ranges(100).claim(True, 4) is not None  # a bool is not an offset
    region.close()


def test_a_runner_accepts_descriptors_only_with_the_exchange_command():
    """Descriptors sent with any other command are closed by the runner loop, never kept."""
    import os
    import threading
    from types import SimpleNamespace

    from egg_mcp.evaluation import runner_loop

    ours, theirs = socket.socketpair()
    taken: list = []

    def take_exchange(cmd, fds):
        taken.append(list(fds))
        fds.clear()
        return {"type": "exchange_ready", "registered": False}

    side = SimpleNamespace(take_exchange=take_exchange, confine=lambda cmd: {"type": "confined"}, load=None,
                           calls=None, report=None, guard=None, new_findings=lambda: [])
    loop = threading.Thread(target=runner_loop.serve, args=(theirs, side), daemon=True)
    loop.start()
    r, w = os.pipe()
    wire.send(ours, {"type": "confine"}, fds=[r])
    assert wire.recv(ours, max_blob_bytes=0)[0]["type"] == "confined"
    wire.send(ours, {"type": "exchange", "bytes": 4096}, fds=[w])
    assert wire.recv(ours, max_blob_bytes=0)[0]["type"] == "exchange_ready"
    wire.send(ours, {"type": "exit"})
    loop.join(10)
    assert len(taken) == 1 and len(taken[0]) == 1
    os.close(r)
    os.close(w)
    ours.close()


def test_the_judge_falls_back_to_a_host_region_when_no_gpu_region_can_be_made_or_mapped(monkeypatch):
    from egg_mcp.evaluation import exchange as exchange_mod

    asked: list[dict] = []

    def ask(header, fd):
        asked.append(header)
        return {"type": "exchange_ready", "ok": header["where"] == "host", "error": "CUresult 1"}

    region, info = exchange_mod.offer_region(ask, 1 << 20, True, None)  # no CUDA here: the GPU region is not made
    assert info["where"] == "host" and "not made" in info["device_region"] and isinstance(region, OutputExchange)
    assert [h["where"] for h in asked] == ["host"]
    region.close()

    class FakeDevice:  # made, but the runner cannot map it
        closed = False

        def __init__(self, total, device):
            self.size, (self.fd, self._w) = total, os.pipe()

        def close(self):
            FakeDevice.closed = True

    monkeypatch.setattr(exchange_mod, "DeviceExchange", FakeDevice)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(exchange_mod, "_too_big_for_gpu", lambda total: None)
    asked.clear()
    held = OutputExchange(1 << 20)
    region, info = exchange_mod.offer_region(ask, 1 << 20, True, held)
    assert [h["where"] for h in asked] == ["device", "host"] and FakeDevice.closed
    assert region is held and info["kept"] is True and "not mapped by the runner: CUresult 1" in info["device_region"]
    held.close()


def test_a_gpu_region_is_used_only_where_the_measured_peak_leaves_room_for_it(monkeypatch):
    """At 6 GiB of output the H200's judge and runner together held 8.6x the output beside the region
    (verify_sizes_forced_a4be528.json): such a job gets a GPU region on the 140 GB card, a 13 GiB one the host
    region (11 x 13 GiB is over the card)."""
    from types import SimpleNamespace

    from egg_mcp.evaluation import exchange as exchange_mod

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=int(139.8 * 2**30)))
    assert exchange_mod._too_big_for_gpu(2 << 30) is None
    assert exchange_mod._too_big_for_gpu(6 << 30) is None
    said = exchange_mod._too_big_for_gpu(13 << 30)
    assert said is not None and "13.0 GiB of outputs x 11" in said and "139.8 GiB" in said
    monkeypatch.setenv("EGG_MCP_EXCHANGE_GPU_PEAK_PER_BYTE", "30")  # the override the benchmarks use
    assert "x 31" in (exchange_mod._too_big_for_gpu(6 << 30) or "")


HONEST = (Path(__file__).parent / "adversarial" / "correct_row_softmax.py").read_text()
ONE_PERCENT_OFF = HONEST + """

class ModelNew(ModelNew):  # the honest kernel's output, 1 % off
    def forward(self, x):
        return super().forward(x) * 1.01
"""


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    async def run_all():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path_factory.mktemp("exchange"), force_interpreter=True,
                                    spare_workers=0, judge="persistent")
        try:
            options = EvalOptions(size_overrides={"batch_size": 8, "dim": 100}, correctness_trials=2,
                                  run_timeout_s=120.0)
            reference = builtin_source("softmax")
            honest = await evaluator.evaluate(reference, HONEST, options)
            again = await evaluator.evaluate(reference, HONEST + "\n# again\n", options)
            wrong = await evaluator.evaluate(reference, ONE_PERCENT_OFF, options)
            return honest, again, wrong
        finally:
            await evaluator.aclose()

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EGG_MCP_EXCHANGE_FROM_BYTES", "1")  # every output through the region (the workers inherit it)
        return asyncio.run(run_all())


def test_a_verify_through_the_region_is_correct_and_says_so(verdicts):
    honest, again, _ = verdicts
    for r in (honest, again):
        assert r.verdict == "correct", (r.summary, r.error)
        assert r.judge["output_exchange"]["bytes"] >= 8 * 100 * 4
    assert honest.judge["output_exchange"]["kept"] is False
    assert again.judge["output_exchange"]["kept"] is True  # the persistent judge's region, kept for its next job


def test_a_wrong_output_through_the_region_is_still_incorrect(verdicts):
    *_, wrong = verdicts
    assert wrong.verdict == "incorrect", (wrong.summary, wrong.error)
    assert wrong.mismatch is not None and wrong.mismatch.max_abs_error > 0
    assert "output_exchange" in wrong.judge
