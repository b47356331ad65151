"""``plugin.path``: scanned when the registry is built and on an explicit refresh, never on a lookup.

A name in a request must never make the worker import a module: these tests plant modules whose
import-time code writes a marker file, and check the marker is absent after every lookup.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.connectors.api import ConfigError
from sluice.plugins import PluginKind, PluginRegistry

SOURCE = """
from sluice.connectors.api import SourceConnector, SourceTask
class {cls}Task(SourceTask):
    def start(self, c, ctx): pass
    def poll(self): return None
    def stop(self): pass
class {cls}(SourceConnector):
    task_class = {cls}Task
    version = '9.9'
    def start(self, c): pass
    def task_configs(self, n): return [{{}}]
"""

TRANSFORM = """
from sluice.connectors.api import Transformation
class {cls}(Transformation):
    version = '1.0'
    def apply(self, record): return record
"""


def _evil(marker: Path) -> str:
    """Module text that leaves ``marker`` behind if it is ever imported."""
    return f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\nclass X: pass\n"


@pytest.fixture(autouse=True)
def _isolated_imports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """The registry puts plugin directories on sys.path and imports modules: undo both (the
    entry-point plugins stay imported, as in a worker)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"  # sys.modules is process-wide: one name per test


def test_a_module_present_at_start_is_found_by_python_path_and_class_name(tmp_path: Path) -> None:
    mod = _name("mine")
    (tmp_path / f"{mod}.py").write_text(SOURCE.format(cls="MySource"))
    registry = PluginRegistry([str(tmp_path)])
    for name in (f"{mod}.MySource", f"{mod}:MySource", "MySource"):
        info = registry.connector(name)
        assert info.kind is PluginKind.SOURCE and info.version == "9.9" and info.class_name == f"{mod}.MySource"
    assert f"{mod}.MySource" in {p.class_name for p in registry.plugins()}
    assert f"{mod}.MySourceTask" not in {p.class_name for p in registry.plugins()}  # a task is no plugin


def test_a_module_written_after_start_is_never_imported_by_a_lookup(tmp_path: Path) -> None:
    registry = PluginRegistry([str(tmp_path)])
    mod, marker = _name("evilmod"), tmp_path / "marker"
    (tmp_path / f"{mod}.py").write_text(_evil(marker))
    for name in (f"{mod}.X", f"{mod}:X", "X"):
        assert registry.find(name, list(PluginKind)) is None
        with pytest.raises(ConfigError) as caught:
            registry.connector(name)
        assert caught.value.key == "connector.class"
        assert "FileStreamSource" in str(caught.value)  # the known ones are listed
        with pytest.raises(ConfigError):
            registry.resolve(name, (PluginKind.TRANSFORMATION,), "transforms.t.type")
        with pytest.raises(ConfigError):
            registry.converter(name, "value.converter")
        with pytest.raises(ConfigError):
            registry.resolve(name, (PluginKind.CONFIG_PROVIDER,), "config.providers.x.class")
    assert not marker.exists() and mod not in sys.modules


def test_installed_modules_are_never_imported_by_name(tmp_path: Path) -> None:
    registry = PluginRegistry([str(tmp_path)])
    for name in ("unittest.__main__.X", "antigravity.X", "json.JSONDecoder", "os:system", "..x.Y", "a b.C"):
        assert registry.find(name, list(PluginKind)) is None
    assert "unittest.__main__" not in sys.modules and "antigravity" not in sys.modules


def test_refresh_adds_what_appeared_and_logs_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    registry = PluginRegistry([str(tmp_path)])
    mod = _name("late")
    (tmp_path / f"{mod}.py").write_text(TRANSFORM.format(cls="LateTransform"))
    assert registry.find(f"{mod}.LateTransform", [PluginKind.TRANSFORMATION]) is None
    with caplog.at_level(logging.INFO, logger="sluice.plugins.registry"):
        added = registry.refresh()
    assert [p.class_name for p in added] == [f"{mod}.LateTransform"]
    assert (
        registry.resolve(f"{mod}.LateTransform", [PluginKind.TRANSFORMATION], "transforms.t.type").cls.__name__
        == "LateTransform"
    )
    assert f"added transformation LateTransform ({mod}.LateTransform)" in caplog.text
    assert registry.refresh() == []  # nothing new the second time


