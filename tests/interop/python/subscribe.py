"""Subscribe through an MCP endpoint with the official Python SDK (`mcp` 2.x).

    python subscribe.py <url> <uri> [--timeout S]

Connects with `mcp.Client(url, mode="legacy")` over Streamable HTTP (mcpmux serves both
eras on one endpoint: in its default mode="auto" the client would find the 2026-07-28 era
through `server/discover`, where `resources/subscribe` does not exist; the modern path is
tested by modern_client.py), then: subscribes to <uri>, calls
`toggle-subscriber-updates` (server-everything sends nothing until then), waits for one
`notifications/resources/updated` for <uri> (delivered to `message_handler`, resolved by an
event, bounded by --timeout), unsubscribes, calls the toggle again (off) and prints one JSON
line. Exit 0 on success; 1 with a message on stderr otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import anyio
import mcp_types as types
from mcp import Client

TOGGLE = "toggle-subscriber-updates"

# subscribe/unsubscribe are legacy-era methods in mcp 2.x; exercising them is the point here.
warnings.filterwarnings("ignore", message=r"resources/(un)?subscribe is removed")


class Failed(Exception):
    pass


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def run(url: str, uri: str, timeout: float) -> dict:
    started = time.monotonic()
    got = anyio.Event()
    counts = {"updates": 0, "other_notifications": 0, "transport_errors": 0}
    errors: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, Exception):
            counts["transport_errors"] += 1
            errors.append(repr(message))
            return
        if isinstance(message, types.ResourceUpdatedNotification):
            if str(message.params.uri) == uri:
                counts["updates"] += 1
                got.set()
            return
        counts["other_notifications"] += 1

    with anyio.fail_after(timeout):
        async with Client(url, mode="legacy", message_handler=on_message, client_info=types.Implementation(
            name="mcpmux-interop-py", version="0.0.0"
        )) as client:
            protocol = client.protocol_version
            caps = client.server_capabilities
            if not (caps.resources and caps.resources.subscribe):
                raise Failed(f"server does not offer resources.subscribe: {caps!r}")

            await client.subscribe_resource(uri)
            res = await client.call_tool(TOGGLE, {})
            if res.is_error or not text_of(res).startswith("Started"):
                raise Failed(f"{TOGGLE} (on) answered {res!r}")
            try:
                await got.wait()
                await client.unsubscribe_resource(uri)
            finally:
                res = await client.call_tool(TOGGLE, {})
                if (res.is_error or not text_of(res).startswith("Stopped")):
                    raise Failed(f"{TOGGLE} (off) answered {res!r}")

    if errors:
        raise Failed(f"transport errors: {errors[:3]}")
    return {
        "client": "python",
        "mode": "legacy",
        "protocolVersion": protocol,
        "uri": uri,
        "updates": counts["updates"],
        "otherNotifications": counts["other_notifications"],
        "elapsedMs": round((time.monotonic() - started) * 1000),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("uri")
    ap.add_argument("--timeout", type=float, default=30.0, help="overall safety net in seconds")
    args = ap.parse_args()
    try:
        try:
            out = anyio.run(run, args.url, args.uri, args.timeout)
        except BaseExceptionGroup as eg:  # task groups wrap what was raised inside them
            leaves = eg.exceptions
            while len(leaves) == 1 and isinstance(leaves[0], BaseExceptionGroup):
                leaves = leaves[0].exceptions
            raise (leaves[0] if len(leaves) == 1 else eg) from None
    except Failed as e:
        print(f"subscribe.py: FAILED: {e}", file=sys.stderr)
        return 1
    except TimeoutError:
        print(f"subscribe.py: FAILED: timed out after {args.timeout} s", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - any SDK/transport error is a failed run
        print(f"subscribe.py: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
