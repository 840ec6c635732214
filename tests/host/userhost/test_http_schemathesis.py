"""schemathesis against a live `wuu-userhost serve --http`, from the generated OpenAPI document alone.

The host runs as a real process with the Personal composition and one token (`wuu-userhost token create`).
Every operation gets bounded examples (derandomized), schema-valid and not (the event stream, which never
ends, is read for a while), and the stateful phase follows the document's links (main session -> send ->
receipts -> react). Every response must be no 5xx, match the document (status, content type, headers, body
schema), refuse requests without the token and invalid data, and every error must be the spec's: an
`HttpErrorResponse` whose code has the response's status and its JSON-RPC number; a 401 has an empty body
and the `Bearer` challenge. `WUU_SCHEMATHESIS_EXAMPLES` sets the examples per operation (10 by default;
`make chaos` runs 1000).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import CheckContext, not_a_server_error
from schemathesis.core.transport import Response
from schemathesis.generation.case import Case
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from wuu.conformance.userhost.connection import ERROR_NUMBERS, OTHER_ERROR_NUMBER
from wuu.generated import validators

EXAMPLES = int(os.environ.get("WUU_SCHEMATHESIS_EXAMPLES", "10"))
# The stateful phase: scenarios of a few linked steps each.
SCENARIOS = 2 * EXAMPLES
STEPS = 8
DOCUMENT = resources.files("wuu.generated").joinpath("openapi/userhost.openapi.json")
USERHOST = str(Path(sys.executable).parent / "wuu-userhost")
BINDING = ["--user-space", "local", "--product-domain", "personal"]
STARTUP_S = 60.0
STATUS_OF: dict[str, int] = validators.bundle()["$defs"]["UserHostErrorCode"]["x-http-status"]
# Statuses the binding gives outside the table (http.schema.json): an oversize body, a wrong HTTP method.
FIXED_CODE = {413: "parse_error", 405: "unsupported_method"}


def spec_error(ctx: CheckContext, response: Response, case: Case[Any]) -> bool | None:
    """Every error is the spec's: an `HttpErrorResponse` at its code's status, or an empty 401 challenge."""
    if response.status_code < 400:
        return None
    if response.status_code == 401:
        assert response.content == b"", f"a 401 has an empty body, not {response.content[:200]!r}"
        assert response.headers.get("www-authenticate") == ["Bearer"], (
            "a 401 carries `WWW-Authenticate: Bearer`"
        )
        return True
    body = json.loads(response.content)
    errors = [error.message for error in validators.errors("HttpErrorResponse", body)]
    assert not errors, f"the error body is no HttpErrorResponse: {errors}"
    code, status = body["error"]["data"]["code"], response.status_code
    if status in FIXED_CODE:
        assert code == FIXED_CODE[status], f"status {status} is `{FIXED_CODE[status]}`, not `{code}`"
    else:
        assert status == STATUS_OF[code], f"`{code}` has status {STATUS_OF[code]}, not {status}"
    number = ERROR_NUMBERS.get(code, OTHER_ERROR_NUMBER)
    assert body["error"]["code"] == number, f"`{code}` travels as {number}, not {body['error']['code']}"
    return True


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    ignored_auth,
    negative_data_rejection,
    unsupported_method,
    spec_error,
]
HYPOTHESIS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def wait_listening(process: subprocess.Popen[bytes], log: Path) -> str:
    """The address the host logs once it listens on HTTP; fails if it ends or the deadline passes."""
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the host ended with {process.returncode}: {log.read_text()}"
        # Only whole lines: the last one may still be being written.
        for line in log.read_text("utf-8").split("\n")[:-1]:
            record = json.loads(line)
            if record.get("message") == "listening" and record.get("transport") == "http":
                return str(record["address"])
        time.sleep(0.05)
    raise AssertionError(f"the host did not listen on HTTP within {STARTUP_S} s: {log.read_text()}")


@dataclass(frozen=True)
class LiveHost:
    """The generated document aimed at a live host, and the headers that authenticate its client."""

    schema: Any
    headers: dict[str, str]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHost]:
    """A live host with one token, and the generated document aimed at it."""
    root = tmp_path_factory.mktemp("http-host")
    home = root / "home"
    home.mkdir(mode=0o700)
    binding = ["--home", str(home), *BINDING]
    created = subprocess.run(
        [USERHOST, "token", "create", "--name", "schemathesis", *binding],
        capture_output=True,
        text=True,
        check=True,
        timeout=STARTUP_S,
    )
    token = created.stdout.strip()
    log = root / "host.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [USERHOST, "serve", *binding, "--composition-profile", "personal", "--http", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        address = wait_listening(process, log)
        with resources.as_file(DOCUMENT) as path:
            schema = schemathesis.openapi.from_path(path)
        schema.config.update(base_url=f"http://{address}", request_timeout=30)
        schema.config.generation.update(
            max_examples=EXAMPLES, deterministic=True, with_security_parameters=False
        )
        yield LiveHost(schema, {"Authorization": f"Bearer {token}"})
    finally:
        process.terminate()
        process.wait(timeout=STARTUP_S)
    assert process.returncode == 0, f"the host ended with {process.returncode}: {log.read_text()}"


# The operations, read from the document when the tests are collected, each with schema-valid examples and,
# where it takes input, invalid ones. The event stream (GET) takes none.
OPERATIONS = [
    (path, http_method.upper(), mode)
    for path, item in json.loads(DOCUMENT.read_text("utf-8"))["paths"].items()
    for http_method in item
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if http_method == "post" or mode is GenerationMode.POSITIVE
]
EVENTS = "/v1/events"
# The event stream never ends: a client reads it this long, then checks what it read.
STREAM_S = 2.0


@pytest.mark.parametrize(
    ("path", "http_method", "mode"), OPERATIONS, ids=[f"{p}-{m.value}" for p, _, m in OPERATIONS]
)
def test_every_operation_answers_as_the_document_says(
    live: LiveHost, path: str, http_method: str, mode: GenerationMode
) -> None:
    operation = live.schema[path][http_method]
    transport = {"timeout": STREAM_S} if path == EVENTS else {}

    @given(case=operation.as_strategy(generation_mode=mode))
    @HYPOTHESIS
    def examples(case: Case[Any]) -> None:
        case.call_and_validate(headers=live.headers, checks=CHECKS, **transport)

    examples()


def test_linked_calls_answer_as_the_document_says(live: LiveHost) -> None:
    # Steps do not open the event stream, which would hold each for the whole request timeout.
    class Workflow(live.schema.exclude(path=EVENTS).as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Case[Any]) -> dict[str, Any]:
            return {"headers": live.headers}

        def validate_response(self, response: Response, case: Case[Any], **kwargs: Any) -> None:
            case.validate_response(response, checks=CHECKS, headers=live.headers)

    Workflow.run(
        settings=settings(HYPOTHESIS, max_examples=SCENARIOS, stateful_step_count=STEPS),
    )
