"""The one configuration loader: the models' defaults, an optional user TOML file, then
environment overrides ``KEYSHIFT_<SECTION>__<KEY>``, validated by pydantic.

The models below are the one declaration of every key (default, bounds, description):
keyshift/defaults.toml and docs/config.md are rendered from them by
keyshift.commands.config_reference, and a test fails when either drifts.

A wrong value stops the program at start with a message naming the key and the allowed
range (``ConfigError``), never later with a stack trace from deep inside Spark.

The environment layer is a few lines of its own, not pydantic-settings: that library skips
a variable whose section matches no field (``KEYSHIFT_SPARKK__MASTER`` would be ignored, not
refused by name), reads ``os.environ`` only (tests pass ``env``), and would need custom
sources to put the TOML files under the environment in the order above.
"""

from __future__ import annotations

import os
import re
import tomllib
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from keyshift.errors import ConfigError
from keyshift.workload_names import check_workload as _check_workload
from keyshift.workload_names import workload_of as _workload_of

ENV_PREFIX = "KEYSHIFT_"
CONFIG_ENV = "KEYSHIFT_CONFIG"
PROJECT_FILE = "keyshift.toml"
"""A keyshift project's file: it marks the project's root (whose runtime home is
``<root>/.keyshift``) and, when no --config / $KEYSHIFT_CONFIG is given, is its config."""


def project_root(start: Path | None = None) -> Path | None:
    """The nearest folder, from ``start`` (the current directory) up, holding a
    ``keyshift.toml``; None outside any project."""
    here = Path.cwd() if start is None else Path(start)
    here = here.absolute()
    for folder in (here, *here.parents):
        if (folder / PROJECT_FILE).is_file():
            return folder
    return None


def data_home(env: dict[str, str] | None = None) -> Path:
    """The home outside any project: ``$XDG_DATA_HOME/keyshift``, else
    ``~/.local/share/keyshift`` (a relative XDG_DATA_HOME is ignored, as the spec says)."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_DATA_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "keyshift"
    user = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return user / ".local" / "share" / "keyshift"


def resolve_home(home: str, base: Path | None = None, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> Path:
    """The one place the runtime home is decided; always absolute.

    ``home`` set (by $KEYSHIFT_HOME, an argument or a config file): ``~`` expanded, a
    relative path taken from ``base`` (the folder of the config file that set it; the current
    directory for the environment and arguments). ``home`` empty (the default): the project
    root's ``.keyshift`` (a ``keyshift.toml`` found from the current directory up), else
    :func:`data_home`."""
    cwd = Path.cwd() if cwd is None else Path(cwd)
    if home:
        path = Path(home).expanduser()
        if not path.is_absolute():
            path = (base or cwd) / path
    else:
        root = project_root(cwd)
        path = root / ".keyshift" if root is not None else data_home(env)
    return Path(os.path.abspath(path))


class _Section(BaseModel):
    """A section's fields are the one declaration of its keys (default, bounds and a one-line
    description); keyshift.commands.config_reference renders defaults.toml and
    docs/config.md from them, and a test fails when those drift."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class GroupsConfig(_Section):
    """Key groups: the unit of assignment and migration between engines."""

    count: int = Field(4096, ge=1, le=1 << 22,
                       description="p: key groups (the unit of assignment and migration)")


