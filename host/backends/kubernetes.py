"""The `kubernetes` backend: the worker runs in a pod of its own per conversation, through the official
`kubernetes` Python client (an optional extra) and the user's kubeconfig.

The profile is a KubernetesExecutionProfile (spec/schema/config/execution_environments.schema.json). The
pod (`manifests`): one container of the profile's `image`, requests and limits both the profile's `cpus`
and `memory_mb`, the workspace an `emptyDir` volume at `workspace`, no service account token and no
service environment variables (workspace commands see no cluster credentials), `restartPolicy: Never`.
`network: none` is a NetworkPolicy selecting the pod alone and allowing nothing, created before the pod
and deleted with it; it isolates the pod only where the cluster's network plugin enforces it.

Without `persistent` the pod's main process is the stdio worker, reached over the API server's attach
stream, and the pod is deleted at shutdown. With `persistent` the pod is named for the conversation and
kept: its main process only keeps it running, and each connection execs the persistent worker's relay
(`attach`, its socket on a second `emptyDir`), so a reconnect finds the worker's processes. A pod that
this connection had to create holds nothing retained: its worker is told so (`--new-environment`) and
refuses a reconnect's binding with `workspace_missing`, and the pod made for it is deleted again.

The stream is the API server's WebSocket, with the `v5.channel.k8s.io` protocol, the one that can close
the worker's stdin (its EOF); a server without it (before Kubernetes 1.30) fails startup. The client's
calls block, so they run in threads; the stream is read by a thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
from kubernetes.client import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import STDERR_CHANNEL, STDIN_CHANNEL, STDOUT_CHANNEL, V5_CHANNEL_PROTOCOL

from wuu.generated.plain import KubernetesExecutionProfile
from wuu.worker.errors import CleanupFailed
from wuu.worker.framing import reader_limit

from ..errors import BackendUnavailable
from ..profiles import Profile
from .base import Environment
from .conversations import conversation_id, conversation_key, label

CONTAINER = "worker"
SOCKET_DIR = "/run/wuu"
SOCKET = f"{SOCKET_DIR}/worker.sock"
IMAGE_WORKER = ["python3", "-m", "wuu.worker"]
KEEP_RUNNING = ["sleep", "infinity"]
LABEL_POD = "wuu-pod"
LABEL_PROFILE = "wuu-profile"
START_DEADLINE_S = 300.0
POLL_S = 0.5


def pod_name(profile: Profile[KubernetesExecutionProfile], conversation: str | None) -> str:
    """`wuu-<profile>-<id>`, a DNS label: stable per profile and conversation when retained, else random."""
    base = re.sub(r"[^a-z0-9-]+", "-", profile.name.lower()).strip("-")[:40] or "profile"
    if conversation is None:
        return f"wuu-{base}-{secrets.token_hex(8)}"
    return f"wuu-{base}-{conversation_key(profile, conversation)}"


def manifests(
    profile: Profile[KubernetesExecutionProfile], name: str, worker: list[str]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The pod, and the NetworkPolicy that isolates it (None unless `network: none`), as API objects."""
    settings = profile.settings
    quantities: dict[str, str] = {}
    if settings.cpus is not None:
        quantities["cpu"] = f"{settings.cpus:g}"
    if settings.memory_mb is not None:
        quantities["memory"] = f"{settings.memory_mb}Mi"
    persistent = settings.persistent
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": settings.image,
        "command": KEEP_RUNNING if persistent else worker,
        "stdin": not persistent,
        "stdinOnce": not persistent,
        "tty": False,
        "workingDir": "/",
        "volumeMounts": [
            {"name": "workspace", "mountPath": settings.workspace},
            {"name": "run", "mountPath": SOCKET_DIR},
        ],
    }
    if quantities:
        container["resources"] = {"requests": dict(quantities), "limits": dict(quantities)}
    labels = {
        LABEL_POD: name,
        LABEL_PROFILE: label(profile).strip("_"),
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [container],
            "volumes": [{"name": "workspace", "emptyDir": {}}, {"name": "run", "emptyDir": {}}],
        },
    }
    if settings.network.value != "none":
        return pod, None
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels},
        "spec": {"podSelector": {"matchLabels": {LABEL_POD: name}}, "policyTypes": ["Ingress", "Egress"]},
    }
    return pod, policy


