"""`wuu-userhost`: run a user host bound to one user space and product domain.

    wuu-userhost serve --user-space local --product-domain personal --listen unix:/run/me/wuu/userhost.sock

The host serves the user-host RPC (spec/schema/userhost/) on the transports given: `--stdio` (one client on
this process's stdin and stdout), `--listen unix:PATH` (up to 16 clients on a Unix socket in a private
directory), `--grpc unix:PATH` or `--grpc 127.0.0.1:PORT`, and `--http 127.0.0.1:PORT`. Every TCP listener
authenticates its clients, on loopback too, with the tokens of `wuu-userhost token create` (HTTP's
`Authorization: Bearer`, gRPC's `authorization` metadata). It runs until SIGTERM or SIGINT; with `--stdio` as its
only transport, it ends once that client has gone and the work it admitted has finished. It reads the
configuration `--config` names (an absolute path), else `<home>/config.json` when it exists, and composes the
profile `--composition-profile` or that configuration names (host/userhost/compositions.py). It runs on
uvloop's event loop where uvloop is installed (`--loop`, host/userhost/event_loop.py). Logs are JSON lines on
stderr. Exit status: 0 after a clean stop, 2 when it cannot start (the message names the flag
or the startup error code).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wuu.generated.models import CompositionProfile, UserHostIsolationMode
from wuu.worker.stdio import stdio_problem

from .address import GrpcAddress, GrpcAddressError, HttpAddress, HttpAddressError
from .authority import Composer, UserHost
from .compositions import (
    AUTHORIZATION,
    PERSONAL_MODULE,
    RECEIPTS_MODULE,
    SESSION_DOMAIN,
    CompositionError,
    SelectedComposition,
    select_profile,
)
from .configuration import Configuration, ConfigurationError, home_of, load_configuration
from .errors import UserHostStartError
from .event_loop import KINDS, LoopUnavailable, run
from .idle import DEFAULT_IDLE_SECONDS
from .personal import (
    AUTHORIZATION_PROVIDERS,
    SESSION_DOMAIN_PROVIDERS,
    ModelAdapter,
    ModelConfig,
    StoreError,
    StoreVersionError,
    no_authorization,
    personal,
)
from .personal.approvals.execution import (
    ExecutionChoice,
    ExecutionConfigError,
    configured_profile,
    load_profile,
)
from .personal.model import ModelConfigError
from .personal.phone import PhoneConfigError, PhoneProvider, load_phone_provider
from .server import Server
from .stdio import StdioServer
from .tokens import TokenError, TokenStore, write_secret
from .unix import SocketInUse, UnixServer

log = logging.getLogger("wuu.host.userhost")


def _model(args: argparse.Namespace, configuration: Configuration) -> ModelAdapter | None:
    """The model of `--model-config`'s file, else the configuration's `model`, else None (the stand-in)."""
    if args.model_config is not None:
        try:
            return ModelConfig.parse(json.loads(args.model_config.read_text(encoding="utf-8"))).adapter()
        except (OSError, ValueError) as error:  # ModelConfigError and JSON errors are ValueErrors
            raise UsageError(f"--model-config: {args.model_config}: {error}") from None
    configured = configuration.content.model
    if configured is None:
        return None
    try:
        return ModelConfig.parse(configured.to_wire()).adapter()
    except ModelConfigError as error:
        raise UsageError(f"{configuration.field_label('model')}.{error}") from None


def _phone(args: argparse.Namespace) -> PhoneProvider | None:
    """The phone provider of `--phone-config`'s file, or None (user attention reaches no phone)."""
    if args.phone_config is None:
        return None
    try:
        return load_phone_provider(args.phone_config)
    except PhoneConfigError as error:
        raise UsageError(f"--phone-config: {error}") from None


