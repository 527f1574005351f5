"""The database itself rejects any change to the log but INSERT.

PostgreSQL: row triggers reject UPDATE and DELETE, a statement trigger rejects TRUNCATE.
SQLite (the embedded default): row triggers reject UPDATE and DELETE (it has no TRUNCATE).
Only a schema change by the table's owner (dropping or disabling the triggers) lifts this.
"""

from django.db import migrations

POSTGRES_FORWARD = [
    """
    CREATE FUNCTION events_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'events_event is append-only: % rejected', TG_OP
            USING ERRCODE = 'restrict_violation';
    END
    $$
    """,
    """
    CREATE TRIGGER events_event_append_only BEFORE UPDATE OR DELETE ON events_event
    FOR EACH ROW EXECUTE FUNCTION events_reject_change()
    """,
    """
    CREATE TRIGGER events_event_no_truncate BEFORE TRUNCATE ON events_event
    FOR EACH STATEMENT EXECUTE FUNCTION events_reject_change()
    """,
]
POSTGRES_BACKWARD = [
    "DROP TRIGGER events_event_no_truncate ON events_event",
    "DROP TRIGGER events_event_append_only ON events_event",
    "DROP FUNCTION events_reject_change()",
]
SQLITE_FORWARD = [
    f"""
    CREATE TRIGGER events_event_no_{op.lower()} BEFORE {op} ON events_event
    BEGIN SELECT RAISE(ABORT, 'events_event is append-only: {op} rejected'); END
    """
    for op in ("UPDATE", "DELETE")
]
SQLITE_BACKWARD = [f"DROP TRIGGER events_event_no_{op}" for op in ("update", "delete")]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("events", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRES_FORWARD, "sqlite": SQLITE_FORWARD}),
            _run({"postgresql": POSTGRES_BACKWARD, "sqlite": SQLITE_BACKWARD}),
        ),
    ]
