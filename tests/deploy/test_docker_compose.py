"""The compose files parse, name the services the deployment needs, and configure every
keyshift process with keys the config loader accepts (the same keys as local defaults)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from keyshift.config import ConfigError, load_config

DOCKER = Path(__file__).resolve().parents[2] / "docker"
_VAR = re.compile(r"\$\{(\w+)(?::?[-?]([^}]*))?\}")


def _compose(name: str) -> dict:
    return yaml.safe_load((DOCKER / name).read_text())


def _interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${NAME:-default} substitution, enough to feed the config loader."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(2) or ""), str(value))


def _keyshift_env(service: dict, env: dict[str, str] | None = None) -> dict[str, str]:
    raw = service.get("environment") or {}
    return {k: _interpolate(v, env or {}) for k, v in raw.items() if k.startswith("KEYSHIFT_")}


@pytest.fixture(scope="module")
def compose() -> dict:
    return _compose("docker-compose.yml")


def test_services_of_the_deployment_are_present(compose: dict) -> None:
    services = set(compose["services"])
    for needed in ("kafka", "spark-master", "spark-worker-1", "spark-worker-2", "mlflow",
                   "postgres", "airflow-apiserver", "airflow-scheduler",
                   "airflow-dag-processor", "keyshift-stream"):
        assert needed in services


def test_every_keyshift_variable_is_a_valid_config_key(compose: dict) -> None:
    for name, service in compose["services"].items():
        env = _keyshift_env(service, {"SPARK_MASTER_HOST": "spark-master"})
        if not env:
            continue
        cfg = load_config(env=env)  # unknown or out-of-range keys raise ConfigError
        assert cfg.kafka.host == "kafka", name
        assert cfg.spark.master == "spark://spark-master:7077", name
        assert cfg.mlflow_tracking_uri == "http://mlflow:5000", name
        assert str(cfg.warehouse_path) == "/data/keyshift/warehouse", name


def test_code_running_services_get_the_keys_the_code_reads(compose: dict) -> None:
    needed = {"KEYSHIFT_KAFKA__HOST", "KEYSHIFT_SPARK__MASTER", "KEYSHIFT_MLFLOW__TRACKING_URI",
              "KEYSHIFT_WAREHOUSE__ROOT", "KEYSHIFT_HOME"}
    for name in ("keyshift-stream", "airflow-scheduler", "airflow-apiserver", "spark-worker-1",
                 "spark-worker-2", "spark-master"):
        assert needed <= set(compose["services"][name]["environment"]), name


def test_airflow_services_use_the_repo_dags_and_postgres(compose: dict) -> None:
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                 "airflow-init"):
        env = compose["services"][name]["environment"]
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/keyshift/dags"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"


def test_mlflow_has_a_database_backend(compose: dict) -> None:
    cmd = compose["services"]["mlflow"]["command"]
    uri = cmd[cmd.index("--backend-store-uri") + 1]
    assert uri.startswith("postgresql")
    assert "postgres" in compose["services"]["mlflow"]["depends_on"]


def test_worker_file_joins_the_master_with_valid_keys() -> None:
    worker = _compose("docker-compose.worker.yml")["services"]["spark-worker"]
    env = _keyshift_env(worker, {"SPARK_MASTER_HOST": "10.0.0.5"})
    assert load_config(env=env).spark.master == "spark://10.0.0.5:7077"


def test_a_misspelt_key_would_be_caught() -> None:
    """The check above can fail: the loader rejects a key that does not exist."""
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(env={"KEYSHIFT_SPARK__MASTERS": "spark://x:7077"})


def test_dockerfile_copies_every_package_the_services_import() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    import tomllib

    setup = tomllib.loads((DOCKER.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    for folder in ["keyshift", "dags", *setup["package-dir"].values()]:
        assert f"COPY {folder} ./{folder}" in text, folder


def test_keyshift_commands_in_the_compose_file_parse_with_the_real_cli(compose: dict) -> None:
    from keyshift.cli import build_parser

    found = 0
    for name, service in compose["services"].items():
        cmd = service.get("command")
        if isinstance(cmd, list) and cmd and cmd[0] == "keyshift":
            args = build_parser(cmd[1]).parse_args(cmd[1:])
            assert callable(args.func), name
            found += 1
    assert found >= 1


def test_the_stream_service_runs_the_balancer_with_valid_arguments(compose: dict) -> None:
    """The deployed speed layer is ``keyshift run`` (the balancer), not ingestion only, and
    its arguments are ones the command accepts."""
    import argparse
    import re

    from keyshift.streaming.commands.run import add_arguments, options_from

    cmd = compose["services"]["keyshift-stream"]["command"]
    assert cmd[:2] == ["keyshift", "run"]
    args = [re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", a) for a in cmd[2:]]  # compose defaults
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    ns = parser.parse_args(args)
    env = _keyshift_env(compose["services"]["keyshift-stream"], {"SPARK_MASTER_HOST": "x"})
    opts = options_from(ns, load_config(env=env))
    assert opts.run_id == "prod" and opts.policy == "dlb-h" and opts.app == "wordcount"


# -- Kafka: two listeners, data that survives a restart ---------------------------------------

def _listeners(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` → {NAME: (host, port)} (an empty host: all interfaces)."""
    out = {}
    for item in value.split(","):
        name, _, addr = item.partition("://")
        host, _, port = addr.rpartition(":")
        out[name] = (host, int(port))
    return out


