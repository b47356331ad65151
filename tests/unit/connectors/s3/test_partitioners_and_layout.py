"""Partitioners, Joda path formats and object naming (no services)."""

from __future__ import annotations

import datetime as dt

import pytest

from sluice.connectors.api import ConfigError, DataError
from sluice.connectors.s3_common.layout import ObjectLayout, sidecar_key
from sluice.connectors.s3_common.partitioners import (
    JodaFormatter,
    PartitionerSettings,
    TimeBasedPartitioner,
    field_time,
    make_partitioner,
)

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def _no_ts() -> list[int | None]:
    raise AssertionError("timestamps not needed")


def test_default_partitioner_names_the_kafka_partition() -> None:
    p = make_partitioner(PartitionerSettings("io.confluent.connect.storage.partitioner.DefaultPartitioner"))
    assert p.encode_batch(3, [{"a": 1}, "x"], _no_ts) == ["partition=3", "partition=3"]


def test_field_partitioner_single_and_multiple_fields() -> None:
    one = make_partitioner(PartitionerSettings("FieldPartitioner", field_names=("country",)))
    assert one.encode_batch(0, [{"country": "fr"}, {"country": "de"}], _no_ts) == ["country=fr", "country=de"]
    two = make_partitioner(PartitionerSettings("field", field_names=("c", "n"), directory_delim="/"))
    assert two.encode_batch(0, [{"c": "fr", "n": 7, "x": 1}, {"c": "de", "n": True}], _no_ts) == [
        "c=fr/n=7",
        "c=de/n=true",
    ]
    with pytest.raises(DataError, match="no field 'c'"):
        two.encode_batch(0, [{"n": 1}], _no_ts)
    with pytest.raises(DataError, match="struct or map"):
        one.encode_batch(0, ["text"], _no_ts)
    with pytest.raises(ConfigError):
        make_partitioner(PartitionerSettings("FieldPartitioner"))


def test_time_based_partitioner_buckets_record_times() -> None:
    p = make_partitioner(
        PartitionerSettings(
            "TimeBasedPartitioner",
            path_format="'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH",
            partition_duration_ms=3_600_000,
            timestamp_extractor="Record",
        )
    )
    hour = 3_600_000
    names = p.encode_batch(0, [{}, {}, {}], lambda: [T0, T0 + 1000, T0 + hour])
    assert names == [
        "year=2023/month=11/day=14/hour=22",
        "year=2023/month=11/day=14/hour=22",
        "year=2023/month=11/day=14/hour=23",
    ]
    with pytest.raises(DataError, match="no timestamp"):
        p.encode_batch(0, [{}], lambda: [None])


def test_time_buckets_align_to_the_time_zone() -> None:
    # India is UTC+5:30: a daily bucket starts at 18:30 UTC of the day before.
    p = TimeBasedPartitioner(
        PartitionerSettings(
            path_format="YYYYMMdd",
            partition_duration_ms=86_400_000,
            timezone="Asia/Kolkata",
            timestamp_extractor="Record",
        )
    )
    start = p.bucket(T0)
    assert dt.datetime.fromtimestamp(start / 1000, dt.UTC) == dt.datetime(2023, 11, 14, 18, 30, tzinfo=dt.UTC)
    assert p.name(start) == "20231115"
    with pytest.raises(ConfigError, match="timezone"):
        TimeBasedPartitioner(PartitionerSettings(path_format="YYYY", partition_duration_ms=1, timezone="Mars/Base"))


def test_daily_and_hourly_partitioners_use_record_field_times() -> None:
    daily = make_partitioner(
        PartitionerSettings(
            "io.confluent.connect.storage.partitioner.DailyPartitioner",
            timestamp_extractor="RecordField",
            timestamp_field="meta.at",
        )
    )
    assert daily.encode_batch(0, [{"meta": {"at": "2024-02-29T23:59:59Z"}}], _no_ts) == ["year=2024/month=02/day=29"]
    hourly = make_partitioner(
        PartitionerSettings("HourlyPartitioner", timestamp_extractor="RecordField", timestamp_field="at")
    )
    assert hourly.encode_batch(0, [{"at": T0}], _no_ts) == ["year=2023/month=11/day=14/hour=22"]


def test_field_time_accepts_millis_iso_and_datetimes() -> None:
    assert field_time({"t": 5}, ["t"]) == 5
    assert field_time({"t": "1970-01-01T00:00:01Z"}, ["t"]) == 1000
    assert field_time({"t": dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.UTC)}, ["t"]) == 2000
    with pytest.raises(DataError, match="missing"):
        field_time({}, ["t"])
    with pytest.raises(DataError, match="ISO"):
        field_time({"t": "yesterday"}, ["t"])


def test_joda_formatter_literals_and_fields() -> None:
    moment = dt.datetime(2024, 3, 5, 7, 8, 9)
    assert JodaFormatter("'dt'=YYYY-MM-dd/'h'=HH").format(moment) == "dt=2024-03-05/h=07"
    assert JodaFormatter("yy/MMM/d/mm:ss").format(moment) == "24/Mar/5/08:09"
    with pytest.raises(ConfigError, match="unsupported pattern letter"):
        JodaFormatter("YYYY/qq")
    with pytest.raises(ConfigError, match="unterminated"):
        JodaFormatter("'year=YYYY")


def test_unknown_partitioner_and_extractor_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="partitioner.class"):
        make_partitioner(PartitionerSettings("RandomPartitioner"))
    with pytest.raises(ConfigError, match="timestamp.extractor"):
        make_partitioner(PartitionerSettings("hourly", timestamp_extractor="Sundial"))


def test_object_keys_follow_confluents_layout_and_parse_back() -> None:
    layout = ObjectLayout()
    key = layout.object_key("orders", "partition=3", 3, 42, ".json.gz")
    assert key == "topics/orders/partition=3/orders+3+0000000042.json.gz"
    parsed = layout.parse(key)
    assert parsed is not None
    assert (parsed.topic, parsed.encoded_partition, parsed.kafka_partition, parsed.start_offset, parsed.extension) == (
        "orders",
        "partition=3",
        3,
        42,
        ".json.gz",
    )
    assert parsed.sidecar("keys", ".json") == "topics/orders/partition=3/orders+3+0000000042.keys.json"
    assert layout.parse(sidecar_key(key, ".json.gz", "keys", ".json")) is None
    custom = ObjectLayout(topics_dir="archive", directory_delim="#", file_delim="_", offset_pad_width=4)
    assert custom.object_key("a.b", "x=1#y=2", 0, 7, ".avro") == "archive#a.b#x=1#y=2#a.b_0_0007.avro"
    assert custom.parse("archive#a.b#x=1#y=2#a.b_0_0007.avro").encoded_partition == "x=1#y=2"  # type: ignore[union-attr]
    assert layout.parse("topics/orders/readme.txt") is None
