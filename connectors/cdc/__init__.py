"""The change-data-capture core every database source shares, as Debezium's core is shared by its
connectors. It knows Debezium's event formats and the runtime's SPI, and nothing of any database
or driver (an import contract checks it: no ``psycopg``, no ``connectors.source``).

Shared here:

* :mod:`.envelope`: the change event's envelope (``before``, ``after``, ``source``, ``transaction``,
  ``op``, ``ts_*``), the ``source.snapshot`` field, topic and schema naming, and the constant JSON
  around a payload that a native encoder writes;
* :mod:`.emitter`: the buffer a decoder appends its events to, the outbox rule (the Python-built
  and the serialized never pending at once), and the two ways a poll's batch leaves — the Python
  lane (:class:`~.emitter.RecordEmitter`) and the native one (:class:`~.emitter.SerializingEmitter`),
  chosen once when the task starts; :mod:`.outbox`: batches handed out one per poll;
* :mod:`.snapshot` and :mod:`.chunks`: chunked snapshots deduplicated against the stream with
  watermarks (initial, incremental, blocking), resumable from the offsets;
* :mod:`.signals` (source table and Kafka channels), :mod:`.notifications`, :mod:`.heartbeats`,
  :mod:`.transactions` (transaction metadata events and blocks);
* :mod:`.config`: the checks of Debezium's shared keys, a base for a source's config model;
* :mod:`.filters`: Debezium's include/exclude lists over ``<namespace>.<table>.<column>``
  (PostgreSQL's schemas, MySQL's databases); :mod:`.keys`: a row's key struct.

What a database source supplies (``connectors/source/postgres_cdc`` is the first,
``connectors/source/binlog_cdc``, MySQL and MariaDB, the second):

* the streaming event source: its replication protocol, read loop, keepalives, reconnects and
  position handling (PostgreSQL: ``streaming.py``, ``replication.py``, ``decoder.py``);
* its two emitters: how a change becomes a record in Python (its ``source`` block) and, if it has
  one, its native encoder (PostgreSQL: ``emitters.py``, ``native.py``);
* the type mapping: its columns → Connect schemas and values (PostgreSQL: ``types.py``,
  ``text_values.py``, ``tables.py``);
* the snapshot reader's queries: watermarks, chunk reads, the snapshot's point
  (:class:`~.snapshot.SnapshotReader`; PostgreSQL: ``snapshot.py``);
* the offsets and position type: what an offset holds, how a restart skips what was delivered,
  what a commit confirms to the database (PostgreSQL: LSNs, the slot's confirmed position);
* its config model (extending :class:`~.config.CdcSourceConfig`), connector, task and metrics.
"""