def test_kafka_has_an_internal_and_a_host_listener(compose: dict) -> None:
    kafka = compose["services"]["kafka"]
    env = {k: _interpolate(v, {}) for k, v in kafka["environment"].items()}
    listening = _listeners(env["KAFKA_LISTENERS"])
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listening) == set(protocols) == {"INTERNAL", "HOST", "CONTROLLER"}
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == "CONTROLLER"
    assert set(advertised) == {"INTERNAL", "HOST"}  # the controller is not for clients
    # containers reach the internal listener at the address their config names
    stream = load_config(env=_keyshift_env(compose["services"]["keyshift-stream"],
                                           {"SPARK_MASTER_HOST": "x"}))
    assert advertised["INTERNAL"] == (stream.kafka.host, stream.kafka.port)
    assert listening["INTERNAL"][1] == stream.kafka.port
    # the host listener is published on the same port it advertises, for localhost clients
    assert advertised["HOST"] == ("localhost", 29092)
    published = {_interpolate(p, {}) for p in kafka["ports"]}
    assert f"{advertised['HOST'][1]}:{listening['HOST'][1]}" in published


def test_kafka_keeps_its_log_dirs_and_cluster_id(compose: dict) -> None:
    import base64

    kafka = compose["services"]["kafka"]
    env = {k: _interpolate(v, {}) for k, v in kafka["environment"].items()}
    mounts = dict(v.split(":")[:2][::-1] for v in kafka["volumes"])  # target → source
    assert mounts[env["KAFKA_LOG_DIRS"]] in compose["volumes"]  # a named volume
    cluster_id = env["CLUSTER_ID"]
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16  # a KRaft cluster id
    example = dict(line.split("=", 1) for line in (DOCKER / ".env.example").read_text()
                   .splitlines() if line and not line.startswith("#"))
    assert example["KAFKA_CLUSTER_ID"] == cluster_id


def test_long_running_services_have_healthchecks(compose: dict) -> None:
    for name, service in compose["services"].items():
        if name in ("airflow-init", "kafka-init"):  # run once and exit
            continue
        check = service.get("healthcheck", {}).get("test")
        assert check and check[0] in ("CMD", "CMD-SHELL"), name
    worker = _compose("docker-compose.worker.yml")["services"]["spark-worker"]
    assert worker["healthcheck"]["test"][0] == "CMD"
    # the job starts once what it needs is healthy, not merely started
    needs = compose["services"]["keyshift-stream"]["depends_on"]
    assert {k: v["condition"] for k, v in needs.items()} == {
        "kafka-init": "service_completed_successfully", "spark-master": "service_healthy",
        "mlflow": "service_healthy"}
    assert compose["services"]["kafka-init"]["depends_on"] == {
        "kafka": {"condition": "service_healthy"}}


# -- live metrics: the stream serves them, Prometheus scrapes them, Grafana shows them --------

def _stream_metrics(compose: dict):
    env = _keyshift_env(compose["services"]["keyshift-stream"], {"SPARK_MASTER_HOST": "x"})
    return load_config(env=env).metrics


