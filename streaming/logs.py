"""Quiet Spark by default: a person running ``keyshift run`` should read one line per batch,
not Spark's WARN lines (native-hadoop, Kafka consumer configs, Delta checkpoints, ...).

The driver JVM reads its log4j2 configuration once, at start, so the level goes in before
the session exists: ``SPARK_SUBMIT_OPTS`` reaches the JVM that PySpark launches (in client
mode the driver *is* that JVM) without touching any Spark setting a user may have set.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

LEVELS = ("ERROR", "WARN", "INFO")

_LOG4J2 = """\
# written by keyshift (streaming/logs.py): Spark's driver log level for keyshift commands
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n%ex
# the Kafka clients and Delta are the chattiest at WARN; keep their errors
logger.kafka.name = org.apache.kafka
logger.kafka.level = {kafka}
logger.netty.name = io.netty
logger.netty.level = ERROR
# PySpark counts as Spark's interpreter: the class that first initializes logging lends its
# logger's level to the console (WARN unless configured) and says so on stderr; give the
# candidates ours
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level}
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = {level}
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
logger.context.name = org.apache.spark.SparkContext
logger.context.level = {level}
"""


def level_for(verbosity: int) -> str:
    """``-v`` count → log4j level: 0 ERROR, 1 WARN, 2+ INFO."""
    return LEVELS[min(max(verbosity, 0), len(LEVELS) - 1)]


def configure_spark_logging(folder: Path, verbosity: int = 0) -> Path:
    """Write the log4j2 file for this verbosity and point the next driver JVM at it; also
    quiets the Python side (py4j's connection chatter, pandas/pyarrow warnings)."""
    level = level_for(verbosity)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"log4j2-{level.lower()}.properties"
    path.write_text(_LOG4J2.format(level=level, kafka="ERROR" if level != "INFO" else "WARN"))
    opt = f"-Dlog4j2.configurationFile=file:{path}"
    current = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "log4j2.configurationFile" not in current:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{current} {opt}".strip()
    if verbosity == 0:
        logging.getLogger("py4j").setLevel(logging.ERROR)
        logging.getLogger("kafka").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", module="pyspark")
    return path


def set_session_level(spark, verbosity: int) -> None:
    """The same level on a session that already exists (e.g. started by another command)."""
    spark.sparkContext.setLogLevel(level_for(verbosity))
