"""The ``aigc-hub`` CLI: help, topics, schemas, exit codes and one-line user errors."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest
import typer
from typer.testing import CliRunner

from aigc_hub.cli import common
from aigc_hub.cli.main import app
from aigc_hub.core import errors
from aigc_hub.messaging.catalog import DAY_MS, TopicSpec
from aigc_hub.pipeline import Pipeline

# --- pipelines the tests install through AIGC_HUB_PIPELINES -----------------------------------
# This module is importable under its own __name__ however pytest imported it.
HERE = __name__

compatible_pipeline = Pipeline("clitest")
compatible_pipeline.topic(TopicSpec("clitest.things", 2, 12 * 3600 * 1000, pipeline="clitest"))


@compatible_pipeline.event("clitest.thing.made", 1, topic="clitest.things")
class ThingMadeV1(pydantic.BaseModel):
    thing_id: str


@compatible_pipeline.event("clitest.thing.made", 2, topic="clitest.things")
class ThingMadeV2(pydantic.BaseModel):
    thing_id: str
    colour: str = "red"


@compatible_pipeline.event("clitest.thing.sold", 1)
class ThingSoldV1(pydantic.BaseModel):
    thing_id: str
    price: int


incompatible_pipeline = Pipeline("clitest_broken")


@incompatible_pipeline.event("clitest.thing.broken", 1)
class ThingBrokenV1(pydantic.BaseModel):
    thing_id: str
    price: int


@incompatible_pipeline.event("clitest.thing.broken", 2)
class ThingBrokenV2(pydantic.BaseModel):
    thing_id: str
    price: str


not_a_pipeline = "just a string"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv(common.PIPELINES_ENV, "")  # none but what a test names
    return CliRunner()


def installed(*names: str) -> dict[str, str | None]:
    return {common.PIPELINES_ENV: ",".join(f"{HERE}:{name}" for name in names)}


# --- help -------------------------------------------------------------------------------------


def test_top_level_help_says_what_the_hub_is(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--help"])

    assert result.exit_code == 0
    assert "event backbone" in result.stdout
    assert "AIGC_HUB_PIPELINES" in result.stdout
    for group in ("schemas", "topics"):
        assert group in result.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["schemas", "--help"], "Check and export"),
        (["schemas", "check", "--help"], "Exits with code 6"),
        (["schemas", "export", "--help"], "DIR"),
        (["topics", "--help"], "topic catalog"),
        (["topics", "list", "--help"], "--pipeline"),
    ],
)
def test_every_help_page_renders(runner: CliRunner, args: list[str], fragment: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert fragment in result.stdout


def test_version(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith("aigc-hub ")


# --- topics -----------------------------------------------------------------------------------


def test_topics_list_shows_the_backbone_and_installed_pipelines_topics(
    runner: CliRunner,
) -> None:
    result = runner.invoke(app, ["topics", "list"], env={"AIGC_HUB_PIPELINES": None})

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    dispatch = next(line for line in lines if "generation.dispatch" in line)
    assert [cell.strip() for cell in dispatch.split("│")[1:-1]] == [
        "generation.dispatch",
        "12",
        "7 d",
        "reliable",
        "generation",
        "partitions and retention not given by the seed",
    ]
    assert any("topic.system.dlq" in line and "forever" in line for line in lines)
    chunks = next(line for line in lines if "chunks-created" in line)
    assert [cell.strip() for cell in chunks.split("│")[1:-1]][:5] == [
        "chunks-created",
        "24",
        "3 d",
        "reliable",
        "documents",
    ]
    transcode = next(line for line in lines if "│ transcode " in line)
    assert [cell.strip() for cell in transcode.split("│")[1:-1]][:5] == [
        "transcode",
        "6",
        "7 d",
        "reliable",
        "vistack",
    ]


def test_topics_list_merges_pipeline_topics_and_filters(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["topics", "list", "--pipeline", "clitest"], env=installed("compatible_pipeline")
    )

    assert result.exit_code == 0, result.output
    assert "clitest.things" in result.stdout
    assert "12 h" in result.stdout
    assert "documents-uploaded" not in result.stdout
    assert result.stdout.rstrip().endswith("1 topics")


def test_topics_list_of_an_unknown_pipeline_is_not_found(runner: CliRunner) -> None:
    result = runner.invoke(app, ["topics", "list", "-p", "nope"], env={"AIGC_HUB_PIPELINES": None})

    assert result.exit_code == common.ExitCode.NOT_FOUND
    known = "(known: avcc, documents, generation,"
    assert result.stderr.startswith(f"error: no topics for pipeline 'nope' {known}")


@pytest.mark.parametrize(
    ("retention", "text"),
    [
        (None, "forever"),
        (7 * DAY_MS, "7 d"),
        (36 * 3600_000, "36 h"),
        (90_000, "90 s"),
        (5, "5 ms"),
    ],
)
def test_human_retention(retention: int | None, text: str) -> None:
    from aigc_hub.cli.topics import human_retention

    assert human_retention(retention) == text


# --- schemas ----------------------------------------------------------------------------------


def test_schemas_check_passes_for_a_compatible_pipeline(runner: CliRunner) -> None:
    result = runner.invoke(app, ["schemas", "check"], env=installed("compatible_pipeline"))

    assert result.exit_code == common.ExitCode.OK, result.output
    assert result.stdout.strip() == "2 event types, 3 versions: compatible"


def test_schemas_check_without_pipelines_says_how_to_install_them(runner: CliRunner) -> None:
    result = runner.invoke(app, ["schemas", "check"])

    assert result.exit_code == 0
    assert result.stdout.strip() == "0 event types, 0 versions: compatible"
    assert common.PIPELINES_ENV in result.stderr


def test_schemas_check_fails_for_an_incompatible_pipeline(runner: CliRunner) -> None:
    env = installed("compatible_pipeline", "incompatible_pipeline")

    result = runner.invoke(app, ["schemas", "check"], env=env)

    assert result.exit_code == common.ExitCode.INCOMPATIBLE
    assert result.exit_code == 6
    row = next(line for line in result.stdout.splitlines() if "clitest.thing.broken" in line)
    assert "v1 → v2" in row
    assert "price" in row
    assert "type changed from integer to string" in row
    assert result.stderr.splitlines() == [
        "error: 1 compatibility problem(s) in 3 event types",
    ]


def test_schemas_export_writes_the_files(runner: CliRunner, tmp_path: Path) -> None:
    target = tmp_path / "out"

    result = runner.invoke(
        app, ["schemas", "export", str(target)], env=installed("compatible_pipeline")
    )

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote 3 schema files to {target}"
    assert sorted(p.name for p in target.iterdir()) == [
        "clitest.thing.made.v1.json",
        "clitest.thing.made.v2.json",
        "clitest.thing.sold.v1.json",
    ]
    schema = json.loads((target / "clitest.thing.made.v2.json").read_text())
    assert schema["title"] == "clitest.thing.made v2"
    assert schema["x-topic"] == "clitest.things"


def test_schemas_export_into_a_file_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")

    result = runner.invoke(app, ["schemas", "export", str(file)])

    assert result.exit_code == common.ExitCode.USAGE
    assert "Traceback" not in result.output


# --- bad AIGC_HUB_PIPELINES and error reporting -----------------------------------------------


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("no_such_installed_name", "no installed pipeline has this name (installed: "),
        (":pipeline", "expected 'module:attribute'"),
        ("aigc_hub_no_such_module_xyz:pipeline", "cannot import 'aigc_hub_no_such_module_xyz'"),
        (f"{HERE}:missing_pipeline", "has no attribute 'missing_pipeline'"),
        (f"{HERE}:not_a_pipeline", "'not_a_pipeline' is a str, not an aigc_hub Pipeline"),
    ],
)
@pytest.mark.parametrize("command", [["topics", "list"], ["schemas", "check"]])
def test_a_bad_pipeline_entry_is_one_error_line(
    runner: CliRunner, value: str, fragment: str, command: list[str]
) -> None:
    result = runner.invoke(app, command, env={common.PIPELINES_ENV: f"{value}"})

    assert result.exit_code == common.ExitCode.CONFIGURATION
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {common.PIPELINES_ENV} entry {value!r}: ")
    assert fragment in line
    assert "Traceback" not in result.output


def test_installed_pipelines_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(common.PIPELINES_ENV, f" {HERE}:compatible_pipeline , ,")
    assert common.installed_pipelines() == [compatible_pipeline]
    assert common.installed_pipelines(f"{HERE}:compatible_pipeline,{HERE}:compatible_pipeline") == [
        compatible_pipeline
    ]
    monkeypatch.setenv(common.PIPELINES_ENV, "")
    assert common.installed_pipelines() == []
    monkeypatch.delenv(common.PIPELINES_ENV)  # unset: every installed pipeline
    installed = sorted(p.name for p in common.installed_pipelines())
    assert installed == ["avcc", "documents", "generation", "vistack"]
    assert {p.name for p in common.installed_pipelines("generation,avcc")} == {"avcc", "generation"}


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (errors.ConfigurationError("bad wiring"), common.ExitCode.CONFIGURATION, "bad wiring"),
        (errors.SchemaError("no schema"), common.ExitCode.INCOMPATIBLE, "no schema"),
        (errors.StaleTransition(), common.ExitCode.CONFLICT, "A guarded state update"),
        (errors.RetryableError("db down"), common.ExitCode.UNAVAILABLE, "db down"),
        (errors.EnvelopeError("key", "missing"), common.ExitCode.USAGE, "envelope field 'key'"),
        (errors.PermanentError("nope"), common.ExitCode.FAILURE, "nope"),
        (errors.InvalidInput("model", "no such model"), common.ExitCode.USAGE, "no such model"),
        (errors.NotFound("no task t1"), common.ExitCode.NOT_FOUND, "no task t1"),
        (errors.Conflict("already done"), common.ExitCode.CONFLICT, "already done"),
        (ValueError("bad\nvalue"), common.ExitCode.USAGE, "bad value"),
        (
            FileNotFoundError(2, "No such file or directory", "/x/y"),
            common.ExitCode.NOT_FOUND,
            "No such file or directory: /x/y",
        ),
        (common.CommandError("gone", common.ExitCode.NOT_FOUND), common.ExitCode.NOT_FOUND, "gone"),
        (errors.HubError("weird [markup]"), common.ExitCode.FAILURE, "weird [markup]"),
    ],
)
def test_user_errors_become_one_line_and_a_named_exit_code(
    runner: CliRunner, exc: Exception, code: common.ExitCode, line: str
) -> None:
    sub = common.new_app("boom", "Raise things.")

    @sub.command("raise")
    def raise_it() -> None:
        raise exc

    @sub.command("other")
    def other() -> None:
        """Keeps ``boom`` a group."""

    result = runner.invoke(sub, ["raise"])

    assert result.exit_code == code
    (printed,) = result.stderr.splitlines()
    assert printed.startswith("error: ")
    assert line in printed
    assert "Traceback" not in result.output


def test_a_validation_error_is_one_line(runner: CliRunner) -> None:
    sub = common.new_app("boom", "Raise things.")

    @sub.command("raise")
    def raise_it() -> None:
        ThingSoldV1.model_validate({"thing_id": "t", "price": "x"})

    sub.command("other")(lambda: None)
    result = runner.invoke(sub, ["raise"])

    assert result.exit_code == common.ExitCode.USAGE
    assert result.stderr.splitlines() == [
        "error: invalid ThingSoldV1: price: Input should be a valid integer, unable to parse "
        "string as an integer"
    ]


def test_a_bug_prints_its_traceback_and_exits_internal(runner: CliRunner) -> None:
    sub = common.new_app("boom", "Raise things.")

    @sub.command("raise")
    def raise_it() -> None:
        raise RuntimeError("oops")

    sub.command("other")(lambda: None)
    result = runner.invoke(sub, ["raise"])

    assert result.exit_code == common.ExitCode.INTERNAL
    assert result.exit_code == 70
    assert "Traceback" in result.stderr
    assert result.stderr.splitlines()[-1] == "error: internal error: RuntimeError: oops"


def test_typer_exits_and_usage_errors_pass_through(runner: CliRunner) -> None:
    sub = common.new_app("boom", "Raise things.")

    @sub.command("exit")
    def exit_3() -> None:
        raise typer.Exit(3)

    @sub.command("bad")
    def bad() -> None:
        raise typer.BadParameter("not like that")

    assert runner.invoke(sub, ["exit"]).exit_code == 3
    result = runner.invoke(sub, ["bad"])
    assert result.exit_code == common.ExitCode.USAGE
    assert "not like that" in result.output
    assert runner.invoke(sub, ["no-such-command"]).exit_code == common.ExitCode.USAGE


async def _answer() -> int:
    return 42


def test_run_async_returns_the_coroutine_result() -> None:
    assert common.run_async(_answer()) == 42
