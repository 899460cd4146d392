"""HTTP: the bearer token every request must carry, the banner that shows it, and the middleware that checks it."""

from __future__ import annotations

import hmac
import json

MIN_TOKEN_CHARS = 16


def resolve_token(given: str | None) -> tuple[str, bool]:
    """The bearer token every HTTP request must carry: `given` ($EGG_MCP_TOKEN, or the deprecated
    --token), else a fresh 256-bit one. Returns (token, generated)."""
    import secrets

    if given:
        return given, False
    return secrets.token_urlsafe(32), True


def token_banner(token: str, generated: bool, url: str, uds: str | None = None) -> str:
    """What `serve --http` prints once on stderr: the token (only when generated here: a token taken
    from the environment is never echoed) and a ready client configuration."""
    shown = token if generated else "${EGG_MCP_TOKEN}"
    config = {"mcpServers": {"egg": {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {shown}"}}}}
    lines = ["egg-mcp: every HTTP request needs 'Authorization: Bearer <token>'."]
    if generated:
        lines.append(f"egg-mcp: generated token (shown once; set EGG_MCP_TOKEN to choose your own): {token}")
    else:
        lines.append("egg-mcp: token taken from $EGG_MCP_TOKEN (not shown).")
    if uds:
        lines.append(f"egg-mcp: listening on unix socket {uds} (mode 0600); e.g. "
                     f"curl --unix-socket {uds} -H 'Authorization: Bearer {shown}' {url}")
    else:
        lines += ["egg-mcp: MCP client config:", json.dumps(config),
                  "egg-mcp: MCP Inspector: npx @modelcontextprotocol/inspector --cli " + url
                  + f" --transport http --header 'Authorization: Bearer {shown}' --method tools/list",
                  "egg-mcp: tools/egg_client.py: EGG_MCP_TOKEN=... python tools/egg_client.py --url " + url
                  + " call list_tasks"]
    return "\n".join(lines) + "\n"


UNAUTHORIZED_BODY = (
    b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": "HTTP 401: missing or wrong bearer '
    b"token: send 'Authorization: Bearer <token>' with the server's token (EGG_MCP_TOKEN, or the one it "
    b'printed at start)"}}\n'
)


class BearerTokenMiddleware:
    """Rejects every HTTP request whose `Authorization: Bearer <token>` does not match, before any other
    layer sees it (the body is not read). The comparison is `hmac.compare_digest` (constant time)."""

    def __init__(self, app, token: str):
        if not token:
            raise ValueError("an HTTP server always needs a token")
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            supplied = b""
            for key, value in scope.get("headers") or ():
                if key.lower() == b"authorization":
                    supplied = value
                    break
            if not hmac.compare_digest(supplied, self.expected):
                # A JSON-RPC error body: MCP clients (the SDK's among them) show its message instead of
                # a bare "Server returned an error response".
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                        (b"connection", b"close")]})
                await send({"type": "http.response.body", "body": UNAUTHORIZED_BODY})
                return
        await self.app(scope, receive, send)
