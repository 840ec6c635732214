"""The typed server-side interfaces (generated/servers.py): one per service of the method catalogs, with a method
per catalog method of the service, and handlers that route each wire name to its method."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tools.spec import catalogs
from wuu.generated import servers
from wuu.generated.catalog import USERHOST_METHODS
from wuu.generated.models import PushUnregisterParams, PushUnregisterResult
from wuu.host.userhost.personal.plugin import PersonalPlugin
from wuu.host.userhost.services import NoHostServices

SERVICES: dict[str, tuple[type[Any], Any]] = {
    "user_question": (servers.UserQuestionServer, servers.user_question_handlers),
    "push": (servers.PushServer, servers.push_handlers),
    "personal": (servers.PersonalServer, servers.personal_handlers),
}
SERVICE_OF: dict[str, str] = {
    entry["method"]: entry["service"] for entry in catalogs()["userhost"]["methods"] if "service" in entry
}


def methods_of(service: str) -> set[str]:
    return {method for method, named in SERVICE_OF.items() if named == service}


def python_name(method: str) -> str:
    return method.replace("/", "_").replace(".", "_")


def test_every_service_of_the_catalog_has_an_interface() -> None:
    assert set(SERVICE_OF.values()) == set(SERVICES)
    assert not [entry for entry in catalogs()["worker"]["methods"] if "service" in entry]


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_each_method_of_a_service_takes_its_params_model_and_returns_its_result_model(service: str) -> None:
    interface, _ = SERVICES[service]
    for method in methods_of(service):
        signature = inspect.signature(getattr(interface, python_name(method)), eval_str=True)
        params = list(signature.parameters.values())
        assert params[1].annotation is USERHOST_METHODS[method].params, method
        assert signature.return_annotation is USERHOST_METHODS[method].result, method


class _Push:
    """A push service that records which method was called, and with what."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, str]] = []

    async def push_register(self, params: Any, context: str) -> Any:
        raise AssertionError("push/unregister was routed to push_register")

    async def push_unregister(self, params: PushUnregisterParams, context: str) -> PushUnregisterResult:
        self.calls.append(("push_unregister", params, context))
        return PushUnregisterResult(unregistered=True)


async def test_the_handlers_route_each_wire_name_to_its_method() -> None:
    push = _Push()
    handlers = servers.push_handlers(push)
    assert set(handlers) == methods_of("push")
    params = PushUnregisterParams(registration_id="r1")
    assert await handlers["push/unregister"](params, "caller") == PushUnregisterResult(unregistered=True)
    assert push.calls == [("push_unregister", params, "caller")]


def test_the_personal_plugin_implements_every_method_of_its_service() -> None:
    for method in methods_of("personal"):
        name = python_name(method)
        assert getattr(PersonalPlugin, name) is not getattr(servers.PersonalServer, name), method


def test_the_host_without_services_implements_both_host_services() -> None:
    services = NoHostServices()
    assert set(servers.user_question_handlers(services)) == methods_of("user_question")
    assert set(servers.push_handlers(services)) == methods_of("push")