def _execution(args: argparse.Namespace, configuration: Configuration) -> ExecutionChoice | None:
    """The execution profile of `--execution-config`'s file, else of the configuration's
    `execution_environments`, else None (a local native worker); `--execution-profile` names the profile."""
    try:
        if args.execution_config is not None:
            return load_profile(args.execution_config, args.execution_profile)
        environments = configuration.content.execution_environments
        if environments is not None:
            return configured_profile(environments.to_wire(), configuration.label, args.execution_profile)
    except ExecutionConfigError as error:
        raise UsageError(f"--execution-config: {error}" if args.execution_config else str(error)) from None
    if args.execution_profile is not None:
        raise UsageError(
            "--execution-profile: needs --execution-config, the file that defines the profile, or the "
            "configuration's execution_environments"
        )
    return None


def _composers(
    selected: SelectedComposition, args: argparse.Namespace, configuration: Configuration
) -> list[Composer]:
    """The modules a resolved profile selects, built on the providers it binds and the flags' settings."""
    if not selected.selects(PERSONAL_MODULE):
        return []
    session_domain = selected.provider(SESSION_DOMAIN)
    assert session_domain is not None  # wuu.personal requires it: the profile was refused without it
    authorization = selected.provider(AUTHORIZATION)
    # All are checked, so that one message names every problem of the configuration.
    problems: list[str] = []
    model: ModelAdapter | None = None
    execution: ExecutionChoice | None = None
    phone: PhoneProvider | None = None
    try:
        model = _model(args, configuration)
    except UsageError as error:
        problems.append(str(error))
    try:
        execution = _execution(args, configuration)
    except UsageError as error:
        problems.append(str(error))
    try:
        phone = _phone(args)
    except UsageError as error:
        problems.append(str(error))
    if problems:
        raise UsageError("\n".join(problems))
    return [
        personal(
            model=model,
            execution=execution,
            provider=SESSION_DOMAIN_PROVIDERS[session_domain],
            authorization=no_authorization
            if authorization is None
            else AUTHORIZATION_PROVIDERS[authorization],
            input_receipts=selected.selects(RECEIPTS_MODULE),
            phone=phone,
        )
    ]


# What `--authorization` patches into the selected profile: a binding of the `execution.authorization`
# service, or its exclusion (no task can start, and no fallback applies).
AUTHORIZATION_PATCHES: dict[str, CompositionProfile] = {
    "native": CompositionProfile(services={AUTHORIZATION: "wuu.authorization.native"}),
    "none": CompositionProfile(exclusions=[AUTHORIZATION]),
}
_RECORD_FIELDS = frozenset(vars(logging.makeLogRecord({})))


class UsageError(Exception):
    """A flag is wrong; the message names it."""


