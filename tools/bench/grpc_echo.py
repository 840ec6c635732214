"""The user host's gRPC baseline: a raw grpc.aio servicer of the bench's cheap rpc.

It serves one rpc, `wuu.userhost.v1.UserHost/PluginClientCancel`, with no rule of the protocol: the request's
bytes are not even parsed, and every call is answered at once with the serialized result a host gives the
bench's cheap request (`{"cancelled": false}`, which is the empty message in proto3). Its server has the
message limits of the user host, so the two sides differ only in what the host does with a call.

Usage: python tools/bench/grpc_echo.py SOCKET   (a plain script: it imports nothing from wuu or tools)
"""

from __future__ import annotations

import asyncio
import os
import sys

import grpc

# The user host's frame limit (USERHOST_MAX_FRAME_BYTES), its gRPC message limit too.
MESSAGE_LIMIT = 32 * 1024 * 1024
RESULT = b""  # PluginClientCancelResult(cancelled=False)


async def cancel(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    """Answer at once."""
    return RESULT


async def serve(path: str) -> None:
    """Serve until killed."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MESSAGE_LIMIT),
            ("grpc.max_send_message_length", MESSAGE_LIMIT),
        ]
    )
    handler = grpc.method_handlers_generic_handler(
        "wuu.userhost.v1.UserHost", {"PluginClientCancel": grpc.unary_unary_rpc_method_handler(cancel)}
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix:{path}")
    await server.start()
    os.chmod(path, 0o600)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
