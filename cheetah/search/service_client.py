"""The two requests every client of an OpenAI-compatible model service makes, with one way
of turning their failures into the caller's error class (``RemoteEmbedder``,
``RemoteReranker``), and the HTTP client they make them with: it sends
``Authorization: Bearer TOKEN``, the token given or else ``$CHEETAH_API_TOKEN``, else
``$OPENAI_API_KEY`` (``inference.protocol.api_token``, as ``RemoteEngine`` does), which
``cheetah serve --token-file`` wants on every route but ``/health``. ``SERVE_LIMITS`` are the
default bounds of ``cheetah serve`` (``ServerLimits``); the clients split their requests to fit
them. Left out: retries (a failed search is a tool error the model reads), asking the server
for its own limits (one with lower ones answers 400 naming the setting).
"""

from __future__ import annotations

import httpx

from cheetah.inference.protocol import api_token
from cheetah.limits import ServerLimits

SERVE_LIMITS = ServerLimits()


def service_http(timeout_s: float, token: str | None = None) -> httpx.Client:
    """A client that sends the bearer token ``api_token(token)`` (none when there is none)."""
    key = api_token(token)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(timeout=timeout_s, headers=headers)


def model_cards(http: httpx.Client, base_url: str, error: type[Exception]) -> list[dict]:
    """The cards of ``GET {base_url}/models`` (those that are JSON objects)."""
    try:
        resp = http.get(f"{base_url}/models")
    except httpx.HTTPError as e:
        raise error(f"cannot reach {base_url}/models: {e}") from None
    if resp.status_code != 200:
        raise error(f"{base_url}/models answered {resp.status_code}: {resp.text[:300]}")
    try:
        cards = resp.json().get("data") or []
    except (ValueError, AttributeError) as e:
        raise error(f"{base_url}/models: malformed answer ({e})") from None
    return [c for c in cards if isinstance(c, dict)]


def post_json(http: httpx.Client, url: str, body: dict, error: type[Exception]) -> httpx.Response:
    """``POST url`` with a JSON body; unreachable or not 200 raises ``error``."""
    try:
        resp = http.post(url, json=body)
    except httpx.HTTPError as e:
        raise error(f"cannot reach {url}: {e}") from None
    if resp.status_code != 200:
        raise error(f"{url} answered {resp.status_code}: {resp.text[:300]}")
    return resp


def batches(texts: list[str], max_texts: int, max_chars: int, fixed_chars: int = 0) -> list[range]:
    """Consecutive index ranges of ``texts``, each at most ``max_texts`` texts whose lengths
    plus ``fixed_chars`` (a query sent with every batch) stay within ``max_chars``; a text
    alone over the budget gets a range of its own (the caller shortens texts first)."""
    out: list[range] = []
    start, chars = 0, fixed_chars
    for i, text in enumerate(texts):
        if i > start and (i - start >= max_texts or chars + len(text) > max_chars):
            out.append(range(start, i))
            start, chars = i, fixed_chars
        chars += len(text)
    if start < len(texts):
        out.append(range(start, len(texts)))
    return out
