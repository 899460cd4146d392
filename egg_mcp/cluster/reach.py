"""Is there a Ray cluster at this address? A bounded answer before `ray.init`, which on a stale local
record (a `ray_current_cluster` file or RAY_ADDRESS naming a head that is gone) retries for minutes."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Callable

from egg_mcp.config import ray_address, ray_temp_dir

PROBE_TIMEOUT_S = 3.0


def _record_file() -> str:
    """Where `ray start` records the local cluster ('auto' reads it), as Ray itself computes it."""
    try:
        from ray._common.utils import get_ray_address_file

        return get_ray_address_file(None)
    except Exception:  # another Ray layout: its default
        tmp = ray_temp_dir()
        return os.path.join(tmp, "ray", "ray_current_cluster")


def resolve_address(address: str) -> tuple[str | None, str]:
    """(host:port to reach or None, where it came from) for 'auto', 'host:port' or 'ray://host:port'."""
    if address == "auto":
        env = ray_address()
        if env and env != "auto":
            return resolve_address(env)[0], "RAY_ADDRESS"
        record = _record_file()
        try:
            with open(record, encoding="utf-8") as f:
                text = f.read().strip()
        except OSError:
            text = ""
        if text:
            return text, f"the local record {record}"
        try:  # Ray's legacy fallback for 'auto': a GCS process running on this machine
            from ray._private.services import find_gcs_addresses

            running = sorted(find_gcs_addresses())
        except Exception:
            running = []
        if running:
            return running[0], "a Ray GCS process running here"
        return None, f"no RAY_ADDRESS and no local record ({record}): no `ray start --head` on this machine"
    return address.removeprefix("ray://"), "the address given"


def _split(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{hostport!r} is not host:port")
    return host.strip("[]"), int(port)


def unreachable_reason(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[str, str | None]:
    """(the host:port it means, why it is not reachable or None). Never takes longer than `timeout_s` plus a
    name lookup."""
    target, source = resolve_address(address)
    if target is None:
        return address, source
    try:
        host, port = _split(target)
    except ValueError as exc:
        return target, f"{exc} (from {source})"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return target, None
    except socket.timeout:
        return target, f"no answer within {timeout_s:g} s (from {source})"
    except OSError as exc:
        why = exc.strerror or str(exc)
        stale = " (a stale record: the cluster it names is gone)" if source.startswith("the local record") else ""
        return target, f"{why.lower()}{stale} (from {source})"


def call_with_deadline(fn: Callable[[], Any], timeout_s: float) -> tuple[bool, Any]:
    """Run `fn` in a daemon thread; (True, result) or (False, exception or None if it is still running)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # reported to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name="ray-probe", daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(max(0.0, timeout_s - (time.monotonic() - start)))
    if "value" in box:
        return True, box["value"]
    return False, box.get("error")
