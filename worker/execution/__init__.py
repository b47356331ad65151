"""Where and how a task runs: built from its config (runner, transforms, Kafka client settings), on a
thread of the worker or of a sandboxed task host process (``task.executor``)."""
