from __future__ import annotations

from click.testing import CliRunner

from sluice.cli.main import main


def test_help_names_the_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("standalone", "plugins", "dev"):
        assert command in result.output


def test_plugins_lists_type_name_and_version() -> None:
    result = CliRunner().invoke(main, ["plugins"])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    assert rows[0][:3] == ["TYPE", "NAME", "VERSION"]
    assert ["source", "FileStreamSource", "0.1.0"] in [r[:3] for r in rows]
    assert ["sink", "FileStreamSink", "0.1.0"] in [r[:3] for r in rows]
    everything = CliRunner().invoke(main, ["plugins", "--all"]).output
    assert "JsonConverter" in everything and "converter" in everything


def test_standalone_reports_a_bad_worker_config(tmp_path) -> None:
    props = tmp_path / "worker.properties"
    props.write_text("offset.flush.interval.ms=soon\n")
    result = CliRunner().invoke(main, ["standalone", str(props)])
    assert result.exit_code == 2
    assert "offset.flush.interval.ms" in result.output
