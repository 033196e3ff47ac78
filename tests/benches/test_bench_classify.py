"""bench/bench_classify.py's one-parse alternative reads what the job's classifier reads: the
bench reports its speed beside the classifier's, which means nothing if it decides otherwise
(a JSON string where a number is declared, a missing field, an object as a STRING field)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytestmark = pytest.mark.integration


def test_one_parse_refuses_and_reads_as_the_classifier_does(spark):
    import bench.bench_classify as bench
    from keyshift.streaming.ingest import Classifier

    values = [b'{"id":"a","key":"k","ts":1,"word":"w"}',
              b'{"id":"b","key":"k","ts":"1","word":"w"}',  # a string where BIGINT is declared
              b'{"id":"c","key":"k","ts":1.5,"word":"w"}',
              b'{"id":"d","key":"k","ts":1}',  # word missing
              b'{"id":7,"key":"k","ts":2,"word":"w"}',  # a number as a STRING: its text
              b'{"id":"e","key":"k","ts":2,"word":null}',
              b'{"id":"f","key":"k","ts":2,"word":"w"} x']
    now = datetime.now(UTC)
    raw = spark.createDataFrame([("t", 0, i, now, v) for i, v in enumerate(values)],
                                "topic STRING, partition INT, offset BIGINT, "
                                "timestamp TIMESTAMP, value BINARY")
    classifier = Classifier(bench.APP)

    def decided(frame):  # a rejected record's values are never read: its reason is
        return sorted((r["offset"], r["reason"]) if r["reason"] else
                      (r["offset"], "", *[str(v) for v in r]) for r in frame.collect())

    want = decided(classifier(raw))
    assert decided(bench.one_parse(classifier)(raw)) == want
    assert [len(r) > 2 for r in want] == [True, False, False, False, True, False, False]