class JsonLines(logging.Formatter):
    """One JSON object per log record: time, level, logger, message and the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({key: value for key, value in vars(record).items() if key not in _RECORD_FIELDS})
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="wuu-userhost", description=__doc__.splitlines()[0])
    commands = top.add_subparsers(dest="action", required=True)
    serve = commands.add_parser(
        "serve",
        help="run a user host",
        description="Run a user host bound to one user space and product domain, serving the user-host RPC "
        "on the transports given, until SIGTERM or SIGINT.",
    )
    serve.add_argument(
        "--user-space", required=True, metavar="ID", help="the user space the host is bound to"
    )
    serve.add_argument(
        "--product-domain", required=True, metavar="DOMAIN", help="the product domain (for example personal)"
    )
    serve.add_argument(
        "--composition-profile",
        metavar="NAME",
        help="the composition profile to load: personal (the Personal plugin, its store and input receipts) or "
        "one of the configuration's composition_profiles; default: the configuration's composition_profile, "
        "else none",
    )
    serve.add_argument(
        "--config",
        metavar="FILE",
        help="the absolute path of the user configuration to load (JSON, spec/schema/config/"
        "user_configuration.schema.json; default: HOME/config.json when it exists, nothing else); flags "
        "override what it configures",
    )
    serve.add_argument(
        "--model-config",
        type=Path,
        metavar="FILE",
        help="personal: a JSON model configuration for the main agent and automatic review, "
        '{"kind": "openai_chat", "base_url": ..., "model": ..., "api_key_env": ...} for an OpenAI-compatible '
        "endpoint (default: the deterministic stand-in)",
    )
    serve.add_argument(
        "--execution-config",
        type=Path,
        metavar="FILE",
        help="personal: the execution_environments configuration whose profile runs approved actions "
        "(default: a local native worker bound to the space's files folder)",
    )
    serve.add_argument(
        "--execution-profile", metavar="NAME", help="the profile of --execution-config (default: its default)"
    )
    serve.add_argument(
        "--authorization",
        choices=sorted(AUTHORIZATION_PATCHES),
        help="personal: the execution.authorization@1 provider of background tasks: native (the default: local "
        "installation authority only) or none (no task can start)",
    )
    serve.add_argument(
        "--phone-config",
        type=Path,
        metavar="FILE",
        help="personal: the phone provider that user attention is relayed to, for the devices registered for push: "
        '{"kind": "stand_in", "path": ...} or {"kind": "webhook", "url": ..., "secret_env": ...} (default: none)',
    )
    serve.add_argument(
        "--isolation",
        default=UserHostIsolationMode.LOGICAL_MEMORY.value,
        metavar="MODE",
        help="logical_memory (the default) or verified_host (needs an embedding's verifier: refused here)",
    )
    serve.add_argument(
        "--home",
        metavar="DIR",
        help="the absolute home of the host's data (default: $WUU_HOME, else ~/.wuu); the space's data goes to "
        "DIR/user-spaces/SPACE/DOMAIN/{state,files}",
    )
    serve.add_argument("--stdio", action="store_true", help="serve one client on stdin and stdout")
    serve.add_argument("--listen", metavar="unix:PATH", help="serve clients on a Unix socket")
    serve.add_argument(
        "--grpc",
        metavar="ADDRESS",
        help="serve gRPC on unix:PATH, or on 127.0.0.1:PORT to clients holding a token (`token create`); "
        "port 0 picks a free port (logged)",
    )
    serve.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve HTTP clients holding a token (`token create`) on HOST:PORT, a loopback address unless "
        "--http-remote is given; port 0 picks a free port (logged)",
    )
    serve.add_argument(
        "--http-remote",
        action="store_true",
        help="allow --http on an address other machines can reach (needs --tls-cert and --tls-key)",
    )
    serve.add_argument("--tls-cert", metavar="FILE", help="the PEM certificate chain of the HTTP server")
    serve.add_argument("--tls-key", metavar="FILE", help="the PEM private key of --tls-cert")
    serve.add_argument(
        "--idle-timeout",
        type=_seconds,
        default=DEFAULT_IDLE_SECONDS,
        metavar="SECONDS",
        help="detach an HTTP token's or a gRPC connection's transport after this long with no call in flight "
        f"and no notification stream open, freeing its client slot (default {DEFAULT_IDLE_SECONDS:g})",
    )
    serve.add_argument(
        "--loop",
        choices=KINDS,
        default="auto",
        help="the event loop: uvloop's (about a tenth less CPU per request) or asyncio's own; auto (the "
        "default) is uvloop's when it is installed",
    )
    _token_commands(commands)
    return top


def _token_commands(commands: Any) -> None:
    token = commands.add_parser(
        "token",
        help="manage the bearer tokens of HTTP and gRPC-over-TCP clients",
        description="Create, revoke and list the tokens that clients of the TCP listeners (--http, --grpc "
        "IP:PORT) present (only their digests are stored, in the space's state/http-tokens.json, mode 0600).",
    )
    actions = token.add_subparsers(dest="token_action", required=True)
    for name, text in (
        ("create", "create a token and print it once"),
        ("revoke", "revoke a token: its client is refused from its next request"),
        ("list", "list the tokens' names"),
    ):
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        if name != "list":
            action.add_argument("--name", required=True, metavar="NAME", help="the paired client's name")
        action.add_argument("--home", metavar="DIR", help="the host's home (default: $WUU_HOME, else ~/.wuu)")
        action.add_argument("--user-space", required=True, metavar="ID", help="the user space of the token")
        action.add_argument("--product-domain", required=True, metavar="DOMAIN", help="its product domain")
        if name == "create":
            action.add_argument("--out", metavar="FILE", help="also write the token to FILE, created 0600")
            action.add_argument(
                "--device",
                metavar="ID",
                help="the device the token authenticates: its HTTP and gRPC transports may register it for push",
            )


def _home(given: str | None) -> Path:
    try:
        return home_of(given)
    except ConfigurationError as error:
        raise UsageError(str(error)) from None


def _seconds(text: str) -> float:
    """A positive number of seconds (an argparse type)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return seconds


