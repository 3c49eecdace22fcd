"""A modern-era (2026-07-28) client scenario with the official Python SDK (`mcp` 2.x).

    python modern_client.py URL [options]
    python modern_client.py [options] --stdio CMD [ARG ...]

Connects with `mcp.Client(target, mode="2026-07-28")`: a version pin, so the client adopts
the modern era without the `server/discover` probe and never falls back to `initialize`
(mode="auto" would probe and fall back on anything that is not modern evidence). Then, like
modern_client.mjs: `server/discover` (sent explicitly with `session.send_discover()` and
adopted: `session.discover()` would return the pin's synthesized result without asking),
tools/list, one tools/call, `client.listen(
resource_subscriptions=[URI])` (the `mcp.client.subscriptions.listen` driver: entering
waits for the acknowledgement), K times: call the trigger tool, await one
`notifications/resources/updated` for URI, read URI with cache_mode="bypass"; then leave the
listen context (closes the stream) and report.

Updates are counted from `message_handler`, which receives every stamped listen-stream
notification as the raw `ResourceUpdatedNotification` (with its `_meta`, including
`io.modelcontextprotocol/subscriptionId`); the Subscription iterator itself yields
deduplicated `ResourceUpdated(uri)` events without `_meta` (level triggers), so it is
drained alongside only to count what it yields.

Options: --uri URI (default test://modern/counter), --updates K (2), --tool NAME (bump)
--tool-args JSON (default {"uri": URI}), --no-trigger, --call NAME (echo) --call-args JSON,
--mrtr NAME --mrtr-args JSON (call an input_required tool; elicitation and sampling
callbacks are declared, accepting {confirm: true} / answering a fixed text, and the SDK
retries), --timeout S (30, overall bound).

One JSON line on stdout; exit 0 on success, 1 with a message on stderr otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

MODERN = "2026-07-28"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


class Failed(Exception):
    pass


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def run(args: argparse.Namespace, out: dict[str, Any]) -> None:
    started = time.monotonic()
    out.update(client="python", mode=MODERN, transport="stdio" if args.stdio else "http", uri=args.uri)
    out["updatesWanted"] = args.updates
    updates: list[dict[str, Any]] = []
    other_updates = 0
    transport_errors: list[str] = []
    arrived = anyio.Condition()
    elicitations = 0
    samplings = 0

    async def on_message(message: Any) -> None:
        nonlocal other_updates
        if isinstance(message, Exception):
            transport_errors.append(repr(message))
            return
        if isinstance(message, types.ResourceUpdatedNotification):
            if str(message.params.uri) != args.uri:
                other_updates += 1
                return
            meta = message.params.meta
            meta_dict = meta.model_dump(by_alias=True, exclude_none=True) if hasattr(meta, "model_dump") else meta
            async with arrived:
                updates.append({"uri": str(message.params.uri), "_meta": meta_dict})
                arrived.notify_all()

    async def on_elicit(_context: Any, _params: types.ElicitRequestParams) -> types.ElicitResult:
        nonlocal elicitations
        elicitations += 1
        return types.ElicitResult(action="accept", content={"confirm": True})

    async def on_sample(_context: Any, _params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        nonlocal samplings
        samplings += 1
        return types.CreateMessageResult(
            role="assistant", model="modern-client-py", content=types.TextContent(type="text", text="sampled by modern_client.py")
        )

    async def nth_update(n: int) -> None:
        async with arrived:
            while len(updates) < n:
                await arrived.wait()

    target: Any = args.url
    if args.stdio:
        target = StdioServerParameters(command=args.stdio[0], args=args.stdio[1:])

    async with Client(
        target,
        mode=MODERN,
        message_handler=on_message,
        elicitation_callback=on_elicit if args.mrtr else None,
        sampling_callback=on_sample if args.mrtr else None,
        client_info=types.Implementation(name="mcpmux-modern-client-py", version="0.0.0"),
    ) as client:
        # Under a version pin the session adopted a synthesized DiscoverResult, and
        # session.discover() returns an adopted result without asking; send the request
        # itself and adopt what the server answers (real capabilities and serverInfo).
        discovered = types.DiscoverResult.model_validate(await client.session.send_discover(MODERN))
        client.session.adopt(discovered)
        caps = discovered.capabilities
        out["protocolVersion"] = client.protocol_version
        out["discover"] = {
            "supportedVersions": discovered.supported_versions,
            "capabilities": sorted(k for k, v in caps.model_dump(exclude_none=True).items() if v is not None),
            "resourcesSubscribe": bool(caps.resources and caps.resources.subscribe),
            "serverInfo": client.server_info.model_dump(exclude_none=True) if client.server_info else None,
            "ttlMs": discovered.ttl_ms,
            "cacheScope": discovered.cache_scope,
        }

        tools = await client.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)

        called = await client.call_tool(args.call, args.call_args)
        out["call"] = {"name": args.call, "text": text_of(called), "isError": bool(called.is_error)}

        if args.mrtr:
            r = await client.call_tool(args.mrtr, args.mrtr_args)
            out["mrtr"] = {"name": args.mrtr, "text": text_of(r), "isError": bool(r.is_error), "elicitations": elicitations, "samplings": samplings}

        events: list[str] = []
        async with client.listen(resource_subscriptions=[args.uri]) as sub:
            honored = sub.honored.model_dump(by_alias=True, exclude_none=True)
            out["listen"] = {"id": sub.subscription_id, "honoredFilter": honored}
            if args.uri not in (sub.honored.resource_subscriptions or []):
                raise Failed(f"listen did not honour {args.uri}: {honored}")

            async def drain() -> None:
                async for event in sub:
                    events.append(type(event).__name__)

            out["reads"] = []
            out["triggers"] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain)
                for i in range(1, args.updates + 1):
                    if args.trigger:
                        r = await client.call_tool(args.tool, args.tool_args)
                        if r.is_error:
                            raise Failed(f"{args.tool} answered an error: {text_of(r)}")
                        out["triggers"].append(text_of(r))
                    await nth_update(i)
                    read = await client.read_resource(args.uri, cache_mode="bypass")
                    c = read.contents[0] if read.contents else None
                    out["reads"].append(
                        {
                            "text": getattr(c, "text", None),
                            "ttlMs": read.ttl_ms,
                            "cacheScope": read.cache_scope,
                        }
                    )
                tg.cancel_scope.cancel()
        out["closed"] = "local"
        out["events"] = events

    out["updates"] = updates[: args.updates]
    out["updatesTotal"] = len(updates)
    out["otherUpdates"] = other_updates
    ids = sorted({str((u["_meta"] or {}).get(SUBSCRIPTION_ID)) for u in out["updates"]})
    out["subscriptionIds"] = ids
    out["elapsedMs"] = round((time.monotonic() - started) * 1000)
    if transport_errors:
        raise Failed(f"transport errors: {transport_errors[:3]}")
    if ids != [str(out["listen"]["id"])]:
        raise Failed(f"updates carry subscriptionId {ids}, the listen id was {out['listen']['id']!r}")


def main() -> int:
    argv = sys.argv[1:]
    stdio: list[str] | None = None
    if "--stdio" in argv:
        i = argv.index("--stdio")
        stdio, argv = argv[i + 1 :], argv[:i]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url", nargs="?")
    ap.add_argument("--uri", default="test://modern/counter")
    ap.add_argument("--updates", type=int, default=2)
    ap.add_argument("--tool", default="bump")
    ap.add_argument("--tool-args", type=json.loads, default=None)
    ap.add_argument("--no-trigger", dest="trigger", action="store_false")
    ap.add_argument("--call", default="echo")
    ap.add_argument("--call-args", type=json.loads, default={"text": "hello from modern_client.py"})
    ap.add_argument("--mrtr", default=None)
    ap.add_argument("--mrtr-args", type=json.loads, default={"action": "deploy"})
    ap.add_argument("--timeout", type=float, default=30.0, help="overall safety net in seconds")
    args = ap.parse_args(argv)
    args.stdio = stdio
    if (args.url is None) == (stdio is None) or (stdio is not None and not stdio):
        ap.error("give exactly one of URL or --stdio CMD ...")
    if args.updates < 1:
        ap.error("--updates must be >= 1")
    if args.tool_args is None:
        args.tool_args = {"uri": args.uri}

    out: dict[str, Any] = {}

    async def bounded() -> None:
        with anyio.fail_after(args.timeout):
            await run(args, out)

    try:
        try:
            anyio.run(bounded)
        except BaseExceptionGroup as eg:  # task groups wrap what was raised inside them
            leaves = eg.exceptions
            while len(leaves) == 1 and isinstance(leaves[0], BaseExceptionGroup):
                leaves = leaves[0].exceptions
            raise (leaves[0] if len(leaves) == 1 else eg) from None
    except Failed as e:
        err = str(e)
    except TimeoutError:
        err = f"timed out after {args.timeout} s"
    except Exception as e:  # noqa: BLE001 - any SDK/transport error is a failed run
        err = f"{type(e).__name__}: {e}"
    else:
        print(json.dumps(out), flush=True)
        return 0
    if out:
        print(json.dumps(out), flush=True)
    print(f"modern_client.py: FAILED: {err}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
