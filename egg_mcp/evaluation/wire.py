"""The judge <-> runner wire: length-prefixed JSON headers plus raw tensor bytes, never pickle.

Everything the runner sends is untrusted data. The judge reads it with `recv` under size limits
and rebuilds tensors only from a validated (dtype, shape, nbytes) header and exactly that many raw
bytes (`torch.frombuffer`), so a hostile runner can make the judge see wrong numbers or refuse a
message, never run code (no pickle, no torch.load, no eval).
"""

from __future__ import annotations

import json
import math
import select
import socket
import struct
import time
from typing import Any

MAX_HEADER_BYTES = 4 << 20
RECV_CHUNK = 8 << 20
_LEN = struct.Struct("!I")

ALLOWED_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8",
                  "bool", "complex64", "complex128")
MAX_DIMS = 8
MAX_DEPTH = 8  # nested tuples/lists/dicts in one output
MAX_LEAVES = 256  # tensors, scalars, strings and None in one output
MAX_NODES = 1024  # leaves and containers (empty containers included)
MAX_KEY_CHARS = 200
MAX_STR_CHARS = 1 << 16


class WireError(Exception):
    """The peer sent something that is not a well-formed message (or went away)."""


class PeerGone(WireError):
    """End of stream: the runner exited or closed its end."""


def send(sock: socket.socket, header: dict[str, Any], blobs: list | None = None, fds: list[int] | None = None) -> None:
    """Header, then each blob as is (bytes or a memoryview over host memory: no copy here). `fds` travel with the
    header's first bytes (SCM_RIGHTS): only ever judge to runner (exchange.py)."""
    blobs = blobs or []
    header = {**header, "blobs": [memoryview(b).nbytes for b in blobs]}
    data = json.dumps(header, default=str).encode()
    message = _LEN.pack(len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [message], fds)
        message = message[sent:]
    sock.sendall(message)
    for blob in blobs:
        sock.sendall(blob)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytearray:
    """Exactly n bytes, received straight into one buffer (a trial's output is tens of MB: the old
    chunk-and-join path copied it three times, 60 ms for 32 MB on the H200 host, probes/latency_child.py)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                raise TimeoutError("no message from the runner within the time limit")
        k = sock.recv_into(view[got:], min(n - got, RECV_CHUNK))
        if not k:
            raise PeerGone("the runner closed its channel")
        got += k
    return buf


def _recv_prefix(sock: socket.socket, deadline: float | None, fds: list[int] | None) -> bytes:
    """The length prefix; with `fds` (a list), descriptors sent along with it are appended there."""
    if fds is None:
        return bytes(_recv_exact(sock, _LEN.size, deadline))
    data, got, _, _ = socket.recv_fds(sock, _LEN.size, 4)
    fds.extend(got)
    if not data:
        raise PeerGone("the peer closed its channel")
    return bytes(data) + bytes(_recv_exact(sock, _LEN.size - len(data), deadline)) if len(data) < _LEN.size else data


def recv(sock: socket.socket, *, max_blob_bytes: int, timeout_s: float | None = None,
         fds: list[int] | None = None) -> tuple[dict, list[bytearray]]:
    """One message; WireError when it is malformed or larger than the limits. Descriptors are accepted only when
    `fds` is given (the runner's side: exchange.py); otherwise the kernel drops any sent along."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    (size,) = _LEN.unpack(_recv_prefix(sock, deadline, fds))
    if size > MAX_HEADER_BYTES:
        raise WireError(f"message header of {size} bytes is over the {MAX_HEADER_BYTES}-byte limit")
    try:
        header = json.loads(_recv_exact(sock, size, deadline))
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested thousands of levels deep
        raise WireError(f"message header is not JSON ({exc})") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise WireError("message header is not an object with a 'type'")
    sizes = header.get("blobs", [])
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes):
        raise WireError("message 'blobs' is not a list of byte counts")
    if sum(sizes) > max_blob_bytes:
        raise WireError(f"message carries {sum(sizes)} bytes, over the {max_blob_bytes}-byte limit for it")
    return header, [_recv_exact(sock, s, deadline) for s in sizes]


# ------------------------------------------------------------------------------- values

PINNED_FROM_BYTES = 4 << 20
"""Device tensors from this size go through pinned memory; smaller ones (the timed audit's samples, small
outputs) through a plain copy, which skips a fresh runner's first pinned allocation of each size."""


