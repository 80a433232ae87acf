"""The Avro schema of ``documents-uploaded`` (seed 003 §9, v2.1), and how a record in it
becomes the pipeline's event: producers outside the hub may publish uploads as Avro with
confluent-kafka's ``AvroSerializer`` against the hub's schema registry."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from aigc_hub.schemas.avro_envelopes import AvroBinding

from .. import events

#: seed 003 §9's ``document-uploaded.avsc`` as written (v2.1: ``aiAnalysisRequired``).
DOCUMENT_UPLOADED: dict[str, Any] = json.loads(
    resources.files(__package__).joinpath("document-uploaded.avsc").read_text(encoding="utf-8")
)

UPLOADED = AvroBinding(
    topic=events.UPLOADED_TOPIC,
    event_type=events.DOCUMENT_UPLOADED,
    schema_version=1,
    reader_schema=DOCUMENT_UPLOADED,
    key_field="documentId",
    id_field="eventId",
    timestamp_field="eventTimestamp",
    source=events.API_SVC,
)