class KafkaConfig(_Section):
    """The input topic, the local development broker, and the client side's security (the
    Spark source, the producer and the admin client; docs/kafka.md "Kafka security").
    port and controller_port differ; a SASL protocol needs sasl_username and sasl_password;
    ssl_certfile and ssl_keyfile go together."""

    version: str = Field("4.1.1", description="Apache Kafka broker fetched from Maven Central")
    host: str = Field("127.0.0.1", description="the broker's host")
    port: int = Field(9092, ge=1, le=65535, description="the broker's client port")
    controller_port: int = Field(9093, ge=1, le=65535,
                                 description="the local broker's KRaft controller port")
    topic: str = Field("keyshift-events", min_length=1, pattern=r"^[A-Za-z0-9._-]+$",
                       description="the input topic the job reads")
    partitions: int = Field(4, ge=1, le=1024,
                            description="partitions of a topic keyshift creates")
    startup_timeout_s: float = Field(60.0, gt=0, le=600,
                                     description="seconds the local broker has to become healthy")
    fail_on_data_loss: bool = Field(
        True, description="records Kafka deleted before the job read them stop it (false: "
        "skip them, as Spark's failOnDataLoss=false)")
    # the security keys reach the clients by keyshift.streaming.kafka_client.client_options and
    # spark_options
    security_protocol: Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL"] = Field(
        "PLAINTEXT", description="the client's security protocol")
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "PLAIN", description="the SASL mechanism, with a SASL_* protocol")
    sasl_username: str = Field("", description="the SASL user")
    # a SecretStr: printed as ********** by `keyshift config` and in any repr
    sasl_password: SecretStr = Field(
        SecretStr(""), description="the SASL password; better from the environment: "
        "KEYSHIFT_KAFKA__SASL_PASSWORD")
    ssl_cafile: str = Field(
        "", description="PEM CA bundle the broker's certificate is checked against "
        "(\"\" = system CAs)")
    ssl_certfile: str = Field(
        "", description="PEM client certificate (mutual TLS), with ssl_keyfile")
    ssl_keyfile: str = Field("", description="PEM (PKCS#8) private key of ssl_certfile")

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @model_validator(mode="after")
    def _ports_differ(self) -> KafkaConfig:
        if self.port == self.controller_port:
            raise ValueError("port and controller_port must differ")
        return self

    @model_validator(mode="after")
    def _security_complete(self) -> KafkaConfig:
        if self.security_protocol.startswith("SASL_"):
            for key in ("sasl_username", "sasl_password"):
                value = getattr(self, key)
                if not (value.get_secret_value() if isinstance(value, SecretStr) else value):
                    raise ValueError(f"kafka.{key} must be set when kafka.security_protocol "
                                     f"is {self.security_protocol}")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ValueError("kafka.ssl_certfile and kafka.ssl_keyfile go together "
                             "(a client certificate needs its key)")
        return self