def _host_copy(t):
    """A contiguous host copy of t: through pinned memory from a GPU (2-4x the pageable copy's rate;
    torch's host allocator reuses the block across trials), plain `.to("cpu")` otherwise."""
    import torch

    t = t.contiguous()
    if t.device.type != "cuda":
        return t
    if t.numel() * t.element_size() < PINNED_FROM_BYTES:
        return t.to("cpu")
    try:
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t)
        return host
    except RuntimeError:
        return t.to("cpu")


def _bytes_view(t) -> memoryview:
    """The bytes of a contiguous host tensor without copying them (the view keeps the tensor alive)."""
    import ctypes

    nbytes = t.numel() * t.element_size()
    if nbytes == 0:
        return memoryview(b"")
    raw = (ctypes.c_char * nbytes).from_address(t.data_ptr())
    raw._tensor = t  # the memory's owner lives as long as the view does
    return memoryview(raw).cast("B")


def path_str(parts: list) -> str:
    """KernelBench-ish notation for a place in an output: output, output[1][0], output['h']."""
    return "output" + "".join(f"[{p!r}]" for p in parts)


class Opaque:
    """An output the runner could not send as data (compares unequal to everything)."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


class _TooLarge(Exception):
    pass


def flatten_output(out: Any, *, strict: bool = False) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """An output as (structure, [(path, leaf), ...]): the structure is JSON data ({"t": "leaf"}, or "tuple"/"list"/
    "dict" with "items", and "keys" for a dict), the leaves in the order a depth-first walk meets them.

    Containers: tuple and list (subclasses such as torch.Size or named tuples walk as their base), dict with
    string keys, at most MAX_DEPTH levels, MAX_LEAVES leaves and MAX_NODES parts. Leaves: tensors, None,
    bool/int/float/complex and str. `strict` (the judge, on the reference's output): anything else raises
    ValueError. Otherwise (the runner, on the candidate's output, whose objects may be hostile): containers are
    read through their base classes' methods, scalars are converted to the exact builtin type, and whatever
    cannot be sent becomes an Opaque leaf (the whole output, when it is too large or cannot be walked)."""
    flattener = _Flattener(strict)
    try:
        return flattener.walk(out, [], 0), flattener.leaves
    except _TooLarge:
        what = f"more than {MAX_LEAVES} values or {MAX_NODES} parts"
        if strict:
            raise ValueError(f"the output has {what}") from None
        return {"t": "leaf"}, [("output", Opaque(f"output with {what}"))]
    except BaseException as exc:  # noqa: BLE001 - runner side: candidate objects raised while being read
        if strict:
            raise
        return {"t": "leaf"}, [("output", Opaque(f"output that could not be read ({type(exc).__name__})"))]


class _Flattener:
    """flatten_output's walk. A class, not a recursive closure: a closure that calls itself is a reference cycle,
    which kept every leaf (6 GiB tensors on the GPU) alive until the garbage collector ran."""

    def __init__(self, strict: bool):
        self.strict = strict
        self.leaves: list[tuple[str, Any]] = []
        self.nodes = 0

    def refuse(self, parts: list, what: str) -> dict[str, Any]:
        if self.strict:
            raise ValueError(f"{path_str(parts)} is {what}")
        self.leaves.append((path_str(parts), Opaque(what)))
        return {"t": "leaf"}

    def walk(self, v: Any, parts: list, depth: int) -> dict[str, Any]:
        import torch

        refuse, walk, strict, leaves = self.refuse, self.walk, self.strict, self.leaves
        self.nodes += 1
        if self.nodes > MAX_NODES or len(leaves) >= MAX_LEAVES:
            raise _TooLarge
        if isinstance(v, (tuple, list, dict)):
            kind = "tuple" if isinstance(v, tuple) else "list" if isinstance(v, list) else "dict"
            if depth >= MAX_DEPTH:
                return refuse(parts, f"a {kind} nested deeper than {MAX_DEPTH} levels")
            if isinstance(v, dict):  # (kind "dict")
                keys = list(dict.keys(v))
                if not all(isinstance(k, str) and len(k) <= MAX_KEY_CHARS for k in keys):
                    return refuse(parts, f"a dict with keys other than strings of at most {MAX_KEY_CHARS} characters")
                keys = [str.__str__(k) for k in keys]
                return {"t": "dict", "keys": keys,
                        "items": [walk(dict.__getitem__(v, k), parts + [k], depth + 1) for k in keys]}
            base: Any = tuple if kind == "tuple" else list  # its own methods, never the subclass's
            return {"t": kind, "items": [walk(base.__getitem__(v, i), parts + [i], depth + 1)
                                         for i in range(base.__len__(v))]}
        if isinstance(v, torch.Tensor) or v is None:
            leaf = v
        elif isinstance(v, bool):
            leaf = bool(int.__int__(v))
        elif isinstance(v, int):
            leaf = int.__int__(v)
        elif isinstance(v, float):
            leaf = float.__float__(v)
        elif isinstance(v, complex):
            leaf = complex(v.real, v.imag) if type(v) is complex or strict else Opaque(type(v).__name__[:80])
        elif isinstance(v, str):
            if len(v) > MAX_STR_CHARS:
                return refuse(parts, f"a str of {len(v)} characters (at most {MAX_STR_CHARS} are compared)")
            leaf = str.__str__(v)
        else:
            return refuse(parts, f"a {type(v).__name__[:80]} (only tensors, Python scalars, strings, None and "
                                 "tuples/lists/dicts of them are compared)")
        leaves.append((path_str(parts), leaf))
        return {"t": "leaf"}


def encode_values(values: list, placer: Any = None) -> tuple[list[dict[str, Any]], list[memoryview]]:
    """Runner side: output leaves as specs + raw bytes (tensors copied once to host memory, contiguous); with a
    `placer` (exchange.Placer), tensors that fit go into the shared region and only their offset is sent."""
    import torch

    specs, blobs = [], []
    for v in values:
        if isinstance(v, torch.Tensor):
            plain = torch.Tensor.detach(v).as_subclass(torch.Tensor)
            at = placer.place(plain) if placer is not None else None
            if at is not None:
                specs.append({"kind": "tensor", "dtype": str(plain.dtype).removeprefix("torch."),
                              "shape": list(plain.shape), "nbytes": plain.numel() * plain.element_size(), "at": at})
                continue
            t = _host_copy(plain)
            blob = _bytes_view(t)
            specs.append({"kind": "tensor", "dtype": str(t.dtype).removeprefix("torch."),
                          "shape": list(t.shape), "nbytes": blob.nbytes, "blob": len(blobs)})
            blobs.append(blob)
        elif v is None or type(v) in (bool, int, float):
            specs.append({"kind": "scalar", "value": v})
        elif type(v) is complex:
            specs.append({"kind": "complex", "value": [v.real, v.imag]})
        elif type(v) is str and len(v) <= MAX_STR_CHARS:
            specs.append({"kind": "str", "value": v})
        elif isinstance(v, Opaque):
            specs.append({"kind": "other", "type": v.type_name[:200]})
        else:
            specs.append({"kind": "other", "type": type(v).__name__[:80]})
    return specs, blobs


def decode_values(specs: Any, blobs: list, exchange: Any = None, device: Any = None) -> list:
    """Judge side: validate every spec against its bytes and rebuild tensors (host memory). A leaf in the shared
    region (`exchange`) is copied out at once, to `device` when given: the judge's own copy is what it compares."""
    import torch

    from egg_mcp.evaluation.exchange import Ranges

    if not isinstance(specs, list) or len(specs) > MAX_LEAVES:
        raise WireError(f"outputs are not a list of at most {MAX_LEAVES} values")
    out: list = []
    ranges = Ranges(exchange.size) if exchange is not None else None
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict):
            raise WireError(f"output {i}: spec is not an object")
        kind = spec.get("kind")
        if kind == "scalar":
            value = spec.get("value")
            if not (value is None or isinstance(value, (bool, int, float))):
                raise WireError(f"output {i}: scalar of type {type(value).__name__}")
            out.append(value)
        elif kind == "complex":
            value = spec.get("value")
            if (not isinstance(value, list) or len(value) != 2
                    or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)):
                raise WireError(f"output {i}: complex value is not a [real, imag] pair")
            out.append(complex(float(value[0]), float(value[1])))
        elif kind == "str":
            value = spec.get("value")
            if not isinstance(value, str) or len(value) > MAX_STR_CHARS:
                raise WireError(f"output {i}: str value is not a string of at most {MAX_STR_CHARS} characters")
            out.append(value)
        elif kind == "other":
            out.append(Opaque(str(spec.get("type", "object"))[:200]))
        elif kind == "tensor":
            dtype, shape, nbytes, index = spec.get("dtype"), spec.get("shape"), spec.get("nbytes"), spec.get("blob")
            if dtype not in ALLOWED_DTYPES:
                raise WireError(f"output {i}: dtype {dtype!r} is not one of {ALLOWED_DTYPES}")
            if (not isinstance(shape, list) or len(shape) > MAX_DIMS
                    or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
                raise WireError(f"output {i}: shape {shape!r} is not a list of at most {MAX_DIMS} sizes")
            torch_dtype = getattr(torch, dtype)
            itemsize = torch.empty((), dtype=torch_dtype).element_size()
            if "at" in spec:
                out.append(_from_region(i, spec, shape, torch_dtype, itemsize, exchange, ranges, device))
                continue
            if not isinstance(index, int) or not 0 <= index < len(blobs):
                raise WireError(f"output {i}: no byte block {index!r}")
            if nbytes != math.prod(shape) * itemsize or len(blobs[index]) != nbytes:
                raise WireError(f"output {i}: {nbytes!r} bytes declared, {len(blobs[index])} sent, "
                                f"shape {shape} x {itemsize} B needs {math.prod(shape) * itemsize}")
            if nbytes == 0:
                out.append(torch.empty(shape, dtype=torch_dtype))
            else:
                blob = blobs[index] if isinstance(blobs[index],
                                                  bytearray) else bytearray(blobs[index])  # recv's own buffer
                out.append(torch.frombuffer(blob, dtype=torch_dtype).reshape(shape))
        else:
            raise WireError(f"output {i}: unknown kind {kind!r}")
    return out


def _from_region(i: int, spec: dict, shape: list, dtype: Any, itemsize: int, exchange: Any, ranges: Any,
                 device: Any):
    """A leaf the runner placed in the shared region: its range checked, then copied out (never a view)."""
    import torch

    nbytes = spec.get("nbytes")
    if exchange is None:
        raise WireError(f"output {i}: placed in a shared region, but none was offered for this message")
    if nbytes != math.prod(shape) * itemsize or nbytes == 0:
        raise WireError(f"output {i}: {nbytes!r} bytes declared, shape {shape} x {itemsize} B needs "
                        f"{math.prod(shape) * itemsize} (and a placed output is never empty)")
    problem = ranges.claim(spec.get("at"), nbytes)
    if problem is not None:
        raise WireError(f"output {i}: {problem}")
    view = exchange.view(spec["at"], nbytes, dtype, shape)
    if device is None or torch.device(device).type == "cpu":
        return view.clone()
    return torch.empty(shape, dtype=dtype, device=device).copy_(view)


def decode_output(structure: Any, specs: Any, blobs: list, exchange: Any = None, device: Any = None) -> Any:
    """Judge side: the candidate's output rebuilt as nested tuples/lists/dicts of decoded leaves. Everything is
    validated as untrusted data: node kinds, depth (MAX_DEPTH), part count (MAX_NODES), dict keys (distinct
    strings of at most MAX_KEY_CHARS), and every leaf spec used exactly once, in order."""
    builder = _Builder(decode_values(specs, blobs, exchange, device))
    out = builder.build(structure, 0)
    if builder.taken != len(builder.leaves):
        raise WireError(f"output structure names {builder.taken} values, {len(builder.leaves)} were sent")
    return out


class _Builder:
    """decode_output's walk; a class for the reason _Flattener is one (no reference cycle holding the leaves)."""

    def __init__(self, leaves: list):
        self.leaves, self.taken, self.nodes = leaves, 0, 0

    def build(self, node: Any, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise WireError(f"output structure has more than {MAX_NODES} parts")
        kind = node.get("t") if isinstance(node, dict) else None
        if kind == "leaf":
            if self.taken >= len(self.leaves):
                raise WireError("output structure names more values than were sent")
            self.taken += 1
            return self.leaves[self.taken - 1]
        if kind not in ("tuple", "list", "dict"):
            raise WireError(f"output structure node is not a leaf, tuple, list or dict ({str(kind)[:40]!r})")
        if depth >= MAX_DEPTH:
            raise WireError(f"output structure is nested deeper than {MAX_DEPTH} levels")
        items = node.get("items")
        if not isinstance(items, list):
            raise WireError(f"output structure: a {kind} without an item list")
        if kind == "dict":
            keys = node.get("keys")
            if (not isinstance(keys, list) or len(keys) != len(items) or len(set(map(str, keys))) != len(keys)
                    or not all(isinstance(k, str) and len(k) <= MAX_KEY_CHARS for k in keys)):
                raise WireError("output structure: dict keys are not distinct strings, one per item")
            return {k: self.build(child, depth + 1) for k, child in zip(keys, items)}
        children = [self.build(child, depth + 1) for child in items]
        return tuple(children) if kind == "tuple" else children
