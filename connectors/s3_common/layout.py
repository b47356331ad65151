"""Object keys: ``<topics.dir>/<topic>/<encoded partition>/<topic>+<kafka partition>+<start offset>.<ext>``.

The key depends only on the topic, the Kafka partition, the encoded partition and the offset of
the object's first record, so a sink that replays from a committed offset rewrites the same keys
(Confluent's exactly-once layout). Sidecar objects for keys, headers, timestamps and offsets
insert ``.keys`` / ``.headers`` / ``.timestamps`` / ``.offsets`` before the extension.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SIDECARS = ("keys", "headers", "timestamps", "offsets")


@dataclass(frozen=True)
class ObjectLayout:
    """The key-layout settings (``topics.dir``, ``directory.delim``, ``file.delim``, zero padding)."""

    topics_dir: str = "topics"
    directory_delim: str = "/"
    file_delim: str = "+"
    offset_pad_width: int = 10

    def topic_prefix(self, topic: str) -> str:
        """Everything of ``topic`` lives under this prefix (it ends with the directory delimiter)."""
        d = self.directory_delim
        head = f"{self.topics_dir}{d}" if self.topics_dir else ""
        return f"{head}{topic}{d}"

    def object_key(
        self, topic: str, encoded_partition: str, kafka_partition: int, start_offset: int, extension: str
    ) -> str:
        d, f = self.directory_delim, self.file_delim
        return (
            f"{self.topic_prefix(topic)}{encoded_partition}{d}"
            f"{topic}{f}{kafka_partition}{f}{start_offset:0{self.offset_pad_width}d}{extension}"
        )

    def parse(self, key: str) -> ParsedKey | None:
        """Split a key this layout wrote; ``None`` for anything else (including sidecars)."""
        d, f = self.directory_delim, self.file_delim
        directory, sep, name = key.rpartition(d)
        if not sep:
            return None
        match = re.fullmatch(rf"(?P<topic>.+?){re.escape(f)}(?P<p>\d+){re.escape(f)}(?P<o>\d+)(?P<ext>\..+)?", name)
        if match is None:
            return None
        extension = match.group("ext") or ""
        if any(extension.startswith(f".{s}.") for s in SIDECARS):
            return None
        topic = match.group("topic")
        prefix = self.topic_prefix(topic)
        if not (directory + d).startswith(prefix):
            return None
        return ParsedKey(
            key=key,
            topic=topic,
            encoded_partition=directory[len(prefix) :],
            kafka_partition=int(match.group("p")),
            start_offset=int(match.group("o")),
            extension=extension,
        )


@dataclass(frozen=True)
class ParsedKey:
    """The parts of an object key written by the sink."""

    key: str
    topic: str
    encoded_partition: str
    kafka_partition: int
    start_offset: int
    extension: str

    def sidecar(self, kind: str, extension: str) -> str:
        """The key of this object's ``kind`` sidecar (``keys``, ``headers``, ``timestamps``)."""
        return sidecar_key(self.key, self.extension, kind, extension)


def sidecar_key(key: str, extension: str, kind: str, sidecar_extension: str) -> str:
    """``…+0000000000.json`` → ``…+0000000000.keys.json`` (``kind`` = keys/headers/timestamps)."""
    base = key[: -len(extension)] if extension and key.endswith(extension) else key
    return f"{base}.{kind}{sidecar_extension}"