def test_packages_are_walked_and_re_exports_keep_their_names(tmp_path: Path) -> None:
    pkg = _name("acme")
    (tmp_path / pkg / "sources").mkdir(parents=True)
    (tmp_path / pkg / "__init__.py").write_text(f"from {pkg}.sources.tick import Tick\n")
    (tmp_path / pkg / "sources" / "__init__.py").write_text("")
    (tmp_path / pkg / "sources" / "tick.py").write_text(SOURCE.format(cls="Tick"))
    (tmp_path / pkg / "transforms.py").write_text(TRANSFORM.format(cls="Upper"))
    (tmp_path / pkg / "__main__.py").write_text(_evil(tmp_path / "main-marker"))
    registry = PluginRegistry([str(tmp_path)])
    tick = registry.connector(f"{pkg}.sources.tick.Tick")
    assert registry.connector(f"{pkg}.Tick") is tick and registry.connector("Tick") is tick
    assert registry.find(f"{pkg}.transforms.Upper", [PluginKind.TRANSFORMATION]) is not None
    assert not (tmp_path / "main-marker").exists()  # __main__ runs a program: never imported


def test_a_package_directory_is_scanned_under_its_dotted_name(tmp_path: Path) -> None:
    top = _name("tree")
    (tmp_path / top / "plugins").mkdir(parents=True)
    (tmp_path / top / "__init__.py").write_text("")
    (tmp_path / top / "plugins" / "__init__.py").write_text("")
    (tmp_path / top / "plugins" / "ticker.py").write_text(SOURCE.format(cls="Ticker"))
    (tmp_path / top / "other.py").write_text(_evil(tmp_path / "marker"))  # beside the entry: not scanned
    registry = PluginRegistry([str(tmp_path / top / "plugins")])
    assert registry.connector(f"{top}.plugins.ticker.Ticker").cls.__name__ == "Ticker"
    assert not (tmp_path / "marker").exists()


def test_broken_and_shadowing_modules_do_not_stop_the_scan(tmp_path: Path) -> None:
    (tmp_path / f"{_name('exits')}.py").write_text("raise SystemExit(3)\n")
    (tmp_path / f"{_name('broken')}.py").write_text("raise RuntimeError('no')\n")
    (tmp_path / "json.py").write_text(_evil(tmp_path / "json-marker"))  # json is imported already
    mod = _name("fine")
    (tmp_path / f"{mod}.py").write_text(SOURCE.format(cls="Fine"))
    registry = PluginRegistry([str(tmp_path)])
    assert registry.connector(f"{mod}.Fine").cls.__name__ == "Fine"
    assert registry.find("json.X", list(PluginKind)) is None and not (tmp_path / "json-marker").exists()


def test_distributions_installed_with_pip_target_are_not_walked(tmp_path: Path) -> None:
    lib = _name("somelib")
    (tmp_path / lib).mkdir()
    (tmp_path / lib / "__init__.py").write_text(_evil(tmp_path / "marker"))
    dist_info = tmp_path / f"{lib}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {lib}\nVersion: 1.0\n")
    (dist_info / "top_level.txt").write_text(f"{lib}\n")
    PluginRegistry([str(tmp_path)])
    assert not (tmp_path / "marker").exists()  # its plugins, if any, come as entry points


def test_path_modules_import_exactly_the_listed_modules(tmp_path: Path) -> None:
    """A task host's registry: what its worker discovered, not what is in the directory now."""
    known, late = _name("known"), _name("late")
    (tmp_path / f"{known}.py").write_text(SOURCE.format(cls="Known"))
    (tmp_path / f"{late}.py").write_text(_evil(tmp_path / "marker"))
    registry = PluginRegistry([str(tmp_path)], path_modules=[known])
    assert registry.connector(f"{known}.Known").cls.__name__ == "Known"
    assert registry.imported_path_modules == [known]
    assert not (tmp_path / "marker").exists()
    registry.adopt(["json", "os"])  # names not under plugin.path are refused, not imported from elsewhere
    assert registry.imported_path_modules == [known]