class SparkConfig(_Section):
    """The Spark session. On a cluster (master spark://HOST:PORT, or any master that is not
    local[...]) the cores_max..dynamic_allocation keys say what one application may take
    and where the executors reach the driver, so a job does not grab a shared cluster
    (docs/platform.md)."""

    master: str = Field(
        "local[2]", description="Spark master: local[N], spark://HOST:PORT[,HOST:PORT...], ...")
    app_name: str = Field("keyshift", description="the Spark application's name")
    shuffle_partitions: int = Field(
        4, ge=1, le=10000,
        description="spark.sql.shuffle.partitions and spark.default.parallelism")
    driver_memory: str = Field("2g", pattern=r"^\d+[kmgt]?$",
                               description="the driver JVM's heap (spark.driver.memory)")
    # each a -X/-D option, none a shell word; the test suite passes -XX:TieredStopAtLevel=1
    driver_java_options: str = Field(
        "", description="more driver JVM options after keyshift's own, e.g. "
        "\"-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m\" for short runs")
    class_data_sharing: bool = Field(
        True, description="map the driver's class archive once built "
        "(python -m keyshift.lakehouse.class_sharing): ~4 s off each start")
    trigger_s: float = Field(2.0, gt=0, le=3600, description="micro-batch trigger interval")
    max_offsets_per_trigger: int = Field(
        20000, ge=1, description="most Kafka records per micro-batch (with admission on, the "
        "ceiling of the bound it sets)")
    admission: Literal["auto", "off"] = Field(
        "auto", description="auto: a batch reads what the engines can do in about a window, "
        "from the measured cost per event (keyshift.control.admission); off: always "
        "max_offsets_per_trigger")
    admission_initial: int = Field(
        1000, ge=1, description="records the first batch of a new run may read, before any "
        "cost is measured")
    admission_fill: float = Field(
        0.8, gt=0, le=1, description="share of a statistic window a batch may take")
    # delta-spark's PyPI patch releases can run ahead of its Maven jars (4.4.1 on PyPI, 4.4.0
    # on Central): the jar version is pinned here, same major.minor as the Python package.
    delta_version: str = Field("4.4.0", pattern=r"^\d+\.\d+\.\d+$",
                               description="Delta jar on Maven Central (PyPI patch may be ahead)")
    ui: bool = Field(False, description="Spark web UI")
    cores_max: int = Field(
        0, ge=0, le=100000,
        description="spark.cores.max, cores of the whole cluster this job may take; "
        "0 = unset (all)")
    executor_cores: int = Field(1, ge=1, le=1024, description="spark.executor.cores")
    executor_memory: str = Field("1g", pattern=r"^\d+[kmgt]?$",
                                 description="spark.executor.memory")
    driver_host: str = Field(
        "", pattern=r"^[A-Za-z0-9.:_\[\]-]*$",
        description="spark.driver.host, the address executors reach the driver at; "
        "\"\" = Spark's choice")
    driver_bind_address: str = Field("", pattern=r"^[A-Za-z0-9.:_\[\]-]*$",
                                     description="spark.driver.bindAddress; \"\" = driver_host")
    driver_port: int = Field(0, ge=0, le=65535,
                             description="spark.driver.port; 0 = a random free port")
    driver_block_manager_port: int = Field(
        0, ge=0, le=65535, description="spark.driver.blockManager.port; 0 = a random free port")
    pyspark_python: str = Field(
        "", description="spark.pyspark.python, the executors' Python; \"\" = the driver's "
        "interpreter (the venv's)")
    master_timeout_s: float = Field(
        10.0, gt=0, le=600,
        description="a spark:// master that does not accept a connection in this time is an error")
    executor_wait_s: float = Field(
        120.0, ge=0, le=3600, description="wait for the first executor at start (0 = do not wait)")
    master_ui: str = Field(
        "", pattern=r"^(https?://[A-Za-z0-9.:_\[\]-]+/?)?$",
        description="the master's web UI (standalone: http://HOST:8080), where the job checks "
        "the cores it holds; \"\" = the scheduler's count")
    dynamic_allocation: bool = Field(
        False, description="Spark's own dynamic allocation (shuffle tracking): executors follow "
        "the task backlog, not the plan; not with planner.resources = \"executors\"")
    dynamic_allocation_idle_s: float = Field(
        60.0, gt=0, le=86400, description="its executorIdleTimeout (Spark's default 60 s)")

    @field_validator("driver_java_options")
    @classmethod
    def _java_options(cls, options: str) -> str:
        for word in options.split():
            if not re.fullmatch(r"-[A-Za-z][^;&|`$<>()'\"\\]*", word):
                raise ValueError(f"{word!r}: each option must start with '-' (like "
                                 "-XX:TieredStopAtLevel=1), with no quote or shell character")
            if word.startswith("-Xmx"):
                raise ValueError(f"{word!r}: the heap cap is [spark] driver_memory (Spark "
                                 "refuses -Xmx among the driver's options)")
        return options.strip()

    @field_validator("master")
    @classmethod
    def _master_url(cls, master: str) -> str:
        if master.startswith("spark://"):
            for hostport in master[len("spark://"):].split(","):
                host, _, port = hostport.rpartition(":")
                if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                    raise ValueError(
                        "expected spark://HOST:PORT[,HOST:PORT...] with a port in 1..65535")
        return master


class WarehouseConfig(_Section):
    """The Delta warehouse: where the tables live, how long removed files are kept, and how
    a run's bookkeeping is committed and a storage outage ridden out."""

    root: str = Field("", description="the warehouse: a path or a URI (s3a://, hdfs://, "
                      "abfss://, file:); \"\" = <home>/warehouse")
    # Delta's own floor is 168 h: a shorter one can delete files a running reader or a
    # time-travel query (the table version a model was trained on) still needs, so it is
    # refused here (keyshift.jobs.table_maintenance).
    vacuum_retention_hours: float = Field(
        168.0, le=24 * 3650,
        description="VACUUM keeps removed files this long (>= 168, Delta's safe minimum)")
    # staged beside the warehouse (streaming/staging.py)
    commit_interval_s: float = Field(
        10.0, ge=0, le=3600,
        description="a run's key_loads/metrics/decisions rows wait staged at most this long "
        "before one commit per table (0 = with the next batch)")
    # the job says once that it waits and once that it resumed (streaming/storage_watch.py)
    outage_s: float = Field(
        300.0, ge=0, le=86400,
        description="a warehouse outage (no space, read-only, permission, unreachable) is "
        "waited out this long, then the job stops (0 = stop at once)")

    @field_validator("vacuum_retention_hours")
    @classmethod
    def _retention_floor(cls, hours: float) -> float:
        if hours < 168:
            raise ValueError("must be at least 168 (7 days, Delta's safe minimum: shorter "
                             "deletes files that readers and time travel still need)")
        return hours


