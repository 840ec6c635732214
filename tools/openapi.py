"""The user host's HTTP binding as an OpenAPI 3.1 document: `generated/openapi/userhost.openapi.json`.

Everything comes from spec/: the operations from the method catalog (spec/methods/userhost.json), the bodies
from the schemas (bundled into `components/schemas`, their `$ref`s rewritten), the error responses from
`x-http-status` of `UserHostErrorCode`, and the binding's own text from spec/schema/userhost/http.schema.json.
`document()` returns the same document, key for key and in the same order, on every run.

The document says what the host accepts, so that a client (or schemathesis) that sends what it allows is not
refused. Two rules the spec states in its own terms are spelled in plain JSON Schema here: a base64 string
(`contentEncoding`, an annotation most readers skip, checked by the spec's validators through
`x-max-decoded-bytes`) also carries the pattern of canonical base64, and `initialize`'s `protocol_version` is
the path's version (http.schema.json), a `const`.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from tools.spec import SCHEMA_DIR, bundle, catalogs, read_json
from tools.speclint import reachable
from tools.templates.keywords import HTTP_STATUS

BASE = "/v1"
PLUGIN_ID = "wuu.personal"
EVENTS_PATH = f"{BASE}/events"
JSON = "application/json"
EVENT_STREAM = "text/event-stream"
SECURITY_SCHEME = "bearer"
ERROR_DEF = "HttpErrorResponse"
CODE_DEF = "UserHostErrorCode"
USER_INPUT_DEF = "UserInput"
OVERSIZE_STATUS = 413
TIMEOUT_STATUS = 408
BODY_STATUSES = (TIMEOUT_STATUS, OVERSIZE_STATUS)
"""The binding's own statuses of a request body: one that arrived too slowly, one over max_frame_bytes."""
REQUEST_ID_HEADER = "Wuu-Request-Id"
# The methods whose requests `plugin/client/cancel` can cancel, and so can be named by a request id.
CANCELLABLE = "plugin/client/request"
SCHEMA_PREFIX = "#/components/schemas/"
INITIALIZE = "initialize"
BASE64_PATTERN = "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
"""Standard base64 with padding in its one canonical spelling: whole groups of four characters, the unused bits
of a padded last group zero (`QQ==`, never `QR==`), the encoding the host takes (UserInputAttachment.data)."""

# The OpenAPI links that let a client (and schemathesis's stateful phase) chain the Personal calls on real
# values: the main session into a send, the reads of its history and of its waiting approval cards, a send's
# receipt into a read of it, a receipt's message into a reaction, the automatic-review setting into a write of
# it at its revision. Each: source method, link name, target method, the target's body as runtime expressions.
MAIN_SESSION = {"params": {"session_id": "$response.body#/session_id"}}
LINKS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("agents.main_session", "send", "agents.send", MAIN_SESSION),
    ("agents.main_session", "history", "agents.history.read", MAIN_SESSION),
    ("agents.main_session", "search", "agents.history.search", MAIN_SESSION),
    ("agents.main_session", "approvals", "approvals.list", MAIN_SESSION),
    (
        "approvals.review.read",
        "set",
        "approvals.review.set",
        {
            "params": {
                "automatic_review": "$response.body#/settings/automatic_review",
                "expected_revision": "$response.body#/settings/revision",
                "request_id": "linked-review-set",
            }
        },
    ),
    (
        "agents.send",
        "receipts",
        "agents.receipts",
        {
            "params": {
                "session_id": "$response.body#/receipt/session_id",
                "client_input_ids": ["$response.body#/receipt/client_input_id"],
            }
        },
    ),
    (
        "agents.receipts",
        "react",
        "agents.react",
        {
            "params": {
                "session_id": "$request.body#/params/session_id",
                "message_seq": "$response.body#/receipts/0/history_seq",
            }
        },
    ),
)


def operation_id(prefix: str, method: str) -> str:
    """An operation's id: `rpc`, `plugin/client/request` -> `rpc_plugin_client_request`."""
    return f"{prefix}_" + re.sub(r"[^a-z0-9]+", "_", method.lower()).strip("_")