def test_prometheus_scrapes_the_stream_services_metrics_port(compose: dict) -> None:
    metrics = _stream_metrics(compose)
    assert metrics.port != 0 and metrics.host == "0.0.0.0"  # reachable from other containers
    prom = compose["services"]["prometheus"]
    mounts = dict(v.split(":")[:2][::-1] for v in prom["volumes"])
    conf_file = DOCKER / mounts["/etc/prometheus/prometheus.yml"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    conf = yaml.safe_load(conf_file.read_text())
    targets = [t for job in conf["scrape_configs"] for sc in job["static_configs"]
               for t in sc["targets"]]
    assert targets == [f"keyshift-stream:{metrics.port}"]
    stream = compose["services"]["keyshift-stream"]
    assert f"http://localhost:{metrics.port}/metrics" in stream["healthcheck"]["test"]
    assert f"{metrics.port}:{metrics.port}" in stream["ports"]


def _grafana_mounts(compose: dict) -> dict[str, Path]:
    vols = compose["services"]["grafana"]["volumes"]
    return {target: DOCKER / source for source, target, *_ in (v.split(":") for v in vols)
            if source.startswith("./")}


def _dashboard(compose: dict) -> dict:
    import json

    mounts = _grafana_mounts(compose)
    provider = yaml.safe_load(
        (mounts["/etc/grafana/provisioning"] / "dashboards" / "keyshift.yml").read_text())
    folder = provider["providers"][0]["options"]["path"]
    files = sorted(mounts[folder].glob("*.json"))
    assert [f.name for f in files] == ["keyshift.json"]
    return json.loads(files[0].read_text())


def _exprs(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of the dashboard, the run variable's included."""
    out = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]
    out += [("variable " + v["name"], v["definition"]) for v in dashboard["templating"]["list"]]
    return out


def test_grafana_dashboard_shows_only_metrics_the_exporter_defines(compose: dict) -> None:
    from keyshift.streaming.live_metrics import METRICS, series_names

    dashboard = _dashboard(compose)
    datasource = yaml.safe_load((_grafana_mounts(compose)["/etc/grafana/provisioning"]
                                 / "datasources" / "prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    known, used = series_names(), set()
    for title, expr in _exprs(dashboard):
        names = set(re.findall(r"\bkeyshift_\w+", expr))
        assert names, f"{title}: the query names no keyshift metric: {expr}"
        assert names <= known, f"{title}: {sorted(names - known)} not defined by the exporter"
        used |= names
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == uid, panel["title"]
    # every metric the exporter defines has a panel
    unused = [m for m in METRICS if not any(m in u or u.startswith(m) for u in used)]
    assert not unused, f"metrics without a panel: {unused}"


def test_grafana_dashboard_queries_are_valid_promql(compose: dict, tmp_path: Path) -> None:
    """promtool (Debian's prometheus package) parses every query as a recording rule."""
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    # (the run variable's label_values() is Grafana's, not PromQL: panels only)
    rules = [{"record": f"keyshift:check_{i}", "expr": expr.replace("$run_id", ".*")}
             for i, (title, expr) in enumerate(_exprs(_dashboard(compose)))
             if not title.startswith("variable ")]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], check=False,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_dashboard_query_naming_an_unknown_metric_would_be_caught() -> None:
    """The name check above can fail: a misspelt series is not among the exporter's."""
    from keyshift.streaming.live_metrics import series_names

    assert "keyshift_event_total" not in series_names()
    assert "keyshift_events_total" in series_names()


def test_dockerfile_installs_cpu_only_torch_at_the_pinned_version() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    assert "--index-url https://download.pytorch.org/whl/cpu" in text
    version = re.search(r"ARG TORCH_VERSION=(\S+)", text).group(1)
    pins = (DOCKER.parent / "constraints.txt").read_text()
    assert f"\ntorch=={version}\n" in pins, "TORCH_VERSION differs from constraints.txt"
    assert re.search(r"psycopg2-binary==\d+\.\d+\.\d+", text), "pin the Postgres driver"


# -- issue 28 point 2: a stack that runs as written ------------------------------------------

def _command(service: dict, env: dict[str, str] | None = None) -> list[str]:
    return [_interpolate(a, env or {}) for a in service["command"]]


def test_mlflow_allows_the_host_header_the_other_containers_send(compose: dict) -> None:
    """MLflow 3 answers 403 to a Host it does not allow (default: localhost, private IPs);
    the containers ask for ``mlflow:5000`` (their tracking URI), other hosts for
    ``MLFLOW_HOST:5000``. Checked with MLflow's own matcher."""
    from urllib.parse import urlparse

    from mlflow.server.security_utils import is_allowed_host_header

    for env in ({}, {"MLFLOW_HOST": "ml.example.net"}):
        cmd = _command(compose["services"]["mlflow"], env)
        allowed = cmd[cmd.index("--allowed-hosts") + 1].split(",")
        uri = load_config(env=_keyshift_env(compose["services"]["keyshift-stream"],
                                            env)).mlflow_tracking_uri
        assert is_allowed_host_header(allowed, urlparse(uri).netloc), (uri, allowed)
        assert is_allowed_host_header(allowed, "localhost:5000")
        assert not is_allowed_host_header(allowed, "attacker.example:5000")
        assert "--cors-allowed-origins" in cmd
    # one more name, as .env.example says: a leading comma
    cmd = _command(compose["services"]["mlflow"], {"MLFLOW_ALLOWED_HOSTS": ",ui.example:5000"})
    assert is_allowed_host_header(cmd[cmd.index("--allowed-hosts") + 1].split(","),
                                  "ui.example:5000")


def test_mlflow_serves_the_artifacts_every_host_reads(compose: dict) -> None:
    cmd = compose["services"]["mlflow"]["command"]
    assert "--serve-artifacts" in cmd and "--artifacts-destination" in cmd
    assert "--default-artifact-root" not in cmd  # the server's own: mlflow-artifacts:/
    for name, service in compose["services"].items():  # keyshift lets the server choose
        assert "KEYSHIFT_MLFLOW__ARTIFACT_ROOT" not in (service.get("environment") or {}), name


def _cores_max(service: dict, env: dict[str, str] | None = None) -> int:
    return load_config(env=_keyshift_env(service, env)).spark.cores_max


def test_the_stream_job_and_airflow_tasks_fit_on_the_workers_together(compose: dict) -> None:
    """Without spark.cores.max the stream job takes every core of the standalone cluster and
    each Airflow task's job waits 120 s for an executor, then fails. The stream's cap plus
    two tasks' (the retrain's asset starts the baselines; maintenance may overlap) fit in
    the workers' cores, with the defaults and with .env.example's values."""
    services = compose["services"]
    example = dict(line.split("=", 1) for line in (DOCKER / ".env.example").read_text()
                   .splitlines() if line and not line.startswith("#"))
    for env in ({}, example):
        workers = [s for n, s in services.items() if n.startswith("spark-worker")]
        total = sum(int(_interpolate(w["environment"]["SPARK_WORKER_CORES"], env))
                    for w in workers)
        stream = _cores_max(services["keyshift-stream"], env)
        task = _cores_max(services["airflow-scheduler"], env)  # LocalExecutor: tasks run here
        assert stream > 0 and task > 0, "spark.cores.max unset: the first job takes all"
        assert stream + 2 * task <= total, (stream, task, total)
        executor = load_config(env=_keyshift_env(services["keyshift-stream"], env)).spark
        assert task % executor.executor_cores == 0 and stream % executor.executor_cores == 0
    for name in ("airflow-apiserver", "airflow-dag-processor", "airflow-init"):
        assert _cores_max(services[name]) == _cores_max(services["airflow-scheduler"]), name


def test_a_topic_init_creates_the_streams_topic_before_the_stream_starts(compose: dict) -> None:
    from keyshift.cli import build_parser

    init = compose["services"]["kafka-init"]
    cmd = init["command"]
    args = build_parser(cmd[1]).parse_args(cmd[1:])
    assert (args.action, args.topic_action) == ("topic", "create")
    cfg = load_config(env=_keyshift_env(init))
    stream = compose["services"]["keyshift-stream"]["command"]
    topic = stream[stream.index("--topic") + 1]
    assert (args.name or cfg.kafka.topic) == topic
    assert args.partitions is None and cfg.kafka.partitions == 8  # kafka.partitions
    assert init["restart"] == "no"


def test_the_stream_service_runs_the_engine_scaler(compose: dict) -> None:
    cmd = compose["services"]["keyshift-stream"]["command"]
    assert "--planner" in cmd


def test_the_image_installs_no_dev_extras() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    extras = re.search(r'"\.\[([\w,]+)\]"', text).group(1).split(",")
    assert "dev" not in extras and "all" not in extras, extras
    assert {"spark", "models", "airflow"} <= set(extras)
