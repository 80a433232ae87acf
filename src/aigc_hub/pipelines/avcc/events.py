"""avcc's topics (seed 000 §9.1) and its event payloads (§9.2).

Every event on ``topic.avcc.*``, ``topic.review.*`` and ``topic.chain.*`` is keyed by
``avcc_record_id`` (§9.3.2): one work's events share a partition and are handled in order.
The seed's envelope (``event_id``, ``timestamp``, ``source``, ``payload``) is the backbone's
:class:`~aigc_hub.core.envelope.Envelope`, whose ``source`` names the seed's services
(``code-svc``, ``review-svc``, ``chain-svc``). The retry stage (the seed's
``topic.system.retry``) and ``topic.system.dlq`` are the backbone's: delayed redelivery from
its ``redeliveries`` table, and the dead letters of every pipeline.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

import pydantic

from aigc_hub.messaging.catalog import DAY_MS, TopicSpec
from aigc_hub.pipeline import PipelineBase

APPLY_TOPIC = "topic.avcc.apply.created"
REVIEW_TOPIC = "topic.review.task.finished"
PENDING_TOPIC = "topic.chain.tx.pending"
CONFIRMED_TOPIC = "topic.chain.tx.confirmed"
#: Ours (the seed has no topic for it): an issued code to embed into the work as C2PA.
ISSUED_TOPIC = "topic.avcc.code.issued"
#: Playback events from platform nodes (§9.2.4): the telemetry road, at-most-once.
PLAYBACK_TOPIC = "topic.playback.event"
#: Ours: purchases for settlement-svc, through the outbox (the reliable road), keyed by code.
PURCHASE_TOPIC = "topic.avcc.purchase.recorded"

APPLY_CREATED = "avcc.apply.created"
REVIEW_FINISHED = "review.task.finished"
TX_PENDING = "chain.tx.pending"
TX_CONFIRMED = "chain.tx.confirmed"
CODE_ISSUED = "avcc.code.issued"
PURCHASE_RECORDED = "avcc.purchase.recorded"

CODE_SVC, REVIEW_SVC, CHAIN_SVC = "code-svc", "review-svc", "chain-svc"
GATEWAY_SVC, SETTLEMENT_SVC = "gateway-svc", "settlement-svc"

TOPICS = (
    TopicSpec(APPLY_TOPIC, 6, 7 * DAY_MS, pipeline="avcc", note="seed 000 §9.1"),
    TopicSpec(REVIEW_TOPIC, 12, 7 * DAY_MS, pipeline="avcc", note="seed 000 §9.1"),
    TopicSpec(PENDING_TOPIC, 6, 7 * DAY_MS, pipeline="avcc", note="seed 000 §9.1"),
    TopicSpec(CONFIRMED_TOPIC, 6, 30 * DAY_MS, pipeline="avcc", note="seed 000 §9.1"),
    TopicSpec(
        ISSUED_TOPIC,
        6,
        7 * DAY_MS,
        pipeline="avcc",
        note="not in the seed: issued codes to embed as C2PA; like the seed's avcc topics",
    ),
    TopicSpec(
        PLAYBACK_TOPIC,
        24,
        3 * DAY_MS,
        profile="telemetry",
        pipeline="avcc",
        note="seed 000 §9.1; at-most-once road (§9.3.1), keyed by avcc_code",
    ),
    TopicSpec(
        PURCHASE_TOPIC,
        6,
        7 * DAY_MS,
        pipeline="avcc",
        note="not in the seed: purchases settlement-svc books, from the outbox; keyed by code",
    ),
)


class AiToolInfo(pydantic.BaseModel):
    """The AI tool declaration of a work (§9.2.1 ``ai_tool_info``)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    model_name: str = pydantic.Field(min_length=1, max_length=200)
    model_version: str = pydantic.Field(min_length=1, max_length=100)


class ApplyCreated(pydantic.BaseModel):
    """§9.2.1: an application passed its precheck; review it."""

    request_id: str
    avcc_record_id: int
    content_url: str
    content_hash: str
    ai_tool_info: AiToolInfo
    priority: int


Decision = Literal["approved", "rejected", "need_human"]
Level = Literal["P", "G", "O"]


class ReviewFinished(pydantic.BaseModel):
    """§9.2.2: the review (AI or human) reached a decision."""

    request_id: str
    avcc_record_id: int
    review_report_id: int
    decision: Decision
    final_level: Level | None
    overall_score: float
    report_hash: str


ChainType = Literal["copyright_main", "settlement"]


class TxPending(pydantic.BaseModel):
    """A work to notarize (the seed's "准备上链" event; its fields are ours, §9.1 names it)."""

    avcc_record_id: int
    chain_type: ChainType
    final_level: Level
    #: The statement notarized, as canonical JSON (see ``statements.py``).
    statement: str


