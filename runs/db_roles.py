"""The app's own database role on PostgreSQL: what `migrate`, run as the tables' owner, grants
the role the web server, the workers and beat run as (GUARDIAN_DB_APP_ROLE), and the checks
that this role could not undo the decision log's protections.

The app's role may read and write the app's tables (SELECT, INSERT, UPDATE, DELETE) and call
the log's purge door (runs/log_triggers.py); it owns nothing, so it cannot disable or drop a
trigger, alter a table or replace a function, and it may not TRUNCATE. The grants are made
again at the end of every `migrate`, table by table, so a table a later migration adds is
covered and a right granted by hand (TRUNCATE, TRIGGER) is taken back. No default privileges:
they would also hand the app a right on any table a later migration makes for the owner alone
(as the purge log is).
"""

from django.apps import apps as django_apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from runs.log_triggers import PG_PURGE_FUNCTIONS, PG_PURGE_TABLES, pg_schema

# What the app does with its rows; what it never needs (TRUNCATE would skip row triggers).
APP_TABLE_RIGHTS = "SELECT, INSERT, UPDATE, DELETE"
WITHHELD_TABLE_RIGHTS = "TRUNCATE, REFERENCES, TRIGGER"
# Django's record of applied migrations: the app reads it (checks), only migrate writes it.
MIGRATIONS_TABLE = "django_migrations"


def _refuse(role: str, problem: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(
        f"GUARDIAN_DB_APP_ROLE={role}: {problem}. The app's role must not be able to undo the "
        "decision log's protections (see .env.example)."
    )


def app_role_check(connection, role: str) -> None:
    """Raise ImproperlyConfigured unless `role` exists and is a plain role: not a superuser,
    not able to bypass row security, not the role that migrates nor a member of the tables'
    owner, and unable to create objects in the schema (where it could put a function of the
    purge door's name). Run as the owner, on PostgreSQL."""
    schema = pg_schema(connection)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rolsuper, rolbypassrls, rolcreaterole FROM pg_roles WHERE rolname = %s",
            [role],
        )
        row = cursor.fetchone()
        if row is None:
            raise _refuse(
                role,
                "no such role; create it first, e.g. "
                f"CREATE ROLE {role} LOGIN PASSWORD '…' (as a superuser)",
            )
        superuser, bypass_rls, create_role = row
        if superuser or bypass_rls or create_role:
            raise _refuse(role, "the role is a superuser or may bypass row security or make roles")
        cursor.execute(
            "SELECT pg_has_role(%s, current_user, 'MEMBER'), "
            "has_schema_privilege(%s, current_schema(), 'CREATE')",
            [role, role],
        )
        owner_member, may_create = cursor.fetchone()
        if owner_member:
            raise _refuse(
                role,
                "it is the role that migrates (the tables' owner) or a member of it; "
                "run the app as another role",
            )
        if may_create:
            raise _refuse(
                role,
                f"it may create objects in the schema {schema}; "
                f"REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC, {role}",
            )


def app_role_grant(connection, role: str) -> list[str]:
    """Grant `role` its rights on the app's tables and the purge door, and take away any other
    right it holds on them; returns the tables granted. PostgreSQL only; run as the owner
    (at the end of every migrate)."""
    app_role_check(connection, role)
    quote = connection.ops.quote_name
    schema = pg_schema(connection)
    grantee = quote(role)
    tables = sorted(
        connection.introspection.django_table_names(only_existing=True, include_views=False)
    )
    with connection.cursor() as cursor:
        for table in tables:
            name = f"{schema}.{quote(table)}"
            cursor.execute(f"GRANT {APP_TABLE_RIGHTS} ON {name} TO {grantee}")
            cursor.execute(f"REVOKE {WITHHELD_TABLE_RIGHTS} ON {name} FROM {grantee}")
        migrations_table = f"{schema}.{quote(MIGRATIONS_TABLE)}"
        cursor.execute(f"GRANT SELECT ON {migrations_table} TO {grantee}")
        cursor.execute(
            f"REVOKE INSERT, UPDATE, DELETE, {WITHHELD_TABLE_RIGHTS} "
            f"ON {migrations_table} FROM {grantee}"
        )
        # Absent only while the runs app is migrated back before its purge door (0017).
        for table in PG_PURGE_TABLES:
            cursor.execute("SELECT to_regclass(%s)", [f"{schema}.{table}"])
            if cursor.fetchone()[0] is not None:
                cursor.execute(f"REVOKE ALL ON {schema}.{table} FROM {grantee}")
        for function in PG_PURGE_FUNCTIONS:
            cursor.execute("SELECT to_regprocedure(%s)", [f"{schema}.{function}"])
            if cursor.fetchone()[0] is not None:
                cursor.execute(f"GRANT EXECUTE ON FUNCTION {schema}.{function} TO {grantee}")
    return tables


def grant_app_role_after_migrate(sender, using: str = "default", **kwargs) -> None:
    """post_migrate receiver: once per migrate (on the last app's signal, when every table
    exists), grant GUARDIAN_DB_APP_ROLE its rights. Nothing to do on SQLite or with one role."""
    from django.db import connections

    role = settings.GUARDIAN_DB_APP_ROLE
    connection = connections[using]
    if not role or connection.vendor != "postgresql":
        return
    if sender is list(django_apps.get_app_configs())[-1]:
        app_role_grant(connection, role)
