"""The topics a source task produces to: refused outside the connector's scope, created per
``topic.creation.*`` (KIP-158) and counted as used (KIP-558) before the first record goes out."""

from __future__ import annotations

from sluice.worker.config.connector_scope import TopicScope
from sluice.worker.topic_creation import TopicCreator


class SourceTopics:
    """A source runner's gate to its topics. Runner thread only.

    ``active_topics`` is the runner's set of topics used, which the herder reads and resets; a
    topic used again after a reset passes the gate again (a cheap set lookup per batch).
    """

    def __init__(self, active_topics: set[str], scope: TopicScope | None, creator: TopicCreator | None) -> None:
        self._active = active_topics
        self.scope = scope
        #: What creates missing topics (``None``: the broker decides, or creation is off).
        self.creator = creator

    def use(self, topic: str) -> None:
        """Before the first record to ``topic``: refuse it when it is outside the connector's
        scope (the task fails), create it when it is missing, and count it as used."""
        if topic not in self._active:
            if self.scope is not None:
                self.scope.check(topic)  # before the topic is created or anything sent to it
            if self.creator is not None:
                self.creator.ensure(topic)
            self._active.add(topic)

    def close(self) -> None:
        """Close the creator's admin client (runner thread, as the task closes)."""
        if self.creator is not None:
            self.creator.close()