def rewrite_refs(node: Any) -> Any:
    """A bundled schema node with each `#/$defs/Name` reference pointing into `components/schemas`, and the
    canonical base64 pattern on each base64 string."""
    if isinstance(node, dict):
        out = {
            key: SCHEMA_PREFIX + value.removeprefix("#/$defs/")
            if key == "$ref" and isinstance(value, str)
            else rewrite_refs(value)
            for key, value in node.items()
        }
        if out.get("contentEncoding") == "base64":
            out.setdefault("pattern", BASE64_PATTERN)
        return out
    if isinstance(node, list):
        return [rewrite_refs(item) for item in node]
    return node


def ref(name: str, description: str | None = None) -> dict[str, Any]:
    """A reference to the component schema `name`, with a description where the use needs one."""
    node: dict[str, Any] = {"$ref": SCHEMA_PREFIX + name}
    if description is not None:
        node["description"] = description
    return node


def json_body(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """A request body or response whose content is JSON of `schema`."""
    return {"description": description, "content": {JSON: {"schema": schema}}}


def error_responses(codes: dict[str, Any]) -> dict[str, Any]:
    """`components/responses`: one error response per status of `x-http-status`, and 401, 408 and 413.

    The schema of each status admits only the codes that have it, so that a response checked against the
    document also checks that its status is its code's.
    """
    statuses: dict[int, list[str]] = {}
    for code in codes["enum"]:
        statuses.setdefault(codes[HTTP_STATUS][code], []).append(code)
    meaning = dict(zip(codes["enum"], codes["x-enum-descriptions"], strict=True))
    statuses.setdefault(OVERSIZE_STATUS, []).append("parse_error")
    statuses.setdefault(TIMEOUT_STATUS, []).append("invalid_request")
    responses: dict[str, Any] = {
        "Unauthorized": {
            "description": "No `Authorization: Bearer <token>` header, a malformed one, or a token that is unknown "
            "to this user space and product domain or revoked. The body is empty: the request learns nothing else.",
            "headers": {
                "WWW-Authenticate": {
                    "description": "The authentication scheme the host expects.",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^Bearer"},
                }
            },
        }
    }
    for status in sorted(statuses):
        if status == OVERSIZE_STATUS:
            lines = [
                "The request body is over max_frame_bytes (code `parse_error`); the host refused it unread."
            ]
        elif status == TIMEOUT_STATUS:
            lines = [
                "The request body did not arrive whole within the host's body deadline (code "
                "`invalid_request`); the connection is closed."
            ]
        else:
            lines = [f"`{code}`: {meaning[code]}" for code in statuses[status]]
        code_only = {"properties": {"code": {"enum": statuses[status]}}}
        schema = {
            "allOf": [ref(ERROR_DEF)],
            "properties": {"error": {"properties": {"data": code_only}}},
        }
        responses[f"Error{status}"] = json_body(schema, "\n\n".join(lines))
    return responses


def error_refs(with_body: bool, responses: dict[str, Any]) -> dict[str, Any]:
    """An operation's error responses by status: every error status, 401, and 408 and 413 where it takes a
    body."""
    refs = {"401": {"$ref": "#/components/responses/Unauthorized"}}
    for name in responses:
        status = name.removeprefix("Error")
        if status.isdigit() and (with_body or int(status) not in BODY_STATUSES):
            refs[status] = {"$ref": f"#/components/responses/{name}"}
    return dict(sorted(refs.items()))


def plugin_body(entry: dict[str, Any], call_params: dict[str, Any]) -> dict[str, Any]:
    """The request body of a plugin method: its params, and `user_input` where the method takes user input."""
    properties = {"params": ref(entry["params"], "The plugin method's parameters.")}
    required = ["params"]
    if entry.get("user_input", False):
        properties["user_input"] = rewrite_refs(call_params["properties"]["user_input"])
        required.append("user_input")
    properties["plugin_fingerprint"] = copy.deepcopy(call_params["properties"]["plugin_fingerprint"])
    return {
        "type": "object",
        "additionalProperties": False,
        "required": required,
        "properties": properties,
    }


def operation(
    op_id: str, entry: dict[str, Any], body: dict[str, Any], responses: dict[str, Any], cancellable: bool
) -> dict[str, Any]:
    """One POST operation: the method's body, its 200 result, and every error response."""
    op: dict[str, Any] = {
        "operationId": op_id,
        "summary": entry["method"],
        "description": entry["description"],
    }
    if cancellable:
        op["parameters"] = [{"$ref": "#/components/parameters/WuuRequestId"}]
    if entry["kind"] == "plugin_request":
        described = f"`{entry['method']}`'s params, with the expected plugin fingerprint and any user input."
    else:
        described = f"The params of `{entry['method']}`."
    op["requestBody"] = {"required": True, **json_body(body, described)}
    ok = json_body(ref(entry["result"]), f"The result of `{entry['method']}`.")
    op["responses"] = {"200": ok, **error_refs(True, responses)}
    return op


def add_links(paths: dict[str, Any], plugin_paths: dict[str, str]) -> None:
    """Attach LINKS to the 200 responses of their source operations."""
    for source, name, target, body in LINKS:
        ok = paths[plugin_paths[source]]["post"]["responses"]["200"]
        target_id = paths[plugin_paths[target]]["post"]["operationId"]
        ok.setdefault("links", {})[name] = {
            "operationId": target_id,
            "description": f"`{target}` on values of this `{source}`.",
            "requestBody": body,
        }


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the HTTP binding."""
    catalog = catalogs()["userhost"]
    defs = bundle()["$defs"]
    http = read_json(SCHEMA_DIR / "userhost" / "http.schema.json")
    version = next(c["value"] for c in catalog["constants"] if c["name"] == "protocol_version")
    responses = error_responses(defs[CODE_DEF])
    call_params = defs["PluginClientRequestParams"]
    paths: dict[str, Any] = {}
    plugin_paths: dict[str, str] = {}
    used = {ERROR_DEF, "JsonRpcStringId"}
    events: dict[str, Any] = {}
    for entry in catalog["methods"]:
        method, kind = entry["method"], entry["kind"]
        if entry["direction"] == "host_to_client" and kind == "notification":
            events[method] = ref(entry["params"])
            used.add(entry["params"])
            continue
        if entry["direction"] != "client_to_host":
            continue
        used.update((entry["params"], entry["result"]))
        if kind == "request":
            body = ref(entry["params"])
            if method == INITIALIZE:
                # The path's `v1` is the protocol version: another one gets `unsupported_protocol_version`.
                body = {"allOf": [body], "properties": {"protocol_version": {"const": version}}}
            op = operation(operation_id("rpc", method), entry, body, responses, method == CANCELLABLE)
            paths[f"{BASE}/rpc/{method}"] = {"post": op}
        elif kind == "plugin_request":
            if entry.get("user_input", False):
                used.add(USER_INPUT_DEF)
            path = f"{BASE}/plugins/{PLUGIN_ID}/{method}"
            body = plugin_body(entry, call_params)
            paths[path] = {"post": operation(operation_id("personal", method), entry, body, responses, True)}
            plugin_paths[method] = path
    add_links(paths, plugin_paths)
    stream = {
        "description": "The client's notifications as Server-Sent Events: each event is named by its method and "
        "its data is one line of the method's params JSON (`x-wuu-events`); a `: keepalive` comment comes "
        "every 15 seconds. A second stream of the same client replaces this one.",
        "content": {EVENT_STREAM: {"schema": {"type": "string"}, "x-wuu-events": events}},
    }
    paths[EVENTS_PATH] = {
        "get": {
            "operationId": "events",
            "summary": "events",
            "description": "The Server-Sent Events stream of this client's notifications.",
            "responses": {"200": stream, **error_refs(False, responses)},
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Wuu user host over HTTP",
            "version": str(version),
            "description": http["description"],
        },
        "security": [{SECURITY_SCHEME: []}],
        "paths": paths,
        "components": {
            "schemas": {name: rewrite_refs(defs[name]) for name in sorted(reachable(defs, used))},
            "parameters": {
                "WuuRequestId": {
                    "name": REQUEST_ID_HEADER,
                    "in": "header",
                    "required": False,
                    "description": "The JSON-RPC string id of this request, so that `plugin/client/cancel` can "
                    "name it; an id of a request of this client still in flight gets `invalid_request`. "
                    "Without it the host picks a fresh id.",
                    "schema": ref("JsonRpcStringId"),
                }
            },
            "responses": responses,
            "securitySchemes": {
                SECURITY_SCHEME: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token of one paired client (`wuu-userhost token create`).",
                }
            },
        },
    }
