"""Seed 003's DLQ API (``/api/admin/dlq``) over real HTTP (uvicorn) on PostgreSQL.

A pipeline named ``documents`` (built here: the real one is not installed yet) runs its
consumer group until it has dead-lettered real records: bad data (``PermanentError``), an
overloaded service (``RetryableError``, after its retries), a safety refusal and bytes that
are no envelope; another pipeline dead-letters one record too. Then, through the API: the
seed's page of the documents pipeline's letters with their triage, paging and the topic
filter; a retry that the group handles again, a dismissal, both in the audit log with the
admin's actor; and every refusal (401, 403, 404, 409, 422).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pydantic
import pytest

from aigc_hub import tenancy
from aigc_hub.bootstrap import Hub
from aigc_hub.core.envelope import Envelope
from aigc_hub.core.errors import PermanentError, RetryableError
from aigc_hub.core.retry import RetryPolicy
from aigc_hub.hub_config import HubConfig
from aigc_hub.interfaces.http.app import create_app
from aigc_hub.messaging.base import OutgoingMessage
from aigc_hub.messaging.catalog import TopicSpec
from aigc_hub.messaging.memory import MemoryBroker
from aigc_hub.pipeline import Pipeline
from aigc_hub.pipelines.documents import dlq_http
from aigc_hub.reliability.dlq import DeadLetterFilter, DeadLetterStatus
from aigc_hub.runtime.context import HandlerContext
from aigc_hub.store import engine as store_engine
from tests.support import effects as fx
from tests.support.hubs import wait_until
from tests.support.served import serve

pytestmark = pytest.mark.postgres

UPLOADED, CHUNKS = "documents-uploaded", "chunks-created"
UPLOAD_EVENT, CHUNK_EVENT = "documents.test.uploaded", "documents.test.chunked"
GROUP = "chunking-workers"
CHUNK_KEYS = ("bad-4", "flaky-2")
API = "/api/admin/dlq"
PROBLEM = "application/problem+json"

#: One quick retry, then no delayed redelivery: a transient failure dead-letters in
#: milliseconds, after 2 attempts, instead of the seeds' hours.
QUICK = RetryPolicy(base=0.01, cap=0.01, max_retries=1, jitter=0.0)
NO_REDELIVERY = RetryPolicy(max_retries=0)

#: Dead-lettered by the documents group: key -> (topic, error class, attempts, triage kind).
EXPECTED = {
    "bad-1": (UPLOADED, "PermanentError", 1, "bad_data"),
    "bad-2": (UPLOADED, "PermanentError", 1, "bad_data"),
    "bad-3": (UPLOADED, "PermanentError", 1, "bad_data"),
    "flaky-1": (UPLOADED, "RetryableError", 2, "transient"),
    "nsfw-1": (UPLOADED, "ContentRefused", 1, "content_refused"),
    "garbage": (UPLOADED, "EnvelopeError", 1, "bad_data"),
    "bad-4": (CHUNKS, "PermanentError", 1, "bad_data"),
    "flaky-2": (CHUNKS, "RetryableError", 2, "transient"),
}


class ContentRefused(PermanentError):
    """A safety check refused the content (named like the pipelines' refusals)."""


class Work(pydantic.BaseModel):
    """The test events' payload."""

    n: int


@dataclass
class Behaviour:
    """``flaky-*`` keys fail while the service is down; handled keys set their event."""

    down: bool = True
    handled: dict[str, asyncio.Event] = field(default_factory=dict)

    def done(self, key: str) -> asyncio.Event:
        return self.handled.setdefault(key, asyncio.Event())


def documents_pipeline(b: Behaviour) -> Pipeline:
    p = Pipeline("documents")
    for topic in (UPLOADED, CHUNKS):
        p.topic(TopicSpec(topic, 3, 86_400_000, pipeline="documents"))
    p.event(UPLOAD_EVENT, 1, topic=UPLOADED)(Work)
    p.event(CHUNK_EVENT, 1, topic=CHUNKS)(Work)
    p.root_routers.append(dlq_http.router)

    @p.handler(GROUP, [UPLOADED, CHUNKS])
    async def chunk(env: Envelope, ctx: HandlerContext) -> list[Envelope]:
        if env.key.startswith("bad"):
            raise PermanentError(f"malformed document {env.key}")
        if env.key.startswith("nsfw"):
            raise ContentRefused(f"the safety check refused {env.key}")
        if env.key.startswith("flaky") and b.down:
            raise RetryableError(f"the embedding service is overloaded ({env.key})")
        b.done(env.key).set()
        return []

    return p


@dataclass
class Served:
    """A running hub with dead letters, its API's URL and keys."""

    hub: Hub
    http: httpx.AsyncClient
    behaviour: Behaviour
    admin: dict[str, str]
    actor: str
    tenant: dict[str, str]
    ids: dict[str, int]
    other_id: int


@pytest.fixture
async def served(pg_url: str) -> AsyncIterator[Served]:
    b = Behaviour()
    engine = store_engine.create_engine(pg_url)
    await fx.create_tables(engine)
    other = fx.make_pipeline(fx.Behaviour(permanent={"other"}))
    hub = Hub(
        HubConfig(engine=engine, broker=MemoryBroker(), in_process=QUICK, delayed=NO_REDELIVERY),
        [documents_pipeline(b), other],
    )
    await hub.start()
    stop = asyncio.Event()
    run = asyncio.create_task(hub.run(stop))
    try:
        await _make_dead_letters(hub, b)
        async with (
            serve(create_app(hub)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            admin_key = await tenancy.create_admin_key(hub.engine)
            principal = await tenancy.authenticate(hub.engine, admin_key)
            assert principal is not None
            _, tenant_key = await tenancy.create_tenant(hub.engine, "acme")
            letters = await hub.dlq.list(DeadLetterFilter(status=None), limit=100)
            yield Served(
                hub=hub,
                http=http,
                behaviour=b,
                admin=bearer(admin_key),
                actor=f"admin:{principal.key_id}",
                tenant=bearer(tenant_key),
                ids={x.key or "": x.id for x in letters if x.pipeline == "documents"},
                other_id=next(x.id for x in letters if x.pipeline == "effects"),
            )
    finally:
        stop.set()
        await run
        await hub.close()


async def _make_dead_letters(hub: Hub, b: Behaviour) -> None:
    """Publish the records, then wait until all 9 are dead letters (8 documents', 1 other)
    and the good one went through."""
    uploads = ["bad-1", "bad-2", "bad-3", "flaky-1", "nsfw-1", "ok-1"]
    envelopes = [
        Envelope.new(UPLOAD_EVENT, {"n": n}, key=k, source="t") for n, k in enumerate(uploads)
    ]
    envelopes += [Envelope.new(CHUNK_EVENT, {"n": 9}, key=k, source="t") for k in CHUNK_KEYS]
    async with hub.transaction() as conn:
        await hub.outbox.add(conn, [*envelopes, fx.request("other", 1)])
    await hub.broker.publish([OutgoingMessage(UPLOADED, "garbage", b"\xffnot an envelope")])

    async def all_dead() -> bool:
        return await hub.dlq.count(DeadLetterFilter(status=None)) == 9

    await wait_until(all_dead, timeout=30)
    await asyncio.wait_for(b.done("ok-1").wait(), 30)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


async def page(s: Served, **params: Any) -> dict[str, Any]:
    r = await s.http.get(f"{API}/messages", params=params, headers=s.admin)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def audit(s: Served, action: str) -> list[tuple[str, str, str]]:
    r = await s.http.get("/admin/audit", params={"action": action}, headers=s.admin)
    return [(e["target"], e["result"], e["actor"]) for e in r.json()["items"]]


async def test_every_route_needs_an_admin_key(served: Served) -> None:
    routes = [
        ("GET", f"{API}/messages", None),
        ("POST", f"{API}/messages/{served.ids['bad-1']}/retry", None),
        ("POST", f"{API}/messages/dismiss", {"recordIds": [served.ids["bad-1"]]}),
    ]
    for method, path, body in routes:
        assert_problem(await served.http.request(method, path, json=body), 401)
        as_tenant = await served.http.request(method, path, json=body, headers=served.tenant)
        assert_problem(as_tenant, 403)
    # nothing was retried or dismissed
    assert await served.hub.dlq.count(DeadLetterFilter(status=DeadLetterStatus.PENDING)) == 9


async def test_lists_the_documents_letters_in_the_seeds_page_with_their_triage(
    served: Served,
) -> None:
    body = await page(served)
    assert (body["page"], body["size"], body["totalElements"], body["totalPages"]) == (0, 20, 8, 1)
    listed = [x["id"] for x in body["content"]]
    assert listed == sorted(served.ids.values(), reverse=True)  # newest first, no other pipeline's
    assert served.other_id not in listed
    records = {x["key"]: x for x in body["content"]}
    for key, (topic, error_class, attempts, kind) in EXPECTED.items():
        record = records[key]
        assert (record["topic"], record["errorClass"], record["attempts"]) == (
            topic,
            error_class,
            attempts,
        ), key
        assert record["status"] == "pending_review" and record["consumer"] == GROUP
        assert record["triage"]["kind"] == kind
        assert record["triage"]["retryWorthy"] is (kind == "transient")
        assert record["triage"]["why"].startswith(error_class)
        assert isinstance(record["originalOffset"], int) and isinstance(record["partition"], int)
        assert record["receivedAt"] > 1_600_000_000_000
    bad = records["bad-1"]
    assert bad["exceptionMessage"] == "malformed document bad-1"
    assert json.loads(bad["payload"])["payload"] == {"n": 0}  # the record's value, as text
    assert records["garbage"]["payload"] == "\ufffdnot an envelope"
    assert "overloaded" in records["flaky-1"]["exceptionMessage"]

    # pages of 3: 3 + 3 + 2, then an empty page past the end
    pages = [await page(served, page=n, size=3) for n in range(4)]
    assert [len(p["content"]) for p in pages] == [3, 3, 2, 0]
    assert {(p["totalElements"], p["totalPages"]) for p in pages} == {(8, 3)}
    assert [x["id"] for p in pages for x in p["content"]] == listed

    chunks = await page(served, topic=CHUNKS)
    assert sorted(x["key"] for x in chunks["content"]) == ["bad-4", "flaky-2"]
    assert chunks["totalElements"] == 2
    nowhere = await page(served, topic="no-such-topic")
    assert (nowhere["content"], nowhere["totalElements"], nowhere["totalPages"]) == ([], 0, 0)
    assert (await page(served, topic=""))["totalElements"] == 8
    for params in ({"size": 0}, {"size": 201}, {"page": -1}, {"page": "x"}):
        bad_params = await served.http.get(f"{API}/messages", params=params, headers=served.admin)
        assert_problem(bad_params, 422)

    # the backbone's admin API shows the same triage
    r = await served.http.get(
        "/admin/dlq",
        params={"pipeline": "documents", "status": "any", "limit": 50},
        headers=served.admin,
    )
    admin_items = {x["id"]: x["triage"] for x in r.json()["items"]}
    assert admin_items == {
        x["id"]: {
            "kind": x["triage"]["kind"],
            "retry_worthy": x["triage"]["retryWorthy"],
            "why": x["triage"]["why"],
        }
        for x in body["content"]
    }


async def test_retry_is_handled_again_and_audited_once(served: Served) -> None:
    flaky = served.ids["flaky-1"]
    served.behaviour.down = False  # the service is back
    r = await served.http.post(f"{API}/messages/{flaky}/retry", headers=served.admin)
    assert r.status_code == 200, r.text
    assert r.json() == {"message": f"消息已重新投递到: {UPLOADED}", "topic": UPLOADED}
    await asyncio.wait_for(served.behaviour.done("flaky-1").wait(), 30)  # handled again
    records = {x["id"]: x for x in (await page(served))["content"]}
    assert records[flaky]["status"] == "retried"
    assert records[served.ids["flaky-2"]]["status"] == "pending_review"  # only the one asked

    again = assert_problem(
        await served.http.post(f"{API}/messages/{flaky}/retry", headers=served.admin), 409
    )
    assert "replayed" in again["detail"]
    garbage = served.ids["garbage"]
    not_envelope = assert_problem(
        await served.http.post(f"{API}/messages/{garbage}/retry", headers=served.admin), 409
    )
    assert "envelope" in not_envelope["detail"]
    for unknown in (served.other_id, 999_999):  # another pipeline's letter, or none at all
        r = await served.http.post(f"{API}/messages/{unknown}/retry", headers=served.admin)
        assert assert_problem(r, 404)["detail"] == "no such DLQ record"
    assert_problem(await served.http.post(f"{API}/messages/x/retry", headers=served.admin), 422)
    assert (await served.hub.dlq.get(served.other_id)).status is DeadLetterStatus.PENDING

    # the backbone's audit: the replay, then the two refusals; nothing for the 404s
    assert await audit(served, "dlq.replay") == [
        (str(garbage), "refused", served.actor),
        (str(flaky), "refused", served.actor),
        (str(flaky), "ok", served.actor),
    ]


async def test_dismiss_marks_only_the_documents_pending_letters_and_audits_them(
    served: Served,
) -> None:
    one, two = served.ids["bad-1"], served.ids["bad-2"]
    asked = [one, two, served.other_id, 999_999, one]
    r = await served.http.post(
        f"{API}/messages/dismiss", json={"recordIds": asked}, headers=served.admin
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"message": "已忽略 2 条消息", "dismissed": 2}
    records = {x["id"]: x["status"] for x in (await page(served))["content"]}
    assert records[one] == records[two] == "dismissed"
    assert records[served.ids["bad-3"]] == "pending_review"
    assert (await served.hub.dlq.get(served.other_id)).status is DeadLetterStatus.PENDING
    assert sorted(await audit(served, "dlq.dismiss")) == sorted(
        [(str(one), "ok", served.actor), (str(two), "ok", served.actor)]
    )

    # a dismissed letter is not pending any more: not dismissed again, not retried
    r = await served.http.post(
        f"{API}/messages/dismiss", json={"recordIds": [one]}, headers=served.admin
    )
    assert r.json() == {"message": "已忽略 0 条消息", "dismissed": 0}
    assert (await audit(served, "dlq.dismiss"))[0] == (str(one), "not-pending", served.actor)
    assert_problem(await served.http.post(f"{API}/messages/{one}/retry", headers=served.admin), 409)
    empty = await served.http.post(
        f"{API}/messages/dismiss", json={"recordIds": []}, headers=served.admin
    )
    assert empty.json() == {"message": "已忽略 0 条消息", "dismissed": 0}
    for body in ({}, {"recordIds": [0]}, {"recordIds": ["x"]}, {"recordIds": [1] * 1001}):
        r = await served.http.post(f"{API}/messages/dismiss", json=body, headers=served.admin)
        assert_problem(r, 422)
