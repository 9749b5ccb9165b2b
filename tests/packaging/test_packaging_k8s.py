"""The Kubernetes manifests: valid against the API schema (strict: an unknown or misspelt field
fails), and wired together — the agent reaches the collector's Service, reads the host's /proc
and /sys through the roots it is given, and names itself after its node."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import ValidationError, latest_version, validate

from nodeagent.agent.config import config_from_mapping
from tests.fakes.trees import REPO

K8S = REPO / "packaging" / "k8s"
MANIFESTS = sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
# The oldest Kubernetes the manifests are meant for, and the newest schema at hand.
KUBERNETES_VERSIONS = ["1.29.0", latest_version()]


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _all_documents() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in _documents(path)]


def _find(kind: str, name: str) -> dict[str, Any]:
    for doc in _all_documents():
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name} in {K8S}")


def _flag(args: list[str], name: str) -> str:
    values = [arg.split("=", 1)[1] for arg in args if arg.startswith(f"{name}=")]
    assert len(values) == 1, f"{name} given {len(values)} times in {args}"
    return values[0]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid_against_the_kubernetes_schema(path: Path, version: str) -> None:
    for doc in _documents(path):
        validate(doc, version, strict=True)


def test_validation_rejects_a_misspelt_field() -> None:
    """Control: strict validation does catch what a typo would break."""
    daemonset = _find("DaemonSet", "nodeagent")
    daemonset["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(ValidationError, match="hostNetwrok"):
        validate(daemonset, latest_version(), strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(p.name for p in MANIFESTS)


def test_everything_is_in_one_namespace() -> None:
    namespaces = {doc["metadata"]["name"] for doc in _all_documents() if doc["kind"] == "Namespace"}
    assert namespaces == {"nodeagent"}
    for doc in _all_documents():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "nodeagent", doc["metadata"]["name"]


def test_agent_daemonset_reads_the_host_through_its_roots() -> None:
    pod = _find("DaemonSet", "nodeagent")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] == "run"
    assert pod["hostNetwork"] is True
    assert pod["hostPID"] is True
    assert pod["runtimeClassName"] == "nvidia"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    for flag, host_path in (("--procfs", "/proc"), ("--sysfs", "/sys")):
        mount = mounts[_flag(args, flag)]
        assert mount.get("readOnly") is True
        assert volumes[mount["name"]]["hostPath"]["path"] == host_path
    spool = mounts[_flag(args, "--spool-dir")]
    assert "hostPath" in volumes[spool["name"]], "the spool must outlive the pod"
    assert "readOnly" not in spool
    # The node id is the node's name, from the downward API.
    env = {item["name"]: item for item in container["env"]}
    assert _flag(args, "--node-id") == "$(NODE_NAME)"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert any(t.get("key") == "nvidia.com/gpu" for t in pod["tolerations"])
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["PERFMON"]}
    assert security["readOnlyRootFilesystem"] is True


def test_agent_reaches_the_collector_service() -> None:
    args = _find("DaemonSet", "nodeagent")["spec"]["template"]["spec"]["containers"][0]["args"]
    host, _, port = _flag(args, "--collector").rpartition(":")
    service_name, namespace, suffix = host.split(".", 2)
    assert suffix == "svc"
    service = _find("Service", service_name)
    assert service["metadata"]["namespace"] == namespace
    grpc_port = next(p for p in service["spec"]["ports"] if p["port"] == int(port))

    deployment = _find("Deployment", "nodeagent-collector")
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[grpc_port["targetPort"]] == int(_flag(container["args"], "--listen").rpartition(":")[2])
    http_port = next(p for p in service["spec"]["ports"] if p["name"] == "http")
    assert ports[http_port["targetPort"]] == int(_flag(container["args"], "--http-listen").rpartition(":")[2])


def test_collector_keeps_its_database_on_the_claim() -> None:
    deployment = _find("Deployment", "nodeagent-collector")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"  # one writer on the SQLite file
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][0] == "serve"
    db = Path(_flag(container["args"], "--db"))
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(db.parent))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    _find("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])


@pytest.mark.parametrize(("workload", "key"), [("nodeagent", "agent.toml"), ("nodeagent-collector", "collector.toml")])
def test_configuration_is_mounted_where_the_command_reads_it(workload: str, key: str) -> None:
    kind = "DaemonSet" if workload == "nodeagent" else "Deployment"
    pod = _find(kind, workload)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    config = Path(_flag(container["args"], "--config"))
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config.parent))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    config_map = _find("ConfigMap", volume["configMap"]["name"])
    assert config.name == key and key in config_map["data"]


def test_agent_config_map_is_a_valid_agent_configuration() -> None:
    text = _find("ConfigMap", "nodeagent-agent")["data"]["agent.toml"]
    config_from_mapping(tomllib.loads(text), source="packaging/k8s/agent.yaml")


def test_agent_serves_metrics_where_dcgm_exporter_did_with_the_kubelets_pod_labels() -> None:
    pod = _find("DaemonSet", "nodeagent")["spec"]["template"]
    container = pod["spec"]["containers"][0]
    args = container["args"]
    port = int(_flag(args, "--metrics-listen").rpartition(":")[2])
    assert port == 9400, "dcgm-exporter's port: its scrape configs keep working"
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"] == port
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port
    socket = Path(_flag(args, "--pod-resources-socket"))
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(socket.parent))
    assert mount.get("readOnly") is True
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