class TxConfirmed(pydantic.BaseModel):
    """§9.2.3: the chain confirmed the work's notarization; ``proof`` is ours (the receipt
    anyone can check offline)."""

    avcc_record_id: int
    chain_type: ChainType
    tx_hash: str
    block_height: int
    status: Literal["success", "failed"]
    crd_address: str
    proof: dict[str, object] = pydantic.Field(default_factory=dict)


class TxPendingV2(pydantic.BaseModel):
    """v2 of ``chain.tx.pending``: a work *or a settlement batch* to notarize (§9.1 "存证、
    分账指令"). A work has ``avcc_record_id`` and ``final_level``; a batch (``chain_type=
    settlement``) has ``settlement_batch_id`` and neither of them."""

    avcc_record_id: int | None
    chain_type: ChainType
    final_level: Level | None
    statement: str
    settlement_batch_id: int | None = None


class TxConfirmedV2(pydantic.BaseModel):
    """v2 of ``chain.tx.confirmed`` (§9.2.3, whose ``chain_type`` is ``copyright_main`` or
    ``settlement``): a settlement batch's confirmation has ``settlement_batch_id`` instead of
    ``avcc_record_id``."""

    avcc_record_id: int | None
    chain_type: ChainType
    tx_hash: str
    block_height: int
    status: Literal["success", "failed"]
    crd_address: str
    proof: dict[str, object] = pydantic.Field(default_factory=dict)
    settlement_batch_id: int | None = None


#: The schema version the chain events are published at from now on (v1 is still read).
CHAIN_EVENTS_VERSION = 2


def pending_v2(payload: object) -> TxPendingV2:
    """A decoded ``chain.tx.pending`` of either version, read as v2 (v2 only adds)."""
    if isinstance(payload, TxPendingV2):
        return payload
    if isinstance(payload, TxPending):
        return TxPendingV2.model_validate(payload.model_dump())
    raise TypeError(f"payload is {type(payload).__name__}, not a chain.tx.pending")


def confirmed_v2(payload: object) -> TxConfirmedV2:
    """A decoded ``chain.tx.confirmed`` of either version, read as v2 (v2 only adds)."""
    if isinstance(payload, TxConfirmedV2):
        return payload
    if isinstance(payload, TxConfirmed):
        return TxConfirmedV2.model_validate(payload.model_dump())
    raise TypeError(f"payload is {type(payload).__name__}, not a chain.tx.confirmed")


class CodeIssued(pydantic.BaseModel):
    """The code was issued: embed it (with the level and the proof) into the work."""

    avcc_record_id: int
    avcc_code: str


EventType = Literal["play", "complete", "purchase"]
#: A code as §9.2.4 shows it (``MA.156.10005.8361/…``); its check character is checked apart.
CODE_PATTERN = r"^MA\.[0-9]{3}\.[0-9]{3,8}\.[0-9]{2,8}/[0-9A-Z]{2,14}$"


class PlaybackPayload(pydantic.BaseModel):
    """§9.2.4: one play, completion or purchase of a coded work on a platform node."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    avcc_code: str = pydantic.Field(pattern=CODE_PATTERN)
    platform_node: str = pydantic.Field(pattern=r"^[0-9]{2,8}$")
    user_hash: str = pydantic.Field(min_length=1, max_length=100)
    event_type: EventType
    duration_sec: int = pydantic.Field(ge=0, le=7 * 86_400)
    #: CNY with two decimals; more than 0 only on a purchase.
    revenue_cny: Decimal = pydantic.Field(ge=0, le=1_000_000, max_digits=9, decimal_places=2)


class PurchaseRecorded(pydantic.BaseModel):
    """A purchase the gateway accepted, for settlement-svc to book (amounts in fen)."""

    #: The node's ``event_id`` of the purchase: the ledger's business key.
    purchase_id: str
    avcc_code: str
    platform_node: str
    user_hash: str
    revenue_fen: int = pydantic.Field(ge=0)
    #: The purchase's own timestamp (epoch ms): the period it belongs to.
    occurred_at: int


def register(pipeline: PipelineBase) -> None:
    """Declare the topics and the event payloads with the topic each is routed to."""
    for spec in TOPICS:
        pipeline.topic(spec)
    pipeline.event(APPLY_CREATED, topic=APPLY_TOPIC)(ApplyCreated)
    pipeline.event(REVIEW_FINISHED, topic=REVIEW_TOPIC)(ReviewFinished)
    pipeline.event(TX_PENDING, topic=PENDING_TOPIC)(TxPending)
    pipeline.event(TX_CONFIRMED, topic=CONFIRMED_TOPIC)(TxConfirmed)
    pipeline.event(TX_PENDING, 2, topic=PENDING_TOPIC)(TxPendingV2)
    pipeline.event(TX_CONFIRMED, 2, topic=CONFIRMED_TOPIC)(TxConfirmedV2)
    pipeline.event(CODE_ISSUED, topic=ISSUED_TOPIC)(CodeIssued)
    pipeline.event(PURCHASE_RECORDED, topic=PURCHASE_TOPIC)(PurchaseRecorded)
