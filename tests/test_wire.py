"""The judge <-> runner wire: tensors round-trip exactly, and what a hostile runner sends is refused as data."""

import gc
import socket
import threading

import pytest
import torch

from egg_mcp.evaluation import wire


def _round_trip(values, max_blob_bytes=1 << 30):
    a, b = socket.socketpair()
    got = {}

    def read():
        try:
            got["m"] = wire.recv(b, max_blob_bytes=max_blob_bytes)
        except wire.WireError as exc:
            got["error"] = exc

    reader = threading.Thread(target=read)
    reader.start()
    specs, blobs = wire.encode_values(values)
    wire.send(a, {"type": "outputs", "values": specs}, blobs)
    reader.join()
    if "error" in got:
        raise got["error"]
    return got["m"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool,
                                   torch.uint8, torch.complex64])
def test_tensors_round_trip_exactly(dtype):
    src = (torch.randn(37, 5) * 10).to(dtype)
    header, blobs = _round_trip([src, 3, None, 2.5])
    out = wire.decode_values(header["values"], blobs)
    assert out[0].dtype == dtype and torch.equal(out[0], src)
    assert out[1:] == [3, None, 2.5]


def test_non_contiguous_and_empty_tensors():
    base = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    header, blobs = _round_trip([base.t(), base[:, ::2], torch.empty(0, 3)])
    out = wire.decode_values(header["values"], blobs)
    assert torch.equal(out[0], base.t()) and torch.equal(out[1], base[:, ::2]) and out[2].shape == (0, 3)


def test_a_large_output_arrives_whole():
    """More than one receive chunk and far more than the socket buffer."""
    src = torch.randn(3 << 20)  # 12 MB
    header, blobs = _round_trip([src])
    assert torch.equal(wire.decode_values(header["values"], blobs)[0], src)


def test_the_byte_view_keeps_its_tensor_alive():
    specs, blobs = wire.encode_values([torch.full((1024,), 7.0)])
    gc.collect()
    assert torch.equal(torch.frombuffer(bytearray(blobs[0]), dtype=torch.float32), torch.full((1024,), 7.0))


def test_blobs_over_the_limit_are_refused_before_they_are_read():
    with pytest.raises(wire.WireError, match="over the"):
        _round_trip([torch.zeros(1000)], max_blob_bytes=100)


@pytest.mark.parametrize("spec, blob, match", [
    ({"kind": "tensor", "dtype": "float32", "shape": [4], "nbytes": 16, "blob": 0}, b"x" * 12, "bytes declared"),
    ({"kind": "tensor", "dtype": "object", "shape": [1], "nbytes": 8, "blob": 0}, b"x" * 8, "is not one of"),
    ({"kind": "tensor", "dtype": "float32", "shape": [1] * 9, "nbytes": 4, "blob": 0}, b"x" * 4, "at most"),
    ({"kind": "tensor", "dtype": "float32", "shape": [1], "nbytes": 4, "blob": 3}, b"x" * 4, "no byte block"),
    ({"kind": "pickle", "data": "..."}, b"", "unknown kind"),
])
def test_malformed_specs_are_wire_errors(spec, blob, match):
    with pytest.raises(wire.WireError, match=match):
        wire.decode_values([spec], [bytearray(blob)])


def test_a_closed_peer_and_a_silent_peer():
    a, b = socket.socketpair()
    a.close()
    with pytest.raises(wire.PeerGone):
        wire.recv(b, max_blob_bytes=0)
    c, d = socket.socketpair()
    with pytest.raises(TimeoutError):
        wire.recv(d, max_blob_bytes=0, timeout_s=0.05)