def _unix_path(flag: str, value: str) -> Path:
    if not value.startswith("unix:") or not value[5:]:
        raise UsageError(f"{flag}: {value!r} is not unix:PATH")
    path = Path(value[5:])
    if not path.is_absolute():
        raise UsageError(f"{flag}: {path} is not an absolute path")
    return path


def _http_address(args: argparse.Namespace) -> HttpAddress | None:
    """The `--http` address, checked with its flags: a reachable one only with --http-remote and TLS."""
    if args.http is None:
        for flag in ("http_remote", "tls_cert", "tls_key"):
            if getattr(args, flag):
                raise UsageError(f"--{flag.replace('_', '-')}: only with --http")
        return None
    try:
        address = HttpAddress.parse(args.http)
    except HttpAddressError as error:
        raise UsageError(f"--http: {error}") from None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key: give both or neither")
    if not address.loopback:
        if not args.http_remote:
            raise UsageError(
                f"--http: {address.host} is not a loopback address; give --http-remote to serve it"
            )
        if args.tls_cert is None:
            raise UsageError("--http-remote: needs --tls-cert FILE and --tls-key FILE")
    return address


def _tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    if args.tls_cert is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(args.tls_cert, args.tls_key)
    except (OSError, ssl.SSLError) as error:
        raise UsageError(f"--tls-cert/--tls-key: {error}") from None
    return context


@dataclass(frozen=True)
class _Transport:
    """A transport the command line asks for: its flag, how it starts, and the errors of its start that are
    the flag's to report."""

    flag: str
    start: Callable[[UserHost, TokenStore], Awaitable[Server]]
    refusals: tuple[type[Exception], ...] = ()

    async def started(self, host: UserHost, tokens: TokenStore) -> Server:
        """The started transport; UsageError naming the flag for a refusal of its start."""
        try:
            return await self.start(host, tokens)
        except self.refusals as error:
            raise UsageError(f"{self.flag}: {error}") from None


def _transports(args: argparse.Namespace) -> list[_Transport]:
    """The transports the flags ask for, in the order they start, their flags checked."""
    if not (args.stdio or args.listen or args.grpc or args.http):
        raise UsageError(
            "give at least one transport: --stdio, --listen unix:PATH, --grpc ADDRESS or --http HOST:PORT"
        )
    transports: list[_Transport] = []
    if args.listen:
        listen = _unix_path("--listen", args.listen)
        transports.append(
            _Transport("--listen", lambda host, _: UnixServer.start(host, listen), (SocketInUse,))
        )
    if args.grpc:
        try:
            grpc_address = GrpcAddress.parse(args.grpc)
        except GrpcAddressError as error:
            raise UsageError(f"--grpc: {error}") from None
        from .grpc_service import GrpcServer  # grpc is imported only by a host that serves it

        transports.append(
            _Transport(
                "--grpc",
                lambda host, tokens: GrpcServer.start(
                    host,
                    grpc_address,
                    tokens=None if grpc_address.socket is not None else tokens,
                    idle_timeout=args.idle_timeout,
                ),
                (SocketInUse, OSError),
            )
        )
    http_address = _http_address(args)
    tls = _tls(args)
    if http_address is not None:
        from .http import HttpServer  # aiohttp is imported only by a host that serves HTTP

        transports.append(
            _Transport(
                "--http",
                lambda host, tokens: HttpServer.start(
                    host, http_address, tokens, ssl_context=tls, idle_timeout=args.idle_timeout
                ),
                (OSError,),
            )
        )
    if args.stdio:
        transports.append(_Transport("--stdio", lambda host, _: StdioServer.start(host)))
    return transports


