"""What a worker shows of itself: ``GET /metrics``, task metrics, traces, tagged log lines, logger
levels set at runtime, and outages of the systems a task depends on."""
