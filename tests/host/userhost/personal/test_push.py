"""Push that reaches a phone (spec/schema/userhost/push.schema.json, config/phone_delivery.schema.json,
userhost/attention.schema.json): a device token's gRPC and HTTP transports register the device, a stand-in
provider's file receives one content-free notification per attention batch for each registered device whose
token is valid, the owner's attention settings persist and govern admission and flush, and a webhook provider
posts to a real local server. Real sockets, real files, real SQLite; background tasks of the stand-in model
(`/task TEXT`) deliver the replies that raise attention."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.helpers import DEADLINE
from wuu.generated import models as m
from wuu.generated import validators
from wuu.generated.wire import WireModel
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.address import HttpAddress
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.grpc_client import UserHostGrpcClient
from wuu.host.userhost.grpc_service import GrpcServer
from wuu.host.userhost.http import HttpServer
from wuu.host.userhost.personal import PersonalPlugin, personal
from wuu.host.userhost.personal.attention_settings import DailyQuiet
from wuu.host.userhost.personal.phone import (
    PhoneConfigError,
    PhoneProvider,
    StandInPhone,
    load_phone_provider,
)
from wuu.host.userhost.tokens import TokenStore

PUSH = m.PushRegisterParams(provider=m.PushProvider.APNS, app_id="dev.wuu.app", token="apns-secret-token")


@dataclass
class Served:
    """A started Personal host with a phone provider, served on a Unix socket (the owner's desk) and on gRPC
    over TCP (the paired phones)."""

    host: UserHost
    plugin: PersonalPlugin
    unix: UnixServer
    grpc: GrpcServer
    tokens: TokenStore
    desk: UserHostClient
    main: str
    phones: list[UserHostGrpcClient]
    sent: int = 0

    async def personal(self, method: str, params: WireModel, **extra: Any) -> Any:
        return await self.desk.plugin_call("wuu.personal", method, params, **extra)

    async def phone(self, device_id: str | None, name: str | None = None) -> UserHostGrpcClient:
        """A gRPC client of a token created for `device_id` (None: a token without a device), initialized."""
        token = self.tokens.create(name or device_id or "plain", device_id)
        client = await UserHostGrpcClient.connect(self.grpc.address.target, token=token)
        self.phones.append(client)
        await client.initialize()
        return client

    async def reply(self) -> int:
        """Start a background task from the desk and wait for its reply in the main conversation (the
        delivery that raises attention); the reply's message seq."""
        self.sent += 1
        n = self.sent
        await self.personal(
            "agents.send",
            m.AgentsSendParams(session_id=self.main),
            user_input=m.UserInput(client_input_id=f"in-{n}", request_id=f"req-{n}", text=f"/task look {n}"),
        )
        read = m.AgentsHistoryReadParams(session_id=self.main)
        async with asyncio.timeout(DEADLINE):
            while True:
                history = await self.personal("agents.history.read", read)
                found = [h.message_seq for h in history.messages if h.text == f"Received: look {n}"]
                if found:
                    return int(found[0])
                await asyncio.sleep(0.02)

    async def set_attention(self, **settings: Any) -> m.AttentionSettings:
        params = m.AttentionSettingsSetParams(settings=m.AttentionSettings(**settings))
        saved: m.AttentionSettings = (await self.personal("attention.settings.set", params)).settings
        return saved

    async def close(self) -> None:
        for client in self.phones:
            with contextlib.suppress(Exception):  # a revoked token's connection may have ended already
                await client.close()
        await self.desk.close()
        await self.grpc.close()
        await self.unix.close()
        await self.host.close()


Serve = Callable[[PhoneProvider | None], Awaitable[Served]]


@pytest.fixture
async def serve(home: Path, run_dir: Path) -> AsyncIterator[Serve]:
    """Starts a host on `home`; starting again closes the one before (a restart). The last is closed after
    the test."""
    running: list[Served] = []

    async def start(phone: PhoneProvider | None) -> Served:
        while running:
            await running.pop().close()
        plugins: list[PersonalPlugin] = []
        host = await UserHost.start(
            user_space_id="local",
            product_domain="personal",
            home=home,
            compose=[personal(phone=phone, started=plugins.append)],
        )
        tokens = TokenStore.of_space(home, "local", "personal")
        unix = await UnixServer.start(host, run_dir / "userhost.sock")
        grpc = await GrpcServer.start(host, "127.0.0.1:0", tokens=tokens)
        desk = await UserHostClient.connect_unix(unix.path)
        await desk.initialize()
        main = await desk.plugin_call("wuu.personal", "agents.main_session", m.AgentsMainSessionParams())
        served = Served(host, plugins[0], unix, grpc, tokens, desk, main.session_id, [])
        running.append(served)
        return served

    yield start
    while running:
        await running.pop().close()


def lines(path: Path) -> list[dict[str, Any]]:
    """The stand-in's deliveries so far."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def delivered(path: Path, count: int) -> list[dict[str, Any]]:
    """The stand-in's deliveries once there are `count` of them."""
    async with asyncio.timeout(DEADLINE):
        while len(found := lines(path)) < count:
            await asyncio.sleep(0.02)
    return found


async def test_a_device_token_registers_and_a_grouped_window_reaches_the_phone_once_without_content(
    serve: Serve, tmp_path: Path
) -> None:
    phone_file = tmp_path / "phone.jsonl"
    served = await serve(StandInPhone(phone_file))
    phone = await served.phone("phone-1")
    registration = await phone.push_register(PUSH)
    assert registration.device_id == "phone-1"
    settings = await served.set_attention(notifications=True, grouping_window_seconds=4)
    assert settings == m.AttentionSettings(notifications=True, grouping_window_seconds=4)
    seqs = [await served.reply() for _ in range(3)]  # three replies within the window: one batch
    [delivery] = await delivered(phone_file, 1)
    validators.validate("PhoneDelivery", delivery)
    assert delivery == {
        "registration_id": registration.registration_id,
        "device_id": "phone-1",
        "provider": "apns",
        "app_id": "dev.wuu.app",
        "notification": {
            "kind": "agent_attention",
            "agent_id": "main",
            "count": 3,
            "session_id": served.main,
            "message_seq": seqs[-1],
        },
    }
    # No message text reaches the phone, and the push token never leaves the host but to a provider that needs it.
    assert "look" not in phone_file.read_text() and PUSH.token not in phone_file.read_text()
    assert PUSH.token not in json.dumps(registration.to_wire())
    # The next reply opens a new batch: one more notification, for it alone.
    seq = await served.reply()
    notification = (await delivered(phone_file, 2))[1]["notification"]
    assert (notification["count"], notification["message_seq"]) == (1, seq)


async def test_device_less_transports_are_refused_and_a_device_removes_only_its_own_registration(
    serve: Serve, tmp_path: Path
) -> None:
    served = await serve(StandInPhone(tmp_path / "phone.jsonl"))
    # The Unix socket (a local transport) and a token created without a device authenticate no device.
    response = await served.desk.request("push/register", PUSH.to_wire())
    assert response["error"]["data"]["code"] == "permission_denied"
    plain = await served.phone(None)
    with pytest.raises(UserHostError) as refused:
        await plain.push_register(PUSH)
    assert refused.value.code == m.UserHostErrorCode.PERMISSION_DENIED
    first, second = await served.phone("phone-1"), await served.phone("phone-2")
    replaced = await first.push_register(PUSH)
    current = await first.push_register(PUSH)  # the same device and app: it replaces the first
    assert current.registration_id != replaced.registration_id
    mine = m.PushUnregisterParams(registration_id=current.registration_id)
    assert not (await second.push_unregister(mine)).unregistered  # another device's counts as unknown
    assert not (
        await first.push_unregister(m.PushUnregisterParams(registration_id=replaced.registration_id))
    ).unregistered
    assert (await first.push_unregister(mine)).unregistered
    assert await served.plugin.tasks.ledger.push_registrations() == []


async def test_an_unregistered_device_and_a_revoked_token_receive_nothing(
    serve: Serve, tmp_path: Path
) -> None:
    phone_file = tmp_path / "phone.jsonl"
    served = await serve(StandInPhone(phone_file))
    registered = {}
    for device in ("kept", "gone", "revoked"):
        client = await served.phone(device)
        registered[device] = (client, (await client.push_register(PUSH)).registration_id)
    gone, gone_id = registered["gone"]
    assert (await gone.push_unregister(m.PushUnregisterParams(registration_id=gone_id))).unregistered
    served.tokens.revoke("revoked")
    first = await served.reply()
    # The deliveries of one notification go out together: the kept device's line is all there is.
    [delivery] = await delivered(phone_file, 1)
    assert (delivery["device_id"], delivery["notification"]["message_seq"]) == ("kept", first)
    second = await served.reply()
    assert [
        (line["device_id"], line["notification"]["message_seq"]) for line in await delivered(phone_file, 2)
    ] == [
        ("kept", first),
        ("kept", second),
    ]


async def flushed(served: Served, suppressed: int) -> None:
    """Wait until no batch is pending and `suppressed` attention has been dropped."""
    attention = served.plugin.attention
    async with asyncio.timeout(DEADLINE):
        while attention.pending or attention.suppressed < suppressed:
            await asyncio.sleep(0.02)


async def test_quiet_hours_set_before_the_flush_suppress_the_pending_batch(
    serve: Serve, tmp_path: Path
) -> None:
    phone_file = tmp_path / "phone.jsonl"
    served = await serve(StandInPhone(phone_file))
    await (await served.phone("phone-1")).push_register(PUSH)
    await served.set_attention(notifications=True, grouping_window_seconds=3)
    await served.reply()  # admitted outside quiet hours: its batch waits for the flush
    all_day = m.QuietHours(start="00:00", end="00:00", time_zone="UTC")
    await served.set_attention(notifications=True, grouping_window_seconds=3, quiet_hours=all_day)
    await flushed(served, 1)
    await served.set_attention(notifications=True, grouping_window_seconds=0)
    seq = await served.reply()
    [delivery] = await delivered(phone_file, 1)  # the suppressed batch never reached the phone
    assert (delivery["notification"]["count"], delivery["notification"]["message_seq"]) == (1, seq)


async def test_attention_settings_survive_a_restart_and_govern_admission(
    serve: Serve, tmp_path: Path
) -> None:
    phone_file = tmp_path / "phone.jsonl"
    served = await serve(StandInPhone(phone_file))
    read = m.AttentionSettingsReadParams()
    assert (await served.personal("attention.settings.read", read)).settings == m.AttentionSettings(
        notifications=True, grouping_window_seconds=0
    )
    await (await served.phone("phone-1")).push_register(PUSH)
    quiet = m.QuietHours(start="22:00", end="07:00", time_zone="Europe/Berlin")
    saved = await served.set_attention(notifications=False, grouping_window_seconds=60, quiet_hours=quiet)
    served = await serve(StandInPhone(phone_file))  # a restart
    assert (await served.personal("attention.settings.read", read)).settings == saved
    await served.reply()  # notifications off since before the restart: dropped at admission
    assert served.plugin.attention.suppressed == 1
    await served.set_attention(notifications=True, grouping_window_seconds=0)
    seq = await served.reply()
    [delivery] = await delivered(phone_file, 1)  # the registration survived the restart too
    assert (delivery["device_id"], delivery["notification"]["message_seq"]) == ("phone-1", seq)


async def test_an_unknown_time_zone_is_invalid_params_and_changes_nothing(serve: Serve) -> None:
    served = await serve(None)
    quiet = m.QuietHours(start="22:00", end="07:00", time_zone="Mars/Olympus_Mons")
    with pytest.raises(UserHostError) as refused:
        await served.set_attention(notifications=True, grouping_window_seconds=0, quiet_hours=quiet)
    assert (refused.value.code, refused.value.field) == (
        m.UserHostErrorCode.INVALID_PARAMS,
        "params.settings.quiet_hours.time_zone",
    )
    read = await served.personal("attention.settings.read", m.AttentionSettingsReadParams())
    assert read.settings == m.AttentionSettings(notifications=True, grouping_window_seconds=0)


# The webhook provider


async def test_the_webhook_provider_posts_each_delivery_with_its_secret_and_survives_a_failing_server(
    serve: Serve, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    received: list[tuple[str, dict[str, Any]]] = []
    answers = [500, 200]

    async def push(request: web.Request) -> web.Response:
        received.append((request.headers.get("Authorization", ""), await request.json()))
        return web.Response(status=answers.pop(0))

    app = web.Application()
    app.router.add_post("/push", push)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    config = tmp_path / "phone.json"
    config.write_text(
        json.dumps({"kind": "webhook", "url": f"http://127.0.0.1:{port}/push", "secret_env": "PUSH_SECRET"})
    )
    monkeypatch.setenv("PUSH_SECRET", "webhook-secret")
    try:
        served = await serve(load_phone_provider(config))
        registration = await (await served.phone("phone-1")).push_register(PUSH)
        with caplog.at_level(logging.WARNING, logger="wuu.host.userhost.personal"):
            first = await served.reply()  # the server answers 500: logged, not retried
            async with asyncio.timeout(DEADLINE):
                while not any(record.message == "a phone delivery failed" for record in caplog.records):
                    await asyncio.sleep(0.02)
            second = await served.reply()
            async with asyncio.timeout(DEADLINE):
                while len(received) < 2:
                    await asyncio.sleep(0.02)
    finally:
        await runner.cleanup()
    assert [authorization for authorization, _ in received] == ["Bearer webhook-secret"] * 2
    for (_, body), seq in zip(received, (first, second), strict=True):
        validators.validate("PhoneDelivery", body)
        assert body["token"] == PUSH.token  # the webhook needs it to reach the phone
        assert body["registration_id"] == registration.registration_id
        assert body["notification"]["message_seq"] == seq
    assert all(PUSH.token not in record.getMessage() + str(vars(record)) for record in caplog.records)


def test_a_phone_configuration_names_every_problem_and_an_unset_secret(tmp_path: Path) -> None:
    config = tmp_path / "phone.json"
    config.write_text(json.dumps({"kind": "webhook", "url": "ftp://x", "secret_env": "A-B", "extra": 1}))
    with pytest.raises(PhoneConfigError) as bad:
        load_phone_provider(config)
    assert all(name in str(bad.value) for name in ("url", "secret_env", "extra"))
    config.write_text(
        json.dumps({"kind": "webhook", "url": "http://127.0.0.1:9/x", "secret_env": "WUU_UNSET_SECRET"})
    )
    with pytest.raises(PhoneConfigError, match="WUU_UNSET_SECRET is unset"):
        load_phone_provider(config)


def test_token_create_for_a_device_is_listed_with_it_and_serve_refuses_a_bad_phone_file(
    home: Path, tmp_path: Path
) -> None:
    binding = ["--home", str(home), "--user-space", "local", "--product-domain", "personal"]
    command = [sys.executable, "-m", "wuu.host.userhost"]
    created = subprocess.run(
        [*command, "token", "create", "--name", "my-phone", "--device", "phone-1", *binding],
        capture_output=True,
        text=True,
        check=True,
    )
    assert TokenStore.of_space(home, "local", "personal").entries()[0].device_id == "phone-1"
    listed = subprocess.run([*command, "token", "list", *binding], capture_output=True, text=True, check=True)
    assert listed.stdout == "my-phone\tdevice phone-1\n" and created.stdout.strip() not in listed.stdout
    again = subprocess.run(
        [*command, "token", "create", "--name", "other", "--device", "phone-1", *binding],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 2 and "--device: device 'phone-1' has a token" in again.stderr
    config = tmp_path / "phone.json"
    config.write_text(json.dumps({"kind": "stand_in", "path": "relative.jsonl"}))
    served = subprocess.run(
        [
            *command,
            "serve",
            *binding,
            "--composition-profile",
            "personal",
            "--phone-config",
            str(config),
            "--stdio",
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert served.returncode == 2 and "--phone-config" in served.stderr and "path" in served.stderr


async def test_over_http_a_device_token_registers_its_device_and_a_plain_token_is_refused(
    serve: Serve, tmp_path: Path
) -> None:
    served = await serve(StandInPhone(tmp_path / "phone.jsonl"))
    http = await HttpServer.start(served.host, HttpAddress.parse("127.0.0.1:0"), served.tokens)
    device, plain = served.tokens.create("tablet", "tablet-1"), served.tokens.create("curl")
    try:
        async with aiohttp.ClientSession() as web:
            for token, status in ((device, 200), (plain, 403)):
                async with web.post(
                    f"http://{http.address}/v1/rpc/push/register",
                    json=PUSH.to_wire(),
                    headers={"Authorization": f"Bearer {token}"},
                ) as response:
                    assert response.status == status
                    answer = await response.json()
            assert answer["error"]["data"]["code"] == "permission_denied"
    finally:
        await http.close()
    [registration] = await served.plugin.tasks.ledger.push_registrations()
    assert (registration.device_id, registration.token) == ("tablet-1", PUSH.token)


# Quiet hours


@pytest.mark.parametrize(
    ("start", "end", "zone", "moment", "quiet"),
    [
        ("22:00", "07:00", "Europe/Berlin", "2026-01-15T21:30:00+00:00", True),  # 22:30 in Berlin
        ("22:00", "07:00", "Europe/Berlin", "2026-01-15T05:59:00+00:00", True),  # 06:59, after midnight
        ("22:00", "07:00", "Europe/Berlin", "2026-01-15T06:00:00+00:00", False),  # 07:00: the end is excluded
        ("22:00", "07:00", "Europe/Berlin", "2026-07-15T20:00:00+00:00", True),  # 22:00 in summer time
        ("09:00", "17:00", "UTC", "2026-01-15T09:00:00+00:00", True),  # the start is included
        ("09:00", "17:00", "UTC", "2026-01-15T17:00:00+00:00", False),
        ("00:00", "00:00", "UTC", "2026-01-15T12:34:00+00:00", True),  # equal: all day
    ],
)
def test_quiet_hours_are_read_on_the_clock_of_their_time_zone(
    start: str, end: str, zone: str, moment: str, quiet: bool
) -> None:
    check = DailyQuiet.of(m.QuietHours(start=start, end=end, time_zone=zone))
    assert check(datetime.fromisoformat(moment)) is quiet
