"""What a pipeline declares for the hub's tools: env prefix, CLI group, ``up`` hooks."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import typer
from pydantic_settings import BaseSettings, SettingsConfigDict
from typer.testing import CliRunner

from aigc_hub import plugins
from aigc_hub.bootstrap import Hub
from aigc_hub.cli import pipelines as pipeline_clis
from aigc_hub.cli.main import app as root_app
from aigc_hub.cli.run import _up_hooks
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.hub_config import HubConfig
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipeline import Pipeline, UpContext, UpHook
from aigc_hub.pipelines.generation.pipeline import pipeline as generation
from aigc_hub.pipelines.generation.settings import GenerationSettings
from aigc_hub.settings import Settings
from aigc_hub.store import engine as store_engine

HERE = __name__


class RightSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AIGC_HUB_DECL_")

    colour: str = "red"


class WrongSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DECL_")


well_declared = Pipeline("decl", settings=RightSettings, cli=f"{HERE}:decl_cli")
badly_prefixed = Pipeline("decl_wrong", settings=WrongSettings)
clashing = Pipeline("db_clash", alias="db", cli=f"{HERE}:decl_cli")
broken_cli = Pipeline("decl_broken", cli="no_such_module_here:app")

decl_cli = typer.Typer(help="The decl pipeline's commands.")


@decl_cli.command("colour")
def colour() -> None:
    """Print the configured colour."""
    typer.echo(RightSettings().colour)


def test_a_settings_class_must_read_the_pipelines_env_prefix() -> None:
    assert plugins.load(f"{HERE}:well_declared") == [well_declared]
    with pytest.raises(ConfigurationError) as caught:
        plugins.load(f"{HERE}:badly_prefixed")
    assert "reads env prefix 'DECL_'" in str(caught.value)
    assert "needs 'AIGC_HUB_DECL_WRONG_'" in str(caught.value)


def test_generation_keeps_its_documented_gen_prefix_and_cli_name() -> None:
    assert generation.short_name == "gen" and generation.env_prefix == "AIGC_HUB_GEN_"
    assert generation.settings is GenerationSettings
    assert GenerationSettings.model_config.get("env_prefix") == generation.env_prefix
    mounted = {group.name: group.typer_instance for group in root_app.registered_groups}
    assert mounted["gen"] is not None and mounted["gen"].info.name == "gen"


@pytest.mark.parametrize(
    ("name", "alias"), [("fine", "Gen"), ("fine", "my-pipe"), ("fine", "1st"), ("Bad Name", "")]
)
def test_a_short_name_that_cannot_name_a_command_and_a_prefix_is_refused(
    name: str, alias: str
) -> None:
    with pytest.raises(ValueError, match="must match"):
        Pipeline(name, alias=alias)


def test_each_loadable_pipelines_cli_is_mounted_under_its_short_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    selected = [f"{HERE}:{name}" for name in ("well_declared", "clashing", "broken_cli")]
    monkeypatch.setenv(plugins.SETTING, ",".join(selected))
    app = typer.Typer()

    @app.command("db")
    def db() -> None:
        """A built-in command the clashing pipeline must not replace."""

    pipeline_clis.mount(app)

    names = [group.name for group in app.registered_groups]
    assert "decl" in names and "gen" in names
    assert "db" not in names  # the built-in keeps its name
    assert "decl_broken" not in names  # unloadable CLI: no group, no crash
    result = CliRunner().invoke(app, ["decl", "colour"], env={"AIGC_HUB_DECL_COLOUR": "blue"})
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "blue"


async def test_up_enters_every_pipelines_hooks_and_leaves_them_when_it_stops(
    tmp_path: Path,
) -> None:
    calls: list[str] = []
    seen: list[UpContext] = []
    first, second = Pipeline("hooked_a"), Pipeline("hooked_b")

    def hook(label: str) -> UpHook:
        @contextlib.asynccontextmanager
        async def run(_hub: Hub, up: UpContext) -> AsyncIterator[None]:
            seen.append(up)
            calls.append(f"start {label}")
            yield
            calls.append(f"stop {label}")

        return run

    first.up_hook(hook("a"))
    second.up_hook(hook("b"))
    engine = store_engine.create_engine(f"sqlite:///{tmp_path / 'h.db'}")
    hub = Hub(HubConfig(engine=engine, broker=MemoryBroker()), [first, second])
    settings = Settings(data_dir=tmp_path, api_host="127.0.0.1", api_port=8123)
    try:
        async with _up_hooks(hub, settings):
            assert calls == ["start a", "start b"]
        assert calls == ["start a", "start b", "stop b", "stop a"]
        assert {(up.api_url, up.data_dir) for up in seen} == {("http://127.0.0.1:8123", tmp_path)}
    finally:
        await hub.close()
