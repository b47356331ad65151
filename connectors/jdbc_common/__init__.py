"""Code shared by the JDBC source and sink: connection URLs, SQL dialects, type mapping, errors.

Built on SQLAlchemy, so PostgreSQL, MySQL/MariaDB and SQLite all work; PostgreSQL gets COPY-based
fast paths through psycopg. Install with ``pip install 'sluice[jdbc]'``.
"""

from __future__ import annotations