class MlflowConfig(_Section):
    """The MLflow tracking store and the registered models the planner's forecasts come from."""

    tracking_uri: str = Field("", description="\"\" = sqlite:///<home>/mlflow.db")
    artifact_root: str = Field("", description="\"\" = <home>/mlartifacts")
    input_rate_model: str = Field("keyshift-input-rate",
                                  description="registered model of the input-rate forecaster")
    latency_model: str = Field("keyshift-latency",
                               description="registered model of the latency model")
    alias: str = Field("champion", description="the registry alias the job loads a model by")
    workload: str = Field(
        "", description="the workload whose champions a run follows and its metrics rows "
                        "train; \"\" = <operator>.<topic> of the run (docs/models.md)")

    @field_validator("workload")
    @classmethod
    def _workload(cls, value: str) -> str:
        return _check_workload(value) if value else value


class EnginesConfig(_Section):
    """The parallel instances of the stateful operator; min <= initial <= max."""

    initial: int = Field(4, ge=1, le=4096, description="N at start")
    min: int = Field(1, ge=1, le=4096, description="fewest engines the job scales to")
    max: int = Field(16, ge=1, le=4096,
                     description="most engines the job scales to")
    # the base prunes the changelog before the previous base (keyshift.streaming.engine_state)
    compact_every: int = Field(
        100, ge=0, le=1_000_000,
        description="batches between an engine's base files of its durable state (0 = never)")

    @model_validator(mode="after")
    def _ordered(self) -> EnginesConfig:
        if not self.min <= self.initial <= self.max:
            raise ValueError(
                f"need min <= initial <= max, got {self.min}, {self.initial}, {self.max}"
            )
        return self


class ControllerConfig(_Section):
    """The streaming job's application and its load-balancing policy; band_low <= band_high
    when band_high is set."""

    app: str = Field(
        "fsd", min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$",
        description="operator: fsd, traffic, clicks, wordcount, heavy, an entry point of "
        "keyshift.operators, or module:Class")
    # resolved (and refused with a reason) at start by keyshift.policies.registry
    policy: str = Field(
        "dlb-h", min_length=1,
        description="dlb-h, dlb-l, dlb-s, elb, or a fixed plan: kg, lptf, clb; or an entry "
        "point of keyshift.policies")
    window_s: float = Field(10.0, gt=0, le=86400, description="statistic window Δ")
    theta: float = Field(15.0, gt=0, le=1000, description="DLB threshold on imbScore (%)")
    band_low: float = Field(
        0.0, ge=0, description="ELB band [v, u] in events per engine per window; "
        "0 = derive from the mean (no scaling)")
    band_high: float = Field(0.0, ge=0, description="the ELB band's upper end u; 0 = derived")
    clb_period: int = Field(24, ge=1, description="CLB: every m windows")
    clb_theta: float = Field(0.0, ge=0, description="CLB: threshold θ on the groups' correlation")
    clb_subsets: int = Field(0, ge=0, description="CLB: subsets to split into; 0 = the engines")
    min_gain: float = Field(
        0.05, ge=0, lt=1, description="a rebalance must lower the most loaded engine's window "
        "load by this fraction (0 = off)")
    mode: Literal["act", "recommend"] = Field(
        "act", description="act: realize decisions; recommend: decide and record the reasons, "
        "realize nothing (no plan change, no migration)")

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, policy: str) -> str:
        from keyshift.policies.base import PolicyInputError
        from keyshift.policies.registry import JOB_KINDS, policy_info

        try:
            policy_info(policy, JOB_KINDS, "the streaming job")
        except PolicyInputError as exc:
            raise ValueError(str(exc).removeprefix("policy: ")) from None
        return policy

    @model_validator(mode="after")
    def _band(self) -> ControllerConfig:
        if self.band_high and self.band_low > self.band_high:
            raise ValueError("band_low must not exceed band_high")
        return self