def _composition(args: argparse.Namespace, home: Path) -> tuple[Configuration, SelectedComposition | None]:
    """The configuration (`--config`, else the user configuration under the home) and the profile it or
    `--composition-profile` selects, with `--authorization` applied; None when no profile is selected (the
    binding never selects one)."""
    try:
        configuration = load_configuration(args.config, home)
    except ConfigurationError as error:
        raise UsageError(str(error)) from None
    name, where = args.composition_profile, "--composition-profile"
    if name is None and configuration.content.composition_profile is not None:
        name, where = (
            configuration.content.composition_profile,
            configuration.field_label("composition_profile"),
        )
    personal_flags = [
        flag
        for flag, value in (
            ("--model-config", args.model_config),
            ("--execution-config", args.execution_config),
            ("--execution-profile", args.execution_profile),
            ("--authorization", args.authorization),
            ("--phone-config", args.phone_config),
        )
        if value is not None
    ]
    if name is None:
        if personal_flags:
            raise UsageError(
                f"{personal_flags[0]}: configures the personal composition profile, which is not loaded"
            )
        return configuration, None
    try:
        selected = select_profile(name, where, configuration, product_domain=args.product_domain)
        if args.authorization is not None:
            selected = selected.patched(AUTHORIZATION_PATCHES[args.authorization], "--authorization")
    except CompositionError as error:
        raise UsageError(str(error)) from None
    if personal_flags and not selected.selects(PERSONAL_MODULE):
        raise UsageError(
            f"{personal_flags[0]}: configures the {PERSONAL_MODULE} module, which the profile {name!r} does "
            "not select"
        )
    return configuration, selected


async def serve(args: argparse.Namespace) -> int:
    """Start the host and its transports, and serve until told to stop."""
    transports = _transports(args)
    home = _home(args.home)
    configuration, selected = _composition(args, home)
    modules = _composers(selected, args, configuration) if selected is not None else []
    host = await UserHost.start(
        user_space_id=args.user_space,
        product_domain=args.product_domain,
        home=home,
        composition_profile=selected.name if selected is not None else None,
        isolation=args.isolation,
        compose=modules,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    servers: list[Server] = []
    try:
        # Checked once the host could start, so that a configuration problem is the one reported.
        if args.stdio and (problem := stdio_problem()) is not None:
            raise UsageError(f"--stdio: {problem}")
        tokens = TokenStore.of_space(home, args.user_space, args.product_domain)
        for transport in transports:
            servers.append(await transport.started(host, tokens))
        host.announce([server.transport for server in servers])
        waits = [asyncio.create_task(stop.wait()), asyncio.create_task(_ended(host, servers))]
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        for task in done:
            task.result()  # a transport that failed fails the command
    finally:
        for server in servers:
            await server.close()
        await host.close()
    return 0


async def _ended(host: UserHost, servers: list[Server]) -> None:
    """Return once every transport has stopped by itself (only a lone stdio client's does) and the work
    its clients admitted has finished."""
    await asyncio.gather(*(server.ended() for server in servers))
    await host.wait_idle()


def token(args: argparse.Namespace) -> int:
    """`token create|revoke|list`: edit the space's token file."""
    store = TokenStore.of_space(_home(args.home), args.user_space, args.product_domain)
    if args.token_action == "create":
        secret = store.create(args.name, args.device)
        if args.out is not None:
            try:
                write_secret(Path(args.out), secret)
            except OSError as error:
                store.withdraw(secret)  # a token nobody received is no token
                raise UsageError(f"--out: {error}") from None
        print(secret)
    elif args.token_action == "revoke":
        store.revoke(args.name)
    else:
        for entry in store.entries():
            print(entry.name if entry.device_id is None else f"{entry.name}\tdevice {entry.device_id}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.action == "token":
        try:
            return token(args)
        except (UsageError, TokenError) as error:
            print(f"wuu-userhost: {error}", file=sys.stderr)
            return 2
    # The JSON-lines handler lives as long as this call, so a caller (a test) is left the logging it had.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        return run(lambda: serve(args), args.loop)
    except LoopUnavailable as error:
        print(f"wuu-userhost: --loop: {error}", file=sys.stderr)
        return 2
    except UsageError as error:
        print(f"wuu-userhost: {error}", file=sys.stderr)
        return 2
    except (UserHostStartError, StoreError, StoreVersionError) as error:
        print(f"wuu-userhost: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"wuu-userhost: {error}", file=sys.stderr)
        return 1
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def entry() -> None:
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
