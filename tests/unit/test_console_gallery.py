"""The console's gallery gathering, without a browser: pure merging of pipeline sources.

``gallery_page`` only reads ``hub.pipelines`` and hands the hub to each source, so a plain
stand-in hub with declared pipelines is enough here.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from aigc_hub.bootstrap import Hub
from aigc_hub.interfaces.console.gallery_items import (
    format_cursor,
    gallery_page,
    parse_cursor,
)
from aigc_hub.pipeline import GalleryItem, GalleryQuery, Pipeline


def item(task_id: str, tenant_id: str, at: int) -> GalleryItem:
    return GalleryItem(
        task_id=task_id, tenant_id=tenant_id, title=task_id, status="SUCCEEDED", created_at=at
    )


def hub_with(*pipelines: Pipeline[Any]) -> Hub:
    return cast(Hub, SimpleNamespace(pipelines=list(pipelines)))


def careless(items: list[GalleryItem]) -> Pipeline[Any]:
    """A pipeline whose source ignores every filter of the query."""
    p: Pipeline[Any] = Pipeline("careless")

    @p.gallery
    async def everything(hub: Hub, query: GalleryQuery) -> list[GalleryItem]:
        return items

    return p


def broken() -> Pipeline[Any]:
    p: Pipeline[Any] = Pipeline("broken")

    @p.gallery
    async def fails(hub: Hub, query: GalleryQuery) -> list[GalleryItem]:
        raise RuntimeError("database gone")

    return p


async def test_items_merge_newest_first_and_a_page_has_a_cursor() -> None:
    items = [item("a", "t1", 1), item("c", "t1", 3), item("b", "t1", 3)]
    page = await gallery_page(hub_with(careless(items)), GalleryQuery(None, limit=2))
    assert [i.task_id for i in page.items] == ["c", "b"]
    assert page.next_before == (3, "b")
    last = await gallery_page(hub_with(careless(items)), GalleryQuery(None, limit=5))
    assert last.next_before is None


async def test_a_source_that_ignores_the_tenant_leaks_nothing() -> None:
    items = [item("mine", "t1", 1), item("theirs", "t2", 2)]
    page = await gallery_page(hub_with(careless(items)), GalleryQuery("t1"))
    assert [i.task_id for i in page.items] == ["mine"]
    one = await gallery_page(hub_with(careless(items)), GalleryQuery(None, task_id="theirs"))
    assert [i.task_id for i in one.items] == ["theirs"]


async def test_a_failing_source_is_reported_beside_the_others() -> None:
    page = await gallery_page(
        hub_with(broken(), careless([item("a", "t1", 1)])), GalleryQuery(None)
    )
    assert [i.task_id for i in page.items] == ["a"]
    assert page.errors == ["broken: RuntimeError"]


@pytest.mark.parametrize(
    ("text", "cursor"),
    [
        ("1700000000000.0191abcd-task", (1700000000000, "0191abcd-task")),
        ("12.a.b", (12, "a.b")),
        ("not-a-cursor", None),
        ("12.", None),
        (".abc", None),
        ("-1.abc", None),
        ("9" * 20 + ".abc", None),
    ],
)
def test_cursor_parsing(text: str, cursor: tuple[int, str] | None) -> None:
    assert parse_cursor(text) == cursor
    if cursor is not None:
        assert parse_cursor(format_cursor(cursor)) == cursor