class PlannerConfig(_Section):
    """The elastic planner: how many engines, ahead of time, from forecasts (the paper's
    path planner), with a burst reserve, guardrails, an overrule by measured demand and the
    executors the engines run on. reserve_source "forecast" needs reserve_quantile > 0."""

    enabled: bool = Field(
        False, description="run the planner: N picked ahead from the forecasts (false: no planner)")
    horizon: int = Field(10, ge=1, le=10000, description="H windows")
    mc: float = Field(1.0, ge=0, description="cost per missed tuple")
    ec: float = Field(1.0, ge=0, description="cost per engine-second")
    rc: float = Field(10.0, ge=0, description="cost per reconfiguration")
    # learned: keyshift.elastic.reconfiguration
    rc_source: Literal["fixed", "learned"] = Field(
        "fixed", description="fixed | learned: rc and controller.min_gain fitted on the run's "
        "measured migrations (pause x events/s x mc), the configured values as the prior")
    rc_prior_changes: float = Field(
        3.0, ge=0, description="learned: the configured rc weighs as this many measured "
        "changes of N")
    theta1: float = Field(
        0.0, ge=0, description="0 = off: reject a path when an arc's cost std exceeds it")
    theta2: float = Field(
        0.0, ge=0, description="0 = off: reject when the observed prediction error exceeds it")
    min_engines: int = Field(0, ge=0, description="0 = off (use engines.min)")
    max_engines: int = Field(0, ge=0, description="0 = off (use engines.max)")
    cooldown_windows: int = Field(
        0, ge=0, description="windows after a change of N before the next (0 = none)")
    max_step: int = Field(0, ge=0, description="most engines N changes by at once (0 = no bound)")
    dry_run: bool = Field(False, description="decide and record the scaling, apply none")
    objective: Literal["mean", "expected"] = Field(
        "mean", description="mean: Eq. 11 on forecast means (paper); expected: E[cost], "
        "keeps headroom")
    # keyshift.elastic.reserve
    reserve_quantile: float = Field(
        0.0, ge=0, le=1, description="0 = off; q in (0, 1]: capacity >= max(In_now, forecast) "
        "+ q-quantile of one-window rises (1 = largest seen)")
    reserve_history: int = Field(0, ge=0, description="rises the reserve remembers (0 = all)")
    reserve_source: Literal["rise", "forecast"] = Field(
        "rise", description="rise: the rises above; forecast: forecast sigma x q-quantile of "
        "the surprises seen (rises where no sigma)")
    # keyshift.streaming.scaling.JobForecaster; a store down at start is retried
    registry_check_windows: int = Field(
        10, ge=1, le=1_000_000,
        description="the running job checks the registry's champion alias every K windows")
    # Guardrails (keyshift.control.guard): an ineffective scale-out holds further scale-out
    # for the cool-off; a scale-in waits and takes the largest count asked for meanwhile.
    effectiveness: float = Field(
        0.1, ge=0, lt=1, description="a scale-out that achieved less than this fraction of its "
        "expected drop of the busiest engine's share (or rise of the read rate over a backlog) is "
        "ineffective (0 = no check)")
    effectiveness_windows: int = Field(
        2, ge=1, le=1000, description="windows after a scale-out it is judged on")
    ineffective_cooloff_windows: int = Field(
        6, ge=0, le=1_000_000,
        description="windows no scale-out is realized after an ineffective one")
    scale_down_delay_windows: int = Field(
        0, ge=0, le=1_000_000, description="a scale-in waits this many windows and takes the "
        "largest count asked meanwhile (0 = at once)")
    # keyshift.control.overrule: N rises to what arrivals and backlog need, or falls when
    # they need fewer and nothing is backlogged for as long; 0 = the paper's planner alone
    overrule_windows: int = Field(
        2, ge=0, le=1000, description="measured arrivals + backlog overrule the forecast "
        "after this many windows in a row (0 = off)")
    overrule_rise_windows: int = Field(
        1, ge=1, le=1000, description="windows in a row of measured shortfall before N "
        "rises (a fall waits overrule_windows)")
    target_utilisation: float = Field(
        0.8, gt=0, le=1, description="the engines' utilisation the overrule sizes N for")
    # keyshift.control.resources: executors = hold ceil(live engines / engines_per_executor)
    resources: Literal["auto", "executors", "fixed"] = Field(
        "auto", description="auto | executors | fixed: the job requests/releases executors "
        "for its engines (auto: on a cluster master, not under spark.dynamic_allocation)")
    engines_per_executor: int = Field(
        0, ge=0, le=1024, description="engines one executor runs (0 = spark.executor_cores)")
    executor_wait_s: float = Field(
        60.0, ge=0, le=3600,
        description="a scale-out waits this long for its executors to register")
    wait_for_executors: bool = Field(
        True, description="a scale-out's first batch waits for its executors (false: it runs "
        "at once on the cores held, and new executors take the engines waiting for a core)")

    @model_validator(mode="after")
    def _reserve_on(self) -> PlannerConfig:
        if self.reserve_source == "forecast" and self.reserve_quantile == 0:
            raise ValueError("reserve_source = 'forecast' needs reserve_quantile > 0 "
                             "(0 turns the reserve off), e.g. 0.9999")
        return self


