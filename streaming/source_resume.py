"""Whether a resumed run may read its topic on from where it stopped (issue 46 item 3).

Spark's checkpoint knows only offsets, so a topic deleted and created again looked like
records deleted by retention, and Spark's ``failOnDataLoss=false`` then skipped the new
topic's records up to the old offsets, saying so only in spark.log. Before its query starts,
a resumed run compares its topic's id (new at each creation, recorded per run) and the
checkpoint's offsets with the log (:func:`resume_source`). Apart from the broker watch
(``broker_watch.py``), which ``broker.py`` itself uses: this module asks the broker for
offsets through ``broker.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from keyshift.cli import UsageError
from keyshift.lakehouse.logs import say as say_line

if TYPE_CHECKING:
    from keyshift.config import Config

    from .kafka_client import TopicOffsets

log = logging.getLogger(__name__)


class TopicRecreated(UsageError):
    """A run's topic was deleted and created again since the run last read it: its offsets
    belong to the old topic, so the run cannot resume on the new one (exit status 2)."""


@dataclass(frozen=True)
class ResumeCheck:
    """What a resumed run finds in its topic: ``fine``; ``recreated`` (``why`` is the
    evidence); or ``truncated``, where ``skipped`` holds, per partition, the offsets
    ``[first, end)`` Kafka deleted before the run read them."""

    kind: str
    why: str = ""
    skipped: dict[int, tuple[int, int]] = field(default_factory=dict)


def classify_resume(read: Mapping[int, int], seen: Mapping[int, int], now: TopicOffsets,
                    recorded_id: str | None) -> ResumeCheck:
    """Tell a recreated topic from deleted records. ``read``: per partition, the offset the
    run goes on from; ``seen``: the highest offset it knew to exist (its last planned
    batch's end); ``recorded_id``: the topic id the run recorded, if any.

    Recreated: another topic id, a partition the run read that is gone (partitions are
    never removed), or an end offset below one the run had seen (a log never shrinks; a
    new topic starts again at 0). Truncated: the log starts past where the run goes on
    (retention, or a delete of records)."""
    if recorded_id and now.topic_id and recorded_id != now.topic_id:
        return ResumeCheck("recreated", f"its topic id is {now.topic_id}, the run read "
                           f"{recorded_id}")
    gone = sorted(p for p in seen if p not in now.latest)
    if gone:
        return ResumeCheck("recreated", f"it has {len(now.latest)} partition(s), the run "
                           f"read partition {gone[0]}")
    back = sorted(p for p in seen if now.latest[p] < seen[p])
    if back:
        p = back[0]
        return ResumeCheck("recreated", f"partition {p} ends at offset {now.latest[p]}, "
                           f"below offset {seen[p]} the run had reached")
    skipped = {p: (read[p], now.earliest[p]) for p in sorted(read)
               if p in now.earliest and now.earliest[p] > read[p]}
    return ResumeCheck("truncated", skipped=skipped) if skipped else ResumeCheck("fine")


def _offsets_line(body: bytes, topic: str) -> dict[int, int] | None:
    """The topic's per-partition offsets in one of Spark's offset-log files (a version line,
    then JSON lines, one of them the Kafka source's ``{"topic": {"0": 12, ...}}``)."""
    for line in body.decode("utf-8", "replace").replace("\0", "").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and isinstance(item.get(topic), dict):
            return {int(p): int(o) for p, o in item[topic].items()}
    return None


def checkpoint_offsets(checkpoint: str, topic: str
                       ) -> tuple[dict[int, int], dict[int, int]] | None:
    """``(read, seen)`` of a query's checkpoint for ``topic`` (:func:`classify_resume`),
    or None when it has read nothing of it yet. ``read``: the last committed batch's end
    offsets (else the offsets the query started from); ``seen``: the end offsets of the
    last batch it planned, which it replays when that batch was not committed."""
    from pyarrow.fs import FileSelector, FileType

    from keyshift.lakehouse.storage import filesystem, read_if_exists

    fs, root = filesystem(checkpoint)

    def batches(folder: str) -> list[int]:
        if fs.get_file_info(f"{root}/{folder}").type != FileType.Directory:
            return []
        return sorted(int(f.base_name) for f in fs.get_file_info(
            FileSelector(f"{root}/{folder}")) if f.base_name.isdigit())

    def offsets(name: str) -> dict[int, int] | None:
        body = read_if_exists(f"{checkpoint}/{name}")
        return None if body is None else _offsets_line(body, topic)

    planned, committed = batches("offsets"), batches("commits")
    read = offsets(f"offsets/{committed[-1]}") if committed else offsets("sources/0/0")
    last = offsets(f"offsets/{planned[-1]}") if planned else None
    if read is None and last is None:
        return None
    read = read or {}
    seen = {p: max(o, read.get(p, 0)) for p, o in (last or {}).items()}
    return read, {**read, **seen}


def resume_source(cfg: Config, run_id: str, topic: str, checkpoint: str, run_uri: str,
                  say: Callable[[str], None] = say_line) -> dict[str, int]:
    """Check, before the query starts, that ``topic`` still holds what run ``run_id`` had
    not read, and record the topic's id for the next start. A recreated topic refuses the
    resume (:class:`TopicRecreated`, whatever ``kafka.fail_on_data_loss`` says: no setting
    makes a resume on it lose nothing). Records deleted unread go on to Spark, which stops
    the run (``keyshift run`` exit 3) unless ``kafka.fail_on_data_loss = false``: then they
    are skipped, and a warning line says how many per partition. Returns those skipped
    offsets per partition (for the run's summary); {} when none were."""
    from keyshift.lakehouse.storage import write_atomically

    check, topic_id, recorded = source_check(cfg, topic, checkpoint, run_uri)
    if check.kind == "recreated":
        raise TopicRecreated(recreated_line(topic, run_id, check))
    if topic_id and recorded.get(topic) != topic_id:
        write_atomically(f"{run_uri}/{SOURCE_FILE}", json.dumps(
            {"topic_ids": {**recorded, topic: topic_id}}).encode())
    if check.kind != "truncated" or cfg.kafka.fail_on_data_loss:
        return {}
    skipped = {str(p): end - first for p, (first, end) in check.skipped.items()}
    line = (f"keyshift: WARNING: skipping {sum(skipped.values()):,} records of topic {topic} "
            f"that Kafka deleted (retention, or a delete) before run {run_id} read them, as "
            "kafka.fail_on_data_loss = false allows: " + "; ".join(
                f"partition {p} offsets {first}-{end - 1} ({end - first:,})"
                for p, (first, end) in check.skipped.items())
            + " (skipped_offsets in the run's summary)")
    say(line)
    return skipped


#: the run's file (beside its staged rows) with the ids of the topics it read
SOURCE_FILE = "source.json"


def source_check(cfg: Config, topic: str, checkpoint: str, run_uri: str
                 ) -> tuple[ResumeCheck, str | None, dict[str, str]]:
    """The run's topic against its checkpoint and recorded topic ids (:func:`classify_resume`),
    the topic's id now, and the ids recorded. A missing topic is ``fine``: Spark waits for
    it, and there is nothing to compare."""
    from keyshift.lakehouse.storage import read_if_exists

    from .kafka_client import client_options, topic_offsets

    recorded = json.loads(read_if_exists(f"{run_uri}/{SOURCE_FILE}") or b"{}").get(
        "topic_ids", {})
    now = topic_offsets(cfg.kafka.bootstrap, topic, security=client_options(cfg.kafka))
    if now is None:
        return ResumeCheck("fine"), None, recorded
    read, seen = checkpoint_offsets(checkpoint, topic) or ({}, {})
    return classify_resume(read, seen, now, recorded.get(topic)), now.topic_id, recorded


def recreated_line(topic: str, run_id: str, check: ResumeCheck) -> str:
    """Why a run cannot go on on its recreated topic, and the one way on that loses nothing."""
    return (f"topic {topic} was deleted and created again since run {run_id} last read it "
            f"({check.why}): the run's offsets belong to the old topic, and resuming from "
            f"them would skip the new topic's records. Start a new run (another --run-id) "
            f"to read the new topic from its earliest offset; run {run_id}'s rows stay in "
            "the warehouse")


def topic_recreated(cfg: Config, run_id: str, topic: str, checkpoint: str,
                    run_uri: str) -> str | None:
    """:func:`recreated_line` when the run's topic was recreated, else None (also when the
    broker does not answer). Asked when Spark stopped a running query for lost records, so
    that the advice to accept the loss is never given for a recreated topic, where taking
    it would skip the new topic's records."""
    from .kafka_client import BrokerError

    try:
        check = source_check(cfg, topic, checkpoint, run_uri)[0]
    except (BrokerError, OSError, ValueError) as exc:
        log.warning("could not tell whether topic %s was recreated: %s", topic, exc)
        return None
    return recreated_line(topic, run_id, check) if check.kind == "recreated" else None
