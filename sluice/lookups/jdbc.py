"""Druid's `jdbc` extraction namespace, read through SQLAlchemy Core (no JVM drivers here): the key and value
columns of one table, optionally filtered, as the lookup's map.

Table and column names become quoted identifiers; `filter` is a condition in the database's own SQL, passed on as
Druid passes it (it runs with the credentials of the spec, against the database the spec names). Keys and values
are text, as Druid's JDBC reader gets them with getString; a row with a NULL key is skipped, and of rows with the
same key the last one read wins, as in Druid's map.
"""

from __future__ import annotations

from sqlalchemy import column, create_engine, select, table, text
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from sluice.connectors.sources.sql import sqlalchemy_url
from sluice.lookups.specs import JdbcExtractionNamespace
from sluice.spec.input_source import reveal

#: seconds a PostgreSQL connection attempt may take (libpq waits forever for a host that drops packets)
_CONNECT_TIMEOUT_S = 10


def load_jdbc(namespace: JdbcExtractionNamespace) -> dict[str, str | None]:
    """The namespace's map, read now; raises ValueError (a bad connectURI) or SQLAlchemy's errors."""
    schema, _, name = namespace.table.rpartition(".")
    source = table(name, column(namespace.key_column), column(namespace.value_column), schema=schema or None)
    query = select(source.c[namespace.key_column], source.c[namespace.value_column])
    if namespace.filter:
        query = query.where(text(f"({namespace.filter})"))
    url = _url(namespace)
    connect_args = {"connect_timeout": _CONNECT_TIMEOUT_S} if url.get_backend_name() == "postgresql" else {}
    engine = create_engine(url, poolclass=NullPool, connect_args=connect_args)
    try:
        with engine.connect() as connection:
            rows = connection.execute(query).all()
    finally:
        engine.dispose()
    return {str(key): None if value is None else str(value) for key, value in rows if key is not None}


def _url(namespace: JdbcExtractionNamespace) -> URL:
    config = namespace.connector_config
    url = sqlalchemy_url(config.connect_uri)
    if config.user is not None:
        url = url.set(username=config.user)
    if config.password is not None:
        url = url.set(password=reveal(config.password))
    return url