class EventsConfig(_Section):
    """Scaling events on Kafka (keyshift.streaming.events): every decision of the control
    loop as one JSON record."""

    topic: str = Field(
        "", pattern=r"^[A-Za-z0-9._-]{0,249}$",
        description="Kafka topic of the control loop's decisions as JSON (docs/operations.md); "
        "\"\" = off")
    buffer: int = Field(
        1000, ge=1, le=1_000_000,
        description="records held while the broker is away; past it the oldest are dropped "
        "and counted")


class AirflowConfig(_Section):
    """`keyshift airflow` and the nightly DAGs. The three ports differ."""

    port: int = Field(8080, ge=1, le=65535, description="the Airflow UI's port")
    # Airflow's fixed defaults otherwise: a second Airflow on the host would collide
    worker_log_server_port: int = Field(
        8793, ge=1, le=65535,
        description="Airflow's log server of task logs (standalone: the scheduler's)")
    trigger_log_server_port: int = Field(8794, ge=1, le=65535,
                                         description="... of the triggerer's logs")
    # execution_timeout of each DAG's job task (dags/keyshift_dag_defaults.py): a hung Spark
    # job fails instead of blocking every later night (max_active_runs=1)
    retrain_timeout_min: int = Field(180, ge=1, le=24 * 60,
                                     description="execution_timeout of the nightly retrain task")
    baselines_timeout_min: int = Field(60, ge=1, le=24 * 60,
                                       description="... of the baseline partitions task")
    maintenance_timeout_min: int = Field(
        120, ge=1, le=24 * 60,
        description="... of the table maintenance task (OPTIMIZE + VACUUM)")

    @model_validator(mode="after")
    def _ports_differ(self) -> AirflowConfig:
        ports = {"port": self.port, "worker_log_server_port": self.worker_log_server_port,
                 "trigger_log_server_port": self.trigger_log_server_port}
        if len(set(ports.values())) < len(ports):
            raise ValueError(f"{', '.join(ports)} must differ, got "
                             f"{', '.join(str(v) for v in ports.values())}")
        return self


_CYCLE = r"(none|daily|weekly|daily\+weekly|[0-9]+(\.[0-9]+)?[smhd])"


class ModelsConfig(_Section):
    """What the nightly retrain fits the forecasters with (docs/models.md)."""

    cycle: str = Field(
        "auto",
        description="the seasonal cycle of the forecasters' profile: \"auto\" = the one "
                    "that forecasts held-out cycles best among the calendar's and the "
                    "periods the history repeats with; a name (none, daily, weekly, "
                    "daily+weekly) or a period (\"5m\", \"300s\", \"1h\"), several joined "
                    "by '|' to choose among")

    @field_validator("cycle")
    @classmethod
    def _cycle(cls, value: str) -> str:
        if value != "auto" and not all(re.fullmatch(_CYCLE, c) for c in value.split("|")):
            raise ValueError(f"{value!r}: 'auto', or none, daily, weekly, daily+weekly or a "
                             "period (a number and s, m, h or d: '5m', '300s', '1h'), several "
                             "joined by '|'")
        return value


class MetricsConfig(_Section):
    """The running job's Prometheus endpoint (keyshift.streaming.live_metrics)."""

    port: int = Field(9464, ge=0, le=65535,
                      description="the running job's Prometheus endpoint (/metrics); 0 = off")
    host: str = Field(
        "127.0.0.1", min_length=1, pattern=r"^[A-Za-z0-9.:_\[\]-]+$",
        description="address it listens on; \"0.0.0.0\" to be scraped from other hosts")


