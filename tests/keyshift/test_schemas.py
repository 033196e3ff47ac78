from keyshift.apps import EVENTS, event_schema
from keyshift.schemas import TABLES, table

DESIGN_TABLES = {
    "events_out", "metrics", "key_loads", "plans", "state_snapshots", "migrations", "dead_letter",
}


def test_every_design_table_is_defined():
    assert DESIGN_TABLES <= set(TABLES)


def test_events_share_the_envelope():
    for app, schema in EVENTS.items():
        assert schema.names[:3] == ["id", "key", "ts"], app
        assert {"id", "key", "ts"} <= set(schema.required)


def test_ddl_is_well_formed():
    ddl = table("plans").ddl()
    assert "`assignment` ARRAY<INT> NOT NULL" in ddl
    assert event_schema("fsd").ddl().startswith("`id` STRING NOT NULL")


def test_unknown_names_are_clear():
    import pytest

    with pytest.raises(KeyError, match="unknown table"):
        table("nope")
    with pytest.raises(KeyError, match="unknown application"):
        event_schema("nope")


def test_statistics_columns_are_the_tables_own():
    import pytest

    from keyshift.schemas import TableSchema, _c

    assert table("events_out").stats_columns == ("run_id", "batch_id")
    with pytest.raises(ValueError, match=r"t: stats_columns \['nope'\] are not its columns"):
        TableSchema("t", 1, (_c("a", "INT"),), stats_columns=("a", "nope"))
