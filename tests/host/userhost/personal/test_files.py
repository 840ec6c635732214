"""What a crash can leave in the space's files folder is removed when the host starts: bytes written for an
admission that never committed (in `.incoming`, or renamed into place with no receipt naming them); the
bytes of admitted attachments stay."""

from __future__ import annotations

from pathlib import Path

from tests.host.userhost.personal.conftest import Inputs, StartSpace, attachment, files_in, result, send
from wuu.host.userhost import UnixServer
from wuu.host.userhost.client import UserHostClient


async def test_a_restart_removes_only_unadmitted_bytes(
    start_space: StartSpace, inputs: Inputs, run_dir: Path
) -> None:
    space = await start_space()
    server = await UnixServer.start(space.host, run_dir / "personal.sock")
    client = await UserHostClient.connect_unix(server.path)
    await client.initialize()
    receipt = result(await send(client, space.main, inputs("kept", [attachment(b"admitted bytes")])))[
        "receipt"
    ]
    await client.close()
    await server.close()
    await space.host.close()
    folder = space.files / "attachments"
    (folder / "att_cut_short").write_bytes(b"renamed into place, never committed")
    (folder / ".incoming" / "att_half_written").write_bytes(b"half")

    restarted = await start_space()
    kept = folder / receipt["attachments"][0]["attachment_id"]
    assert files_in(restarted.files) == [kept]
    assert kept.read_bytes() == b"admitted bytes"
