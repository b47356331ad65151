"""Memory stays within the configured bound while the S3 sink writes 1,000 open time buckets.

``benchmarks.s3_memory`` drives the sink task in a fresh process against the real S3 server and
reports the growth of its peak RSS. With ``partitioner.max.open.files=50`` the oldest open object
is committed whenever a 51st opens, so memory stays near 50 objects' worth; the same run with the
cap at 1,000 holds every bucket open, which shows the measurement sees the data at all.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.services.s3_server import S3Server

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DIRECTORIES, PER_DIRECTORY, RECORD_BYTES = 1_000, 20, 2_000


def _measure(s3: S3Server, bucket: str, max_open: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable, "-m", "benchmarks.s3_memory", "--json",
            "--endpoint", s3.endpoint_url, "--bucket", bucket, "--region", s3.region,
            "--access-key", s3.access_key, "--secret-key", s3.secret_key,
            "--mode", "time", "--max-open", str(max_open), "--directories", str(DIRECTORIES),
            "--per-directory", str(PER_DIRECTORY), "--run", str(PER_DIRECTORY), "--record-bytes", str(RECORD_BYTES),
        ],
        cwd=REPO, check=True, capture_output=True, text=True, timeout=600,
    )
    return orjson.loads(out.stdout.strip().splitlines()[-1])


def test_open_file_cap_bounds_peak_rss_over_1000_time_buckets(s3: S3Server, s3_bucket: str) -> None:
    capped = _measure(s3, s3_bucket, 50)
    uncapped = _measure(s3, s3_bucket, DIRECTORIES)
    data_mb = DIRECTORIES * PER_DIRECTORY * RECORD_BYTES / 1e6  # 40 MB of values
    bound_mb = 50 * PER_DIRECTORY * RECORD_BYTES * 1.2 / 1e6  # 50 open objects (JSON adds a little)

    assert capped["open_objects_at_end"] <= 50
    assert capped["peak_buffered_mb"] <= bound_mb, capped
    # RSS also holds the interpreter's own churn: allow a margin, far below the data volume.
    assert capped["peak_rss_growth_mb"] < bound_mb + 15, capped
    assert uncapped["open_objects_at_end"] == DIRECTORIES
    assert uncapped["peak_rss_growth_mb"] > 0.7 * data_mb, uncapped  # without the cap memory follows the data
