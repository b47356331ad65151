from __future__ import annotations

from sluice.worker.config.properties import parse_properties


def test_properties_syntax() -> None:
    text = "\n".join(
        [
            "# comment",
            "! another comment",
            "a=1",
            "b : two words",
            "c   3",
            "d=line\\",
            "   continued",
            "e=x\\=y",
            "empty=",
            "unicode=caf\\u00e9",
            "  indented.key = v ",
        ]
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "two words",
        "c": "3",
        "d": "linecontinued",
        "e": "x=y",
        "empty": "",
        "unicode": "café",
        "indented.key": "v ",
    }
