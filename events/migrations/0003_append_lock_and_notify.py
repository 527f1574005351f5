"""PostgreSQL helpers of ``events.store.append``, kept in the database to save round trips.

- ``events_append_lock()``: the one append lock (a transaction-level advisory lock). Every
  writer takes it before drawing positions and holds it until commit, so positions become
  visible in order and a reader by position never skips an event.
- ``events_append(...)``: one append in one round trip: takes the lock, reads the stream's
  version (after the lock, so no concurrent append can move it), raises SQLSTATE ``NC409``
  with the actual version as DETAIL when the caller expected another, and inserts the batch
  (a JSON array of ``[type, schema_version, data]``) with consecutive versions.
- A statement trigger NOTIFYs ``neocloud_events`` after every INSERT into the log; the
  notification is delivered at commit, exactly when the events become visible.
"""

from django.db import migrations

POSTGRES_FORWARD = [
    """
    CREATE FUNCTION events_append_lock() RETURNS void LANGUAGE sql AS $$
        SELECT pg_advisory_xact_lock(7954886789631538532)  -- 'neocloud' as a 64-bit key
    $$
    """,
    """
    CREATE FUNCTION events_append(
        p_stream_type text, p_stream_id text, p_expected integer, p_events jsonb,
        p_metadata jsonb, p_organization_id uuid, p_recorded_at timestamptz
    ) RETURNS TABLE(out_version integer, out_position bigint) LANGUAGE plpgsql AS $$
    DECLARE
        current_version integer;
    BEGIN
        PERFORM events_append_lock();
        SELECT COALESCE(max(e.version), 0) INTO current_version
        FROM events_event e
        WHERE e.stream_type = p_stream_type AND e.stream_id = p_stream_id;
        IF p_expected IS NOT NULL AND p_expected <> current_version THEN
            RAISE EXCEPTION 'stream %/% is at version %, expected %',
                p_stream_type, p_stream_id, current_version, p_expected
                USING ERRCODE = 'NC409', DETAIL = current_version::text;
        END IF;
        RETURN QUERY
        INSERT INTO events_event AS ev (
            stream_type, stream_id, version, type, schema_version, data, metadata,
            organization_id, recorded_at
        )
        SELECT p_stream_type, p_stream_id, current_version + u.i::integer, u.e->>0,
               (u.e->>1)::smallint, u.e->2, p_metadata, p_organization_id, p_recorded_at
        FROM jsonb_array_elements(p_events) WITH ORDINALITY AS u(e, i)
        ORDER BY u.i
        RETURNING ev.version, ev.position;
    END
    $$
    """,
    """
    CREATE FUNCTION events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('neocloud_events', '');
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER events_event_notify AFTER INSERT ON events_event
    FOR EACH STATEMENT EXECUTE FUNCTION events_notify()
    """,
]
POSTGRES_BACKWARD = [
    "DROP TRIGGER events_event_notify ON events_event",
    "DROP FUNCTION events_notify()",
    "DROP FUNCTION events_append(text, text, integer, jsonb, jsonb, uuid, timestamptz)",
    "DROP FUNCTION events_append_lock()",
]


def _run(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("events", "0002_append_only")]

    operations = [migrations.RunPython(_run(POSTGRES_FORWARD), _run(POSTGRES_BACKWARD))]