def api_client(profile: Profile[KubernetesExecutionProfile], environ: Mapping[str, str]) -> Any:
    """A client of the profile's cluster: its `kubeconfig` and `context`, else $KUBECONFIG or ~/.kube/config,
    else the in-cluster service account. BackendUnavailable saying which when none loads."""
    settings = profile.settings
    path = settings.kubeconfig or environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
    name = profile.name
    if Path(path).is_file():
        try:
            # The client's configuration loaders have no annotations.
            return kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=path, context=settings.context
            )
        except (kubernetes.config.ConfigException, ValueError, OSError) as error:
            raise BackendUnavailable(f"profile {name!r}: kubeconfig {path}: {error}") from None
    if settings.kubeconfig or settings.context:
        raise BackendUnavailable(f"profile {name!r}: kubeconfig: {path} does not exist")
    try:
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        raise BackendUnavailable(
            f"profile {name!r}: no kubeconfig at {path}, and this host is not in a pod of a cluster; "
            "set `kubeconfig` in the profile or KUBECONFIG"
        ) from None
    return kubernetes.client.ApiClient(configuration)


class _StreamTransport(asyncio.Transport):
    """The worker's stdin on the stream: writes go out in order on a thread of their own; closing is the v5
    close of the stdin channel (the worker's EOF), while its output still comes back."""

    def __init__(self, socket: Any) -> None:
        super().__init__()
        self._socket = socket
        self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wuu-k8s-stdin")
        self._eof = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._eof:
            raise RuntimeError("write after EOF on the worker's stream")
        self._sender.submit(self._socket.write_stdin, bytes(data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if not self._eof:
            self._eof = True
            self._sender.submit(self._socket.close_channel, STDIN_CHANNEL)

    def close(self) -> None:
        self.write_eof()

    def is_closing(self) -> bool:
        return self._eof

    def abort(self) -> None:
        self._eof = True
        with contextlib.suppress(Exception):
            self._socket.close()
        self._sender.shutdown(wait=False, cancel_futures=True)

    def get_write_buffer_size(self) -> int:
        return 0


class KubernetesEnvironment(Environment):
    """A pod of the profile's image with the worker on its attach (or exec) stream."""

    def __init__(
        self, profile: Profile[KubernetesExecutionProfile], environ: Mapping[str, str] | None = None
    ) -> None:
        settings = self.settings = profile.settings
        if settings.shared:
            raise BackendUnavailable(
                f"profile {profile.name!r}: shared: a pod shared by conversations is not available yet "
                "(omit `shared`: each conversation gets its own)"
            )
        self.profile = profile
        self.environ = os.environ if environ is None else environ
        conversation = conversation_id(profile, self.environ) if settings.persistent else None
        self.name = pod_name(profile, conversation)
        self.namespace = settings.namespace
        self.created = False
        self._core: Any = None
        self._networking: Any = None
        self._socket: Any = None
        self._transport: _StreamTransport | None = None
        self._ended = threading.Event()

    def worker_command(self) -> list[str]:
        """The profile's `worker`, else the image's (the persistent worker's relay when retained); told when
        the pod is new."""
        if self.settings.worker:
            return list(self.settings.worker)
        if self.settings.persistent:
            lifetime = str(self.settings.lifetime_seconds)
            command = [*IMAGE_WORKER, "attach", "--socket", SOCKET, "--lifetime-seconds", lifetime]
        else:
            command = list(IMAGE_WORKER)
        return [*command, "--new-environment"] if self.created else command

    # --- provisioning (blocking client calls, in a thread) -----------------------------------------------

    def _provision(self) -> None:
        client = api_client(self.profile, self.environ)
        self._core = kubernetes.client.CoreV1Api(client)
        self._networking = kubernetes.client.NetworkingV1Api(client)
        found = None
        if self.settings.persistent:
            with contextlib.suppress(ApiException):
                found = self._core.read_namespaced_pod(self.name, self.namespace)
        if found is None:
            self.created = True
            pod, policy = manifests(self.profile, self.name, self.worker_command())
            try:
                if policy is not None:  # first: the pod never runs without it
                    self._networking.create_namespaced_network_policy(self.namespace, policy)
                self._core.create_namespaced_pod(self.namespace, pod)
            except ApiException as error:
                raise BackendUnavailable(
                    f"profile {self.profile.name!r}: creating the pod {self.name} in namespace {self.namespace} "
                    f"failed: {error.status} {error.reason}: {error.body}"
                ) from None
        self._wait_running()
        self._socket = self._open_stream()
        if self._socket.subprotocol != V5_CHANNEL_PROTOCOL:
            self._socket.close()
            raise BackendUnavailable(
                f"profile {self.profile.name!r}: the API server does not offer the {V5_CHANNEL_PROTOCOL} stream "
                "protocol (Kubernetes 1.30 or later), without which the worker cannot be given its EOF"
            )

    def _wait_running(self) -> None:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            pod = self._core.read_namespaced_pod(self.name, self.namespace)
            if pod.status.phase == "Running":
                return
            waiting = [
                state.state.waiting
                for state in pod.status.container_statuses or ()
                if state.state and state.state.waiting and state.state.waiting.reason != "ContainerCreating"
            ]
            if pod.status.phase in ("Failed", "Succeeded") or waiting or time.monotonic() > deadline:
                why = waiting[0].reason + f": {waiting[0].message}" if waiting else pod.status.phase
                raise BackendUnavailable(
                    f"profile {self.profile.name!r}: the pod {self.name} did not start: {why}"
                )
            time.sleep(POLL_S)

    def _open_stream(self) -> Any:
        common = {
            "container": CONTAINER,
            "stdin": True,
            "stdout": True,
            "stderr": True,
            "tty": False,
            "_preload_content": False,
            "binary": True,
        }
        if self.settings.persistent:
            connect = self._core.connect_get_namespaced_pod_exec
            return stream(connect, self.name, self.namespace, command=self.worker_command(), **common)
        return stream(self._core.connect_get_namespaced_pod_attach, self.name, self.namespace, **common)

    def _read(self, loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader) -> None:
        """The stream's reader thread: stdout into `reader`, stderr onto ours, until the stream closes."""
        socket = self._socket
        try:
            while socket.is_open():
                socket.update(timeout=1)
                for channel in (STDOUT_CHANNEL, STDERR_CHANNEL):
                    data = socket.read_channel(channel, timeout=0)
                    if data and channel == STDOUT_CHANNEL:
                        loop.call_soon_threadsafe(reader.feed_data, data)
                    elif data:
                        with contextlib.suppress(OSError, ValueError):
                            sys.stderr.buffer.write(data)
                            sys.stderr.buffer.flush()
        finally:
            self._ended.set()
            loop.call_soon_threadsafe(reader.feed_eof)

    # --- the Environment interface -----------------------------------------------------------------------

    async def start(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            await asyncio.to_thread(self._provision)
        except BaseException:
            await asyncio.to_thread(self._delete_if_made)
            raise
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=reader_limit(), loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        self._transport = _StreamTransport(self._socket)
        threading.Thread(target=self._read, args=(loop, reader), name="wuu-k8s-stdout", daemon=True).start()
        return reader, asyncio.StreamWriter(self._transport, protocol, reader, loop)

    async def close(self, budget: float) -> None:
        if self._transport is None:
            return
        deadline = time.monotonic() + budget
        kept = f"the pod {self.name} in namespace {self.namespace} is kept for inspection"
        self._transport.write_eof()
        ended = await asyncio.to_thread(self._ended.wait, budget)
        if not ended:
            self._transport.abort()
            raise CleanupFailed(f"the worker did not exit within its shutdown budget of {budget:g} s; {kept}")
        code = await asyncio.to_thread(self._exit_code, deadline)
        self._transport.abort()
        if code != 0:
            raise CleanupFailed(
                f"the worker exited with status {code}; its cleanup may be incomplete; {kept}"
            )
        if self.settings.persistent and not (self.created and self.reconnect):
            return
        await asyncio.to_thread(self._delete_if_made, force=True)

    def _exit_code(self, deadline: float) -> int | None:
        """The worker's exit status: the exec's, or the pod's container's once it has terminated."""
        if self.settings.persistent:
            code: int | None = self._socket.returncode
            return code
        while time.monotonic() < deadline:
            pod = self._core.read_namespaced_pod(self.name, self.namespace)
            for status in pod.status.container_statuses or ():
                if status.state and status.state.terminated:
                    return int(status.state.terminated.exit_code)
            time.sleep(POLL_S)
        return None

    def _delete_if_made(self, force: bool = False) -> None:
        """Delete the pod and its policy: after a failed start only one this connection created."""
        if self._core is None or not (self.created or force):
            return
        with contextlib.suppress(ApiException):
            self._core.delete_namespaced_pod(self.name, self.namespace, grace_period_seconds=0)
        if self.settings.network.value == "none":
            with contextlib.suppress(ApiException):
                self._networking.delete_namespaced_network_policy(self.name, self.namespace)
