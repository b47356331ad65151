"""The plan ``sluice apply`` shows: what changes, what is left alone, and secrets never shown."""

from __future__ import annotations

from sluice.cli.connector_diff import (
    Action,
    KeyChange,
    diff_config,
    hidden_values_without_source,
    plan_changes,
    render_plan,
)
from sluice.worker.config.masking import MASK


def test_a_plan_creates_updates_leaves_and_prunes() -> None:
    desired = {
        "new": {"name": "new", "connector.class": "X", "topic": "t"},
        "same": {"name": "same", "connector.class": "X", "tasks.max": "1"},
        "changed": {"name": "changed", "connector.class": "X", "tasks.max": "2", "added": "a"},
    }
    current = {
        "same": {"name": "same", "connector.class": "X", "tasks.max": "1"},
        "changed": {"name": "changed", "connector.class": "X", "tasks.max": "1", "removed": "r"},
        "stray": {"name": "stray", "connector.class": "X"},
    }
    kept = {c.name: c for c in plan_changes(desired, current, prune=False)}
    assert {n: c.action for n, c in kept.items()} == {
        "changed": Action.UPDATE,
        "new": Action.CREATE,
        "same": Action.UNCHANGED,
        "stray": Action.UNMANAGED,
    }
    assert kept["changed"].keys == (
        KeyChange("added", None, "a"),
        KeyChange("removed", "r", None),
        KeyChange("tasks.max", "1", "2"),
    )
    assert kept["new"].keys == (KeyChange("connector.class", None, "X"), KeyChange("topic", None, "t"))
    pruned = {c.name: c.action for c in plan_changes(desired, current, prune=True)}
    assert pruned["stray"] is Action.DELETE


def test_re_applying_the_same_config_is_no_change() -> None:
    config = {"name": "a", "connector.class": "X", "tasks.max": "1"}
    [change] = plan_changes({"a": config}, {"a": dict(config)}, prune=True)
    assert change.action is Action.UNCHANGED and change.keys == ()


def test_masked_secrets_compare_as_unchanged_and_are_flagged() -> None:
    current = {"connector.class": "X", "db.password": MASK, "api.token": "${env:TOKEN}"}
    # A literal secret cannot be compared; [hidden] (an export) keeps the stored one; placeholders compare.
    changes, unverifiable = diff_config(current, {"connector.class": "X", "db.password": "s3cret", "api.token": "${env:TOKEN}"})
    assert changes == [] and unverifiable == ["db.password"]
    changes, unverifiable = diff_config(current, {"connector.class": "X", "db.password": MASK, "api.token": "${env:TOKEN}"})
    assert changes == [] and unverifiable == []
    changes, _ = diff_config(current, {"connector.class": "X", "db.password": MASK, "api.token": "${env:OTHER}"})
    assert changes == [KeyChange("api.token", "${env:TOKEN}", "${env:OTHER}")]
    # A literal secret replaced by a placeholder is a change: the worker would show a stored placeholder.
    changes, unverifiable = diff_config(current, {"connector.class": "X", "db.password": "${dir:/s:pw}", "api.token": "${env:TOKEN}"})
    assert changes == [KeyChange("db.password", MASK, "${dir:/s:pw}")] and unverifiable == []


def test_a_hidden_value_needs_a_stored_one() -> None:
    assert hidden_values_without_source({"db.password": MASK, "topic": "t"}, None) == ["db.password"]
    assert hidden_values_without_source({"db.password": MASK}, {"db.password": MASK}) == []


def test_the_rendered_diff_masks_secrets_by_name_and_by_plugin_type() -> None:
    desired = {"a": {"name": "a", "connector.class": "X", "connection.password": "new-pass", "pin": "1234", "topic": "t2"}}
    current = {"a": {"name": "a", "connector.class": "X", "pin": "9999", "topic": "t1"}}
    plan = plan_changes(desired, current, prune=False, secret_keys={"a": {"pin"}})
    text = "\n".join(render_plan(plan, detailed=True, sources={"a": "conn/a.yaml"}))
    assert "new-pass" not in text and "1234" not in text and "9999" not in text
    assert text.splitlines() == [
        "  ~ a: update, 3 key(s)  (conn/a.yaml)",
        f"      + connection.password = {MASK}",
        f"      ~ pin: {MASK} (changed)",
        "      ~ topic: t1 -> t2",
        "Plan: 0 to create, 1 to update, 0 to delete, 0 unchanged.",
    ]


def test_the_summary_without_diff_shows_one_line_per_connector() -> None:
    plan = plan_changes(
        {"a": {"name": "a", "x": "1"}, "b": {"name": "b", "x": "1"}},
        {"b": {"name": "b", "x": "1"}, "c": {"name": "c"}},
        prune=False,
    )
    assert render_plan(plan, detailed=False) == [
        "  + a: create",
        "  = b: unchanged",
        "  ? c: on the worker, not in the files (kept; --prune deletes it)",
        "Plan: 1 to create, 0 to update, 0 to delete, 1 unchanged, 1 not managed.",
    ]
