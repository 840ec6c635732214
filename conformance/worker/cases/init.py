"""initialize: the token, the immutable binding, the version, and the workspace flags."""

from __future__ import annotations

from wuu.generated.catalog import WORKER_METHODS

from ..session import Session, code_of
from ..suite import WORKER
from .tools import expect_code


@WORKER.case("init.not-initialized")
async def requests_before_initialize(s: Session) -> None:
    """Every method but initialize is refused before a successful initialize."""
    for method, data in [
        ("process/list", {}),
        ("execute", s.tool("read_file", {"path": "a"})),
        ("cancel", {"id": "x"}),
    ]:
        await s.error(method, data, "not_initialized")


@WORKER.case("init.reply")
async def reply_shape(s: Session) -> None:
    """The initialize reply names version 4 and lists initialize and cancel among its methods."""
    data = await s.initialize()
    s.expect(data["version"] == 4, f"version is {data['version']}")
    s.expect(
        {"initialize", "cancel"} <= set(data["methods"]),
        f"methods {data['methods']} lack initialize or cancel",
    )
    s.expect(
        data["capabilities"] == [],
        f"capabilities {data['capabilities']} were granted without being requested",
    )


@WORKER.case("init.methods-honest", "methods.unsupported")
async def methods_honest(s: Session) -> None:
    """Advertised methods are served; unlisted catalog methods and unknown names get unsupported_method."""
    data = await s.initialize()
    for method, spec in WORKER_METHODS.items():
        if spec.direction != "host_to_worker" or method in ("initialize", "cancel"):
            continue
        reply = await s.request(method, {})
        if method in data["methods"]:
            s.expect(
                code_of(reply) != "unsupported_method",
                f"{method} is advertised but answers unsupported_method",
            )
        else:
            s.expect(
                code_of(reply) == "unsupported_method", f"{method} is not advertised but answers {reply}"
            )
    for method in ("no/such/method", "process/event", "tool/invoke"):
        await s.error(method, {}, "unsupported_method")


@WORKER.case("init.token-pinned")
async def token_pinned(s: Session) -> None:
    """After initialize, another token is refused on every method, and the pinned one still works."""
    await s.initialize()
    await s.error("initialize", s.binding(), "token_mismatch", token="another-token")
    await s.error("process/list", {}, "token_mismatch", token="another-token")
    await s.error("cancel", {"id": "x"}, "token_mismatch", token="another-token")
    await s.ok("initialize", s.binding())


@WORKER.case("init.binding-immutable")
async def binding_immutable(s: Session) -> None:
    """A second initialize with another root, session or flag is refused."""
    await s.initialize()
    await s.error("initialize", s.binding(root=str(s.workdir / "other")), "binding_immutable")
    await s.error("initialize", s.binding(session="another-thread"), "binding_immutable")
    await s.error("initialize", s.binding(remove_workspace_on_exit=True), "binding_immutable")


@WORKER.case("init.equal-reinitialize")
async def equal_reinitialize(s: Session) -> None:
    """An equal binding (defaults spelled out) gets the very same reply."""
    first = await s.initialize(environment={"A": "1"})
    again = await s.ok("initialize", s.binding(environment={"A": "1"}, require_existing_workspace=False))
    s.expect(again == first, f"the second reply {again} differs from the first {first}")


@WORKER.case("init.protocol-mismatch")
async def protocol_mismatch(s: Session) -> None:
    """Version 3 is refused and the connection stays uninitialized, so version 4 still works."""
    await s.error("initialize", s.binding(version=3), "protocol_mismatch")
    await s.error("process/list", {}, "not_initialized")
    await s.initialize()


@WORKER.case("init.workspace-missing", "init.failure-is-final")
async def workspace_missing(s: Session) -> None:
    """A missing root with require_existing_workspace fails initialize, and the connection is dead."""
    await s.error("initialize", s.binding(require_existing_workspace=True), "workspace_missing")
    await s.error("initialize", s.binding(), "initialization_failed")
    await s.error("process/list", {}, "initialization_failed")


@WORKER.case("init.workspace-created")
async def workspace_created(s: Session) -> None:
    """Without require_existing_workspace the adapter creates the root: a file can be written in it."""
    await s.initialize()
    reply = await s.execute("write_file", path="created.txt", content="x")
    if code_of(reply) == "unsupported_tool":
        s.skip("the adapter does not provide write_file")
    s.expect("data" in reply, f"writing into the new root failed: {reply.get('error')}")


@WORKER.case("init.remove-workspace-on-exit")
async def remove_workspace_on_exit(s: Session) -> None:
    """With remove_workspace_on_exit the root is gone after EOF (checked where the root is local)."""
    await s.initialize(remove_workspace_on_exit=True)
    if not s.root.is_dir():
        s.skip("the root is not on this machine (a remote adapter); its removal cannot be observed here")
    await s.client.close(budget=s.timeout)
    s.expect(not s.root.exists(), f"{s.root} still exists after the adapter exited")


@WORKER.case("init.invalid-params")
async def invalid_params(s: Session) -> None:
    """initialize data with a wrong type (4.0 is no integer), a missing or an unknown field gets invalid_request
    (the string "4" is also a version other than 4, so protocol_mismatch is the spec's code for it too)."""
    reply = await s.request("initialize", s.binding(version="4"))
    expect_code(s, reply, {"invalid_request", "protocol_mismatch"}, 'initialize with the version "4"')
    # 4.0 is the number 4 written with a fraction, no other version: only the integer rule applies.
    await s.error("initialize", s.binding(version=4.0), "invalid_request")
    await s.error("initialize", {"version": 4, "root": str(s.root)}, "invalid_request")
    await s.error("initialize", s.binding(colour="blue"), "invalid_request")
    await s.error("initialize", s.binding(root="relative/root"), "invalid_request")
    await s.initialize()
