"""Which key the S3 connectors' validate blames, against a real S3-compatible server.

``bucket_problems`` is what ``PUT /connector-plugins/{S3 class}/config/validate`` reports per key.
HeadBucket answers every refusal with a bare 403, so refused credentials used to come back on
``s3.bucket.name``; they belong on ``aws.access.key.id``, and a missing bucket stays on the bucket.
"""

from __future__ import annotations

import pytest

from sluice.connectors.s3_common.storage import S3Connection, bucket_problems
from tests.services.s3_server import S3Server

pytestmark = pytest.mark.integration


def connection(s3: S3Server, bucket: str, *, secret: str | None = None, key: str | None = None) -> S3Connection:
    return S3Connection(
        bucket=bucket,
        region=s3.region,
        endpoint_url=s3.endpoint_url,
        access_key_id=key or s3.access_key,
        secret_access_key=secret or s3.secret_key,
    )


def test_refused_credentials_are_reported_on_the_access_key_and_a_missing_bucket_on_the_bucket(
    s3: S3Server, s3_bucket: str
) -> None:
    assert bucket_problems(connection(s3, s3_bucket), 5.0) == {}

    wrong_secret = bucket_problems(connection(s3, s3_bucket, secret="not-the-secret"), 5.0)
    assert list(wrong_secret) == ["aws.access.key.id"]
    assert "SignatureDoesNotMatch" in wrong_secret["aws.access.key.id"]
    assert "not-the-secret" not in wrong_secret["aws.access.key.id"]

    unknown_key = bucket_problems(connection(s3, s3_bucket, key="AKIANOBODY"), 5.0)
    assert list(unknown_key) == ["aws.access.key.id"]

    missing = bucket_problems(connection(s3, "no-such-bucket-here"), 5.0)
    assert list(missing) == ["s3.bucket.name"]
    assert "NoSuchBucket" in missing["s3.bucket.name"]