class Config(_Section):
    """The whole configuration. Paths derived from ``home`` are absolute."""

    model_config = ConfigDict(extra="forbid", frozen=True, ignored_types=(cached_property,))

    # after validation always an absolute path (resolve_home)
    home: str = Field(
        "", validate_default=True,
        description="runtime folder (caches, broker data, warehouse, runs); \"\" = found: "
        "$KEYSHIFT_HOME, else <project>/.keyshift of the nearest keyshift.toml from the "
        "current directory up, else $XDG_DATA_HOME/keyshift (~/.local/share/keyshift); "
        "a relative home set in a config file is relative to that file's folder")
    groups: GroupsConfig = GroupsConfig()
    kafka: KafkaConfig = KafkaConfig()
    spark: SparkConfig = SparkConfig()
    warehouse: WarehouseConfig = WarehouseConfig()
    mlflow: MlflowConfig = MlflowConfig()
    models: ModelsConfig = ModelsConfig()
    engines: EnginesConfig = EnginesConfig()
    controller: ControllerConfig = ControllerConfig()
    planner: PlannerConfig = PlannerConfig()
    events: EventsConfig = EventsConfig()
    airflow: AirflowConfig = AirflowConfig()
    metrics: MetricsConfig = MetricsConfig()

    @field_validator("home")
    @classmethod
    def _home(cls, home: str, info: ValidationInfo) -> str:
        ctx = info.context or {}
        return str(resolve_home(home, ctx.get("home_base"), env=ctx.get("env")))

    @property
    def home_path(self) -> Path:
        return Path(self.home).expanduser().resolve()

    @property
    def warehouse_uri(self) -> str:
        """The warehouse root as Spark and Delta get it: a URI with a scheme (``s3a://``,
        ``hdfs://``, ``abfss://``, ``file:``) verbatim, a plain path made absolute."""
        root = self.warehouse.root or str(self.home_path / "warehouse")
        if _has_scheme(root):
            return root.rstrip("/")
        return str(Path(root).expanduser().resolve())

    @property
    def warehouse_on_disk(self) -> bool:
        """Whether the warehouse is on this machine's file system (a path or ``file:``)."""
        return _on_disk(self.warehouse_uri)

    @property
    def warehouse_path(self) -> Path:
        """The warehouse as a local folder; only for a warehouse on this machine's disk."""
        uri = self.warehouse_uri  # resolved once: a plain root is made absolute on disk
        if not _on_disk(uri):
            raise ValueError(f"warehouse.root: {uri} is not on this machine's filesystem")
        if uri.startswith("file:"):
            return Path(uri[5:].lstrip("/") and "/" + uri[5:].lstrip("/"))
        return Path(uri)

    def checkpoint_uri(self, run_id: str) -> str:
        """Where a run's streaming query checkpoints: beside the tables, so that a driver
        restarted on another host finds it (a local home would not be shared)."""
        return f"{self.warehouse_uri}/_checkpoints/{run_id}"

    def runs_uri(self, run_id: str | None = None) -> str:
        """Where the jobs keep a run's files beside the tables (its ``started`` marker and
        staged bookkeeping rows): ``_runs/<run>``, or the folder of every run."""
        root = f"{self.warehouse_uri}/_runs"
        return f"{root}/{run_id}" if run_id else root

    def engine_state_uri(self, run_id: str) -> str:
        """The durable changelog of a run's engines (keyshift.streaming.engine_state)."""
        return f"{self.warehouse_uri}/_engine_state/{run_id}"

    @property
    def cache_path(self) -> Path:
        """Downloaded jars and broker distributions; shared across runs."""
        return Path(os.environ.get("KEYSHIFT_CACHE", self.home_path / "cache")).resolve()

    @property
    def mlflow_tracking_uri(self) -> str:
        return self.mlflow.tracking_uri or f"sqlite:///{self.home_path / 'mlflow.db'}"

    @property
    def mlflow_artifact_root(self) -> Path:
        return Path(self.mlflow.artifact_root or self.home_path / "mlartifacts").resolve()

    def run_dir(self, run_id: str) -> Path:
        """A run's local folder: its job description, batch timings, Spark log and report."""
        return self.home_path / "runs" / run_id

    def table_path(self, table: str) -> str:
        """A Delta table's location, a URI handed to Spark and Delta verbatim."""
        return f"{self.warehouse_uri}/{table}"


