"""Enqueue a run on freeway and print its events, with the client generated from its OpenAPI
document (docs/clients.md):

    producer openapi > openapi.json
    openapi-python-client generate --path openapi.json --meta none --output-path freeway_client
    FREEWAY_URL=http://127.0.0.1:8080 FREEWAY_API_TOKEN=... python enqueue.py "Hello?"

The events are Server-Sent Events: read here with httpx's streaming, one JSON event per `data:`.
"""

import json
import os
import sys

import httpx

from freeway_client import AuthenticatedClient
from freeway_client.api.runs import create_run
from freeway_client.models import Accepted, ErrorBody, RouteSpec, RunRequest


def run_request(question: str) -> RunRequest:
    """The body of `POST /v1/runs` for one question of the user `web-user`."""
    return RunRequest(
        user_id="web-user",
        input_=question,
        routes=[RouteSpec(model=os.environ.get("FREEWAY_MODEL", "openrouter/free"))],
    )


def enqueue(client: AuthenticatedClient, question: str) -> Accepted:
    """The queued run, or an exception saying why freeway refused it."""
    answer = create_run.sync(client=client, body=run_request(question))
    if isinstance(answer, ErrorBody):
        raise RuntimeError(f"{answer.error.code}: {answer.error.message}")
    if answer is None:
        raise RuntimeError("freeway answered with a status this client does not know")
    return answer


def events(base_url: str, token: str, run: Accepted):
    """Each event of the run, as a dict, until its stream ends."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    with httpx.stream("GET", base_url + run.events_url, headers=headers, timeout=None) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                yield json.loads(line[len("data:"):])


def main() -> None:
    base_url = os.environ["FREEWAY_URL"].rstrip("/")
    token = os.environ["FREEWAY_API_TOKEN"]
    client = AuthenticatedClient(base_url=base_url, token=token)
    run = enqueue(client, " ".join(sys.argv[1:]) or "Hello?")
    for event in events(base_url, token, run):
        print(event["type"], event.get("text", ""))


if __name__ == "__main__":
    main()
