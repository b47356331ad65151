"""Run every benchmark against one broker and print a summary table (``make bench``)."""
# The connectors' own benchmarks run alone, `python -m benchmarks.<name>`: jdbc_sink, cdc_vs_debezium, cdc_to_jdbc, …

from __future__ import annotations

import os

from benchmarks import file_sink, file_source
from benchmarks.common import broker
from sluice.worker.runtime import tune_gc


def main() -> None:
    tune_gc()  # the raw baselines run under the same collector settings as the worker
    with broker() as bootstrap:
        os.environ["SLUICE_BENCH_BOOTSTRAP"] = bootstrap
        results = file_source.main() + file_sink.main()
    print("\nSummary (ratio = Sluice rec/s ÷ bare confluent-kafka rec/s, same broker, same run):")
    for raw, ours in results:
        print(f"  {ours.name:<36} {ours.rate:>10,.0f} rec/s {ours.mb_s:6.1f} MB/s  vs {raw.rate:>10,.0f} rec/s  ratio {ours.rate / raw.rate:.2f}")


if __name__ == "__main__":
    main()