def _has_scheme(location: str) -> bool:
    """``s3a://b/w``, ``hdfs://nn/w``, ``file:/w``: a URI; ``/w`` or ``C:/w``: a path."""
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:(//|/)", location))


def _on_disk(uri: str) -> bool:
    """A warehouse URI on this machine's file system: ``file:`` or a plain path."""
    return uri.startswith("file:") or not _has_scheme(uri)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _env_overrides(env: dict[str, str]) -> dict[str, Any]:
    """KEYSHIFT_KAFKA__PORT=1 → {"kafka": {"port": "1"}}; pydantic converts the strings."""
    out: dict[str, Any] = {}
    for name, value in env.items():
        # not config keys: the config file, the jar cache, the real data sets' folder
        if not name.startswith(ENV_PREFIX) or name in (CONFIG_ENV, "KEYSHIFT_CACHE",
                                                         "KEYSHIFT_DATA"):
            continue
        path = name[len(ENV_PREFIX):].lower().split("__")
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


_SECRET_NAME = re.compile(
    r"pass|pwd|secret|token|credential|private|auth|cookie|session|signature|salt|jaas"
    r"|key(?!_?groups?)|cert|pem|pkcs|p12|jks")
"""Key names whose value may be a secret or key material: ``sasl_password``, a misspelled
``sasl_passwd``, ``api_token``, ``ssl_keyfile``... (``key`` alone too, except key groups)."""


def _secret_name(key: str) -> bool:
    return any(_SECRET_NAME.search(str(part).lower()) for part in key.split("."))


def _format(exc: ValidationError, source: str) -> str:
    """One line per wrong key, naming it and what is wrong. The value is echoed only for a
    known key whose name cannot be a secret: never for an unknown key (a misspelled
    ``sasl_passwd`` is as secret as the password) nor for a secret-looking name."""
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        unknown = err["type"] == "extra_forbidden"
        if unknown:
            msg = "unknown key"
        got = err.get("input")
        hide = unknown or isinstance(got, dict) or _secret_name(key)
        got_s = "" if hide else f" (got {got!r})"
        lines.append(f"config key {key}: {msg}{got_s}")
    return f"invalid configuration from {source}:\n  " + "\n  ".join(lines)


def load_config(
    path: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    **overrides: Any,
) -> Config:
    """Defaults ← file (``path``, $KEYSHIFT_CONFIG, else the project's ``keyshift.toml``
    found from the current directory up) ← environment ← ``overrides``.

    ``home`` is resolved here, once (:func:`resolve_home`): a relative ``home`` from a file
    is relative to that file's folder, from the environment or ``overrides`` to the current
    directory; unset, it is the project's ``.keyshift`` or the user's data directory."""
    env = dict(os.environ if env is None else env)
    data: dict[str, Any] = {}  # the models' own defaults (defaults.toml lists the same)
    sources = ["defaults"]
    home_base: Path | None = None  # the folder a relative home is taken from; None: cwd
    path = path or env.get(CONFIG_ENV)
    if not path:
        root = project_root()
        path = root / PROJECT_FILE if root is not None else None
    if path:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        try:
            from_file = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None
        data = _merge(data, from_file)
        if "home" in from_file:
            home_base = p.absolute().parent
        sources.append(str(p))
    env_over = _env_overrides(env)
    if env_over:
        data = _merge(data, env_over)
        sources.append("environment")
        if "home" in env_over:
            home_base = None
    if overrides:
        data = _merge(data, overrides)
        sources.append("arguments")
        if "home" in overrides:
            home_base = None
    try:
        return Config.model_validate(data, context={"home_base": home_base, "env": env})
    except ValidationError as exc:
        raise ConfigError(_format(exc, " + ".join(sources))) from None


def config_workload(cfg: Config) -> str:
    """The workload ``cfg`` stands for: ``mlflow.workload``, else its default operator and
    topic's (``controller.app``, ``kafka.topic``). A job sets ``mlflow.workload`` to its own
    at start (``keyshift.streaming.job``), so what it reads and writes is its run's."""
    return _workload_of(cfg.controller.app, cfg.kafka.topic, cfg.mlflow.workload)


def with_workload(cfg: Config, app: str, topic: str) -> Config:
    """``cfg`` with ``mlflow.workload`` resolved for a run of ``app`` on ``topic``."""
    name = _workload_of(app, topic, cfg.mlflow.workload)
    return cfg.model_copy(update={"mlflow": cfg.mlflow.model_copy(update={"workload": name})})
