"""schemathesis against a live `wuu-userhost serve --http`, from the generated OpenAPI document alone.

The host runs as a real process with the Personal composition and one token (`wuu-userhost token create`).
Every operation gets bounded examples (derandomized), schema-valid and not (the event stream, which never
ends, is read for a while), and the stateful phase follows the document's links (main session -> send ->
receipts -> react, and main session -> history read and search). Every response passes every check
schemathesis has (`positive_data_acceptance` among them: the host takes what the document allows) and
`spec_error`: every error is the spec's, an `HttpErrorResponse` whose code has the response's status and its
JSON-RPC number; a 401 has an empty body and the `Bearer` challenge. `WUU_SCHEMATHESIS_EXAMPLES` sets the
examples per operation (10 by default; `make chaos` runs 1000).

schemathesis is told what JSON Schema cannot say (spec/README.md, on the OpenAPI document): an emoji is one of
Unicode's (`EMOJI`), and `as_a_client_sends` writes schema-valid data as a client of the spec does.
"""

from __future__ import annotations

import base64
import hashlib
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

import emoji
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS, CheckContext, load_all_checks
from schemathesis.core.transport import Response
from schemathesis.generation.case import Case

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
NUMBER_OF: dict[str, int] = validators.bundle()["$defs"]["UserHostErrorCode"]["x-jsonrpc-number"]
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
    number = NUMBER_OF[code]
    assert body["error"]["code"] == number, f"`{code}` travels as {number}, not {body['error']['code']}"
    return True


load_all_checks()  # every check of schemathesis registered: a call that names none runs them all

EMOJI = st.sampled_from(sorted(emoji.EMOJI_DATA))
"""`"format": "emoji"`: the entries of Unicode's emoji test data, which the `emoji` package carries."""
schemathesis.openapi.format("emoji", EMOJI)
SEARCH = "/v1/plugins/wuu.personal/agents.history.search"
ATTENTION_SET = "/v1/plugins/wuu.personal/attention.settings.set"


def whole_numbers(value: Any) -> Any:
    """`value` with each float that has no fraction written as an integer (`81.0` -> `81`)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


def as_a_client_sends(case: Case[Any]) -> None:
    """A schema-valid case, written as a client that follows the spec writes it, just before it is sent (the
    stateful phase fills values in after a case is drawn); invalid cases stay as drawn.

    These rules hold beyond the document's schemas, and the host refuses a request that breaks one
    (`invalid_params`), so a positive case that broke one would fail `positive_data_acceptance` on a host
    that does right:
    - An integer has no fraction (spec/README.md, "Scalars"). JSON Schema counts `81.0` as an integer and
      schemathesis writes some integers so; each becomes `81`.
    - An attachment's `size` and `sha256` are those of its decoded `data` (UserInputAttachment), which no
      schema relates: each is computed from the drawn data (valid base64, by the document's pattern). Their
      sum then stays far under its limit (`x-max-sum`), which the document cannot state either.
    - A `client_input_id` names one input of the session (AgentsSendParams): a client gives each input its
      own, while drawn ids repeat. Each input here takes its business `request_id` as its id, so that a
      retry of a send repeats both and another send names another input.
    - A page token is one the host issued and signed for the same search (AgentsHistorySearchParams.
      page_token); a client never makes one up nor takes one to another search, so a drawn `page_token`, or
      one the stateful phase took from another search's answer, is left out and the first page is asked for.
    - A quiet-hours `time_zone` names an IANA time zone (QuietHours), which no pattern can list: a drawn one
      becomes `UTC`.
    """
    if case.meta is None or not case.meta.generation.mode.is_positive or not isinstance(case.body, dict):
        return
    body = whole_numbers(case.body)
    user_input = body.get("user_input")  # agents.send, and plugin/client/request, which carries any call
    if isinstance(user_input, dict):
        user_input["client_input_id"] = user_input["request_id"]
        for attachment in user_input.get("attachments", []):
            data = base64.b64decode(attachment["data"], validate=True)
            attachment["size"], attachment["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    if case.path == SEARCH:
        body["params"].pop("page_token", None)
    if case.path == ATTENTION_SET and isinstance(
        quiet := body["params"]["settings"].get("quiet_hours"), dict
    ):
        quiet["time_zone"] = "UTC"
    case.body = body


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
    """The generated document aimed at a live host, the host's URL, and the headers that authenticate its
    client."""

    schema: Any
    url: str
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
        enabled = schema.config.checks_config_for()
        assert all(enabled.get_by_name(name=name).enabled for name in CHECKS.get_all_names())
        yield LiveHost(schema, f"http://{address}", {"Authorization": f"Bearer {token}"})
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
        as_a_client_sends(case)
        case.call_and_validate(headers=live.headers, additional_checks=[spec_error], **transport)

    examples()


def test_linked_calls_answer_as_the_document_says(live: LiveHost) -> None:
    # Steps do not open the event stream, which would hold each for the whole request timeout.
    class Workflow(live.schema.exclude(path=EVENTS).as_state_machine()):  # type: ignore[misc]
        def before_call(self, case: Case[Any]) -> None:
            as_a_client_sends(case)

        def get_call_kwargs(self, case: Case[Any]) -> dict[str, Any]:
            return {"headers": live.headers}

        def validate_response(self, response: Response, case: Case[Any], **kwargs: Any) -> None:
            case.validate_response(
                response,
                additional_checks=[spec_error],
                headers=live.headers,
                transport_kwargs=kwargs or None,
                recorder=self.recorder,
            )

    Workflow.run(
        settings=settings(HYPOTHESIS, max_examples=SCENARIOS, stateful_step_count=STEPS),
    )


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "/v1/rpc/initialize",
            '{"protocol_version": 1.0, "client_info": {"name": "c", "version": "1"}}',
            "protocol_version",
        ),
        (
            "/v1/plugins/wuu.personal/agents.history.read",
            '{"params": {"session_id": "s", "page_size": 4.0}}',
            "params.page_size",
        ),
        (
            "/v1/plugins/wuu.personal/agents.history.read",
            '{"params": {"session_id": "s", "page_size": 4e0}}',
            "params.page_size",
        ),
    ],
    ids=["fraction", "plugin-fraction", "plugin-exponent"],
)
def test_an_integer_written_with_a_fraction_is_invalid_params(
    live: LiveHost, path: str, body: str, field: str
) -> None:
    """spec/README.md ("Scalars"): `4.0` is no integer, and a user host answers it in params with
    `invalid_params` naming the field (the worker protocol's answer is `invalid_request`)."""
    headers = {**live.headers, "Content-Type": "application/json"}
    response = requests.post(live.url + path, data=body.encode(), headers=headers, timeout=STARTUP_S)
    assert response.status_code == 400
    assert response.json()["error"]["data"] == {"code": "invalid_params", "field": field}
