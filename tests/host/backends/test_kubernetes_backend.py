"""The kubernetes backend. No cluster runs here, so most of these are MAPPING TESTS: the profile as the
client's own API objects (V1Pod, V1NetworkPolicy), and the failures that need no cluster (no kubeconfig, a
bad one, `shared`). The live test runs the conformance suite in pods when WUU_EXECUTION_E2E_KUBECONFIG
names a kubeconfig, with the worker image WUU_EXECUTION_E2E_K8S_IMAGE (default `wuu-execution:local`,
loaded into the cluster, e.g. `kind load docker-image wuu-execution:local`); it is skipped otherwise.
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import passes_every_case
from wuu.host.backends.kubernetes import KubernetesEnvironment, api_client, manifests, pod_name
from wuu.host.errors import BackendUnavailable
from wuu.host.profiles import parse

IMAGE = "registry.example.org/wuu-execution:4"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def profile(**settings: Any) -> Any:
    given = {"backend": "kubernetes", "image": IMAGE, "workspace": "/workspace", **settings}
    return parse({"execution_environments": {"profiles": {"Team_Pods": given}}}).select("Team_Pods")


def as_client_object(manifest: dict[str, Any], kind: str) -> dict[str, Any]:
    """`manifest` through the client's own model `kind` and back: a field the model lacks would be lost."""
    import kubernetes.client

    client = kubernetes.client.ApiClient()
    model = client._ApiClient__deserialize(manifest, kind)  # type: ignore[attr-defined]
    found: dict[str, Any] = client.sanitize_for_serialization(model)
    return found


def test_the_pod_maps_the_profile_onto_the_clients_v1pod() -> None:
    made = KubernetesEnvironment(profile(cpus=1.5, memory_mb=2048, namespace="agents"), {})
    made.created = True
    pod, policy = manifests(made.profile, made.name, made.worker_command())
    assert policy is None, "the cluster network: no policy of ours"
    assert as_client_object(pod, "V1Pod") == pod
    assert pod["metadata"]["namespace"] == "agents"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    [container] = spec["containers"]
    assert container["image"] == IMAGE
    assert container["command"] == ["python3", "-m", "wuu.worker", "--new-environment"]
    assert container["stdin"] is True and container["stdinOnce"] is True and container["tty"] is False
    limits = {"cpu": "1.5", "memory": "2048Mi"}
    assert container["resources"] == {"requests": limits, "limits": limits}
    assert {"name": "workspace", "mountPath": "/workspace"} in container["volumeMounts"]
    assert {"name": "workspace", "emptyDir": {}} in spec["volumes"]
    assert "env" not in container, "no variable of the host's environment"


def test_network_none_is_a_deny_all_policy_of_the_pod_alone() -> None:
    made = KubernetesEnvironment(profile(network="none"), {})
    pod, policy = manifests(made.profile, made.name, made.worker_command())
    assert policy is not None
    assert as_client_object(policy, "V1NetworkPolicy") == policy
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {"wuu-pod": made.name}},
        "policyTypes": ["Ingress", "Egress"],
    }
    assert pod["metadata"]["labels"]["wuu-pod"] == made.name


def test_a_persistent_pod_is_named_for_its_conversation_and_runs_the_relay_per_connection() -> None:
    settings = profile(persistent=True, lifetime_seconds=900)
    one = KubernetesEnvironment(settings, {"WUU_CONVERSATION": "conv-1"})
    assert one.name == KubernetesEnvironment(settings, {"WUU_CONVERSATION": "conv-1"}).name
    assert one.name != KubernetesEnvironment(settings, {"WUU_CONVERSATION": "conv-2"}).name
    assert DNS_LABEL.fullmatch(one.name), one.name
    pod, _ = manifests(one.profile, one.name, one.worker_command())
    [container] = pod["spec"]["containers"]
    assert container["command"] == ["sleep", "infinity"] and container["stdin"] is False
    assert one.worker_command() == [
        "python3", "-m", "wuu.worker", "attach", "--socket", "/run/wuu/worker.sock", "--lifetime-seconds", "900",
    ]  # fmt: skip
    fresh = {pod_name(one.profile, None) for _ in range(3)}
    assert len(fresh) == 3 and all(DNS_LABEL.fullmatch(name) for name in fresh)


def test_a_profiles_own_worker_runs_as_given() -> None:
    made = KubernetesEnvironment(profile(worker=["/usr/local/bin/wuu-worker"]), {})
    made.created = True
    assert made.worker_command() == ["/usr/local/bin/wuu-worker"]


def test_a_shared_profile_is_refused() -> None:
    with pytest.raises(BackendUnavailable, match="shared: a pod shared by conversations is not available"):
        KubernetesEnvironment(profile(shared=True), {})


def test_a_missing_or_bad_kubeconfig_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(BackendUnavailable, match=f"kubeconfig: {missing} does not exist"):
        api_client(profile(kubeconfig=str(missing)), {})
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(BackendUnavailable, match="this host is not in a pod of a cluster; set `kubeconfig`"):
        api_client(profile(), {"KUBECONFIG": str(missing)})
    bad = tmp_path / "config"
    bad.write_text("apiVersion: v1\nkind: Config\ncontexts: []\nclusters: []\nusers: []\n", encoding="utf-8")
    with pytest.raises(BackendUnavailable, match=f"profile 'Team_Pods': kubeconfig {bad}: "):
        api_client(profile(kubeconfig=str(bad), context="prod"), {})


@pytest.mark.skipif(
    not os.environ.get("WUU_EXECUTION_E2E_KUBECONFIG"), reason="WUU_EXECUTION_E2E_KUBECONFIG names no cluster"
)
async def test_the_conformance_suite_passes_in_a_pod(tmp_path: Path) -> None:
    settings = {
        "backend": "kubernetes",
        "image": os.environ.get("WUU_EXECUTION_E2E_K8S_IMAGE", "wuu-execution:local"),
        "workspace": "/workspace",
        "kubeconfig": os.environ["WUU_EXECUTION_E2E_KUBECONFIG"],
    }
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"execution_environments": {"profiles": {"live": settings}}}), encoding="utf-8"
    )
    command = [sys.executable, "-m", "wuu.host", "adapter", "--config", str(config), "--profile", "live"]
    os.environ.setdefault("WUU_CONVERSATION", f"live-{uuid.uuid4().hex[:8]}")
    await passes_every_case(command, "through kubernetes", 120.0)
