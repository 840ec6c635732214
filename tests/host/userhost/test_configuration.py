"""`wuu-userhost serve` configured by file, as real processes on real files: the explicit `--config` or the
user configuration under the home (never a file of the working directory), composition profiles as data
(a profile without `wuu.client-input-receipts` admits no input and keeps the saved receipts readable; one that
excludes `execution.authorization` starts no task), flags over the file, and every error of a bad file at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import DEADLINE
from tests.host.userhost.personal.conftest import call, error, main_session, result, send
from tests.host.userhost.personal.test_task_transports import reply_to
from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost.client import UserHostClient

COMMAND = [str(Path(sys.executable).parent / "wuu-userhost"), "serve"]
BINDING = ["--user-space", "local", "--product-domain", "personal"]
WITHOUT_RECEIPTS = {"base": "personal", "remove_modules": ["wuu.client-input-receipts"]}


def write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


async def spawn(home: Path, *flags: str, cwd: Path | None = None) -> UserHostClient:
    """A stdio host on `home`, started in `cwd` (by default this process's)."""
    chdir = ["env", "-C", str(cwd)] if cwd is not None else []
    return await UserHostClient.spawn([*chdir, *COMMAND, *BINDING, "--home", str(home), "--stdio", *flags])


async def started(home: Path, *flags: str) -> UserHostClient:
    """A stdio host on `home`, initialized."""
    client = await spawn(home, *flags)
    await client.initialize()
    return client


async def plugins(home: Path, *flags: str, cwd: Path | None = None) -> list[str]:
    """The plugin IDs a host started so composes."""
    client = await spawn(home, *flags, cwd=cwd)
    try:
        return [plugin.plugin_id for plugin in (await client.initialize()).plugins]
    finally:
        await client.close()


def refused(home: Path, *flags: str, cwd: Path | None = None) -> str:
    """The stderr of a host that cannot start (exit 2, no traceback)."""
    done = subprocess.run(
        [*COMMAND, *BINDING, "--home", str(home), "--stdio", *flags],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr


async def test_a_host_composes_the_profile_its_configuration_file_names(home: Path, tmp_path: Path) -> None:
    assert await plugins(home) == []  # no file, no flag: nothing is composed
    config = write(
        tmp_path / "etc" / "wuu.json", {"composition_profile": "personal", "model": {"kind": "stand_in"}}
    )
    assert await plugins(home, "--config", str(config)) == ["wuu.personal"]


async def test_the_user_configuration_under_the_home_is_read_without_the_flag(home: Path) -> None:
    write(home / "config.json", {"composition_profile": "personal"})
    assert await plugins(home) == ["wuu.personal"]


async def test_no_file_of_the_working_directory_is_read(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    for name in ("config.json", ".wuu/config.json", "wuu.json"):
        write(project / name, {"composition_profile": "personal", "not_a_key": True})
    stderr = refused(home, "--config", "config.json", cwd=project)  # not even when named relatively
    assert "--config: 'config.json' is not an absolute path" in stderr
    assert list(home.iterdir()) == []
    assert await plugins(home, cwd=project) == []


async def test_the_flag_overrides_the_configured_profile(home: Path, tmp_path: Path) -> None:
    config = write(
        tmp_path / "wuu.json",
        {"composition_profile": "quiet", "composition_profiles": {"quiet": WITHOUT_RECEIPTS}},
    )
    client = await started(home, "--config", str(config), "--composition-profile", "personal")
    try:
        user_input = {"client_input_id": "c1", "request_id": "r1", "text": "hello"}
        assert result(await send(client, await main_session(client), user_input))["receipt"]["accepted"]
    finally:
        await client.close()


async def test_without_the_receipts_module_no_input_is_admitted_and_saved_receipts_stay(
    home: Path, tmp_path: Path
) -> None:
    client = await started(home, "--composition-profile", "personal")
    try:
        main = await main_session(client)
        first = {"client_input_id": "c1", "request_id": "r1", "text": "before"}
        assert result(await send(client, main, first))["receipt"]["accepted"]
    finally:
        await client.close()
    # A custom explicit module list without the receipts module, then the Personal bundle patched without it.
    explicit = {"modules": ["wuu.personal"], "services": {"session.domain": "wuu.session-domain.sqlite"}}
    profiles = {"explicit": explicit, "patched": WITHOUT_RECEIPTS}
    for name in profiles:
        config = write(tmp_path / "wuu.json", {"composition_profile": name, "composition_profiles": profiles})
        client = await started(home, "--config", str(config))
        try:
            later = {"client_input_id": f"c-{name}", "request_id": f"r-{name}", "text": "after"}
            error(await send(client, main, later), UserHostErrorCode.INPUT_RECEIPTS_UNAVAILABLE)
            read = await call(client, "agents.receipts", {"session_id": main, "client_input_ids": ["c1"]})
            [receipt] = result(read)["receipts"]
            assert (receipt["client_input_id"], receipt["accepted"]) == ("c1", True)
            history = result(await call(client, "agents.history.read", {"session_id": main}))
            assert "before" in [message["text"] for message in history["messages"]]
        finally:
            await client.close()


async def test_excluding_the_authorization_provider_refuses_a_task_with_no_fallback(
    home: Path, tmp_path: Path
) -> None:
    solo = {"base": "personal", "exclusions": ["execution.authorization"]}
    config = write(
        tmp_path / "wuu.json", {"composition_profile": "solo", "composition_profiles": {"solo": solo}}
    )
    client = await started(home, "--config", str(config))
    try:
        told = await reply_to(client, await main_session(client), 1)
        assert told.startswith("refused (authorization_unavailable): "), told
    finally:
        await client.close()
    # The flag binds the native provider again over the file's exclusion.
    client = await started(home, "--config", str(config), "--authorization", "native")
    try:
        told = await reply_to(client, await main_session(client), 2)
        assert told.startswith("started task "), told
    finally:
        await client.close()


def test_every_error_of_a_bad_file_is_reported_at_once(home: Path, tmp_path: Path) -> None:
    shapes = write(
        tmp_path / "shapes.json",
        {
            "composition_profile": "Quiet",
            "composition_profiles": {"quiet": {"base": "personal", "remove": []}},
            "model": {"kind": "gpt"},
            "executon_environments": {},
        },
    )
    stderr = refused(home, "--config", str(shapes))
    for field in (
        "composition_profile",
        "composition_profiles.quiet",
        "model.kind",
        "'executon_environments'",
    ):
        assert f"--config: {shapes}: " in stderr and field in stderr, (field, stderr)
    profiles = {
        "quiet": {"base": "personal", "remove_modules": ["wuu.memory"]},
        "lean": {"modules": ["wuu.personal"], "services": {"session.domain": "wuu.session-domain.sqlite"}},
        "leaner": {"base": "lean", "remove_modules": ["wuu.client-input-receipts"]},
        "twice": {"base": "personal", "add_modules": ["wuu.personal"]},
        "elsewhere": {"base": "personal", "services": {"session.domain": "wuu.session-domain.postgres"}},
        "bare": {"modules": ["wuu.personal"]},
        "loop": {"base": "loop"},
        "personal": {"modules": []},
        "both": {
            "base": "personal",
            "services": {"review.ledger": "wuu.review-ledger.sqlite"},
            "exclusions": ["review.ledger"],
        },
    }
    meanings = write(
        tmp_path / "meanings.json", {"composition_profile": "quiet", "composition_profiles": profiles}
    )
    stderr = refused(home, "--config", str(meanings))
    where = f"--config: {meanings}: composition_profiles"
    for expected in (
        f"{where}.quiet.remove_modules.0: no module 'wuu.memory' in this installation",
        f"{where}.leaner.remove_modules.0: the base profile 'lean' does not select wuu.client-input-receipts",
        f"{where}.twice.add_modules.0: wuu.personal is already in the base profile 'personal'",
        f"{where}.elsewhere.services.session.domain: no provider 'wuu.session-domain.postgres'",
        f"{where}.bare: wuu.personal requires the service session.domain, which it binds no provider",
        f"{where}.loop.base: loop -> loop is a cycle",
        f"{where}.personal: 'personal' is a shipped profile",
        f"{where}.both.exclusions.0: review.ledger is bound in services too",
    ):
        assert expected in stderr, (expected, stderr)
    assert list(home.iterdir()) == []


def test_a_profile_of_the_personal_plugin_is_refused_on_another_domain(home: Path, tmp_path: Path) -> None:
    coding = ["--product-domain", "coding"]
    stderr = refused(home, *coding, "--composition-profile", "personal")
    assert "--composition-profile: the profile 'personal' selects wuu.personal" in stderr
    assert "'coding' host" in stderr
    config = write(tmp_path / "wuu.json", {"composition_profile": "personal"})
    stderr = refused(home, *coding, "--config", str(config))
    assert f"--config: {config}: composition_profile: the profile 'personal' selects wuu.personal" in stderr
    assert list(home.iterdir()) == []


def test_the_model_and_execution_errors_of_a_file_are_reported_together(home: Path, tmp_path: Path) -> None:
    config = write(
        tmp_path / "wuu.json",
        {
            "composition_profile": "personal",
            "model": {"kind": "stand_in", "base_url": "https://llm.example/v1"},
            "execution_environments": {"default": "remote"},
        },
    )
    stderr = refused(home, "--config", str(config))
    assert f"--config: {config}: model.base_url: only an 'openai_chat' model has one" in stderr
    assert f"--config: {config}: execution_environments.default: no profile is named 'remote'" in stderr
    # The flags' files replace the file's keys: with both given, the file's wrong values are not used.
    model = write(tmp_path / "model.json", {"kind": "stand_in"})
    environments = write(tmp_path / "environments.json", {"execution_environments": {}})
    stderr = refused(home, "--config", str(config), "--model-config", str(model), "--execution-profile", "x")
    assert "model.base_url" not in stderr and "execution_environments.default" in stderr
    stderr = refused(
        home,
        "--config",
        str(config),
        "--model-config",
        str(model),
        "--execution-config",
        str(environments),
        "--execution-profile",
        "x",
    )
    assert "--execution-config: " in stderr and "no profile is named 'x'" in stderr and "remote" not in stderr
    assert list(home.iterdir()) == []
