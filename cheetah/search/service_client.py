"""The two requests every client of an OpenAI-compatible model service makes, with one way
of turning their failures into the caller's error class (``RemoteEmbedder``,
``RemoteReranker``). Left out: retries (a failed search is a tool error the model reads).
"""

from __future__ import annotations

import httpx


def model_cards(http: httpx.Client, base_url: str, error: type[Exception]) -> list[dict]:
    """The cards of ``GET {base_url}/models`` (those that are JSON objects)."""
    try:
        cards = http.get(f"{base_url}/models").json().get("data") or []
    except (httpx.HTTPError, ValueError, AttributeError) as e:
        raise error(f"cannot reach {base_url}/models: {e}") from None
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
