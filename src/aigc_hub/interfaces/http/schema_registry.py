"""The Confluent Schema Registry REST API, served by the hub under ``/schema-registry``.

confluent-kafka's ``SchemaRegistryClient``, ``AvroSerializer`` and ``AvroDeserializer`` work
against it unchanged: ``{"url": "http://<hub>/schema-registry", "basic.auth.user.info":
"any:<api key>"}``. Confluent's semantics (soft then permanent deletes, ``latest`` and -1,
``deleted`` flags, the error codes) are the registry's (:mod:`aigc_hub.schemas.avro_registry`);
the wire (media type, error shape, keys) is :mod:`.schema_registry_wire`'s. The routes stay
out of the hub's OpenAPI document: they answer in Confluent's shape, not problem+json, and
Confluent's API reference documents them (docs/schema-registry.md lists what is served).
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from aigc_hub.interfaces.http.admin import actor_of
from aigc_hub.interfaces.http.schema_registry_wire import (
    MEDIA_TYPE,
    ConfluentRoute,
    Reader,
    Registry,
    Writer,
    error,
    flag,
    json_body,
    ok,
    page,
)
from aigc_hub.schemas.avro_registry import errors, parsing
from aigc_hub.schemas.avro_registry.compatibility import Compatibility
from aigc_hub.schemas.avro_registry.records import parse_version

#: Where ``create_app`` mounts the router (clients' ``url`` ends with it).
PREFIX = "/schema-registry"

router = APIRouter(route_class=ConfluentRoute, include_in_schema=False)


def _parse(request: Request, body: Mapping[str, object]) -> parsing.ParsedSchema:
    """The schema of a registration, lookup or check body (``normalize`` from the query)."""
    for unkept in ("metadata", "ruleSet"):
        if body.get(unkept) is not None:
            raise errors.InvalidSchema(f"{unkept} is not supported by this registry")
    for assigned in ("id", "version"):
        if body.get(assigned) is not None:
            raise errors.OperationNotPermitted(
                assigned, f"the registry assigns the {assigned} (there is no IMPORT mode)"
            )
    return parsing.parse(
        body.get("schema"),
        schema_type=body.get("schemaType"),
        references=body.get("references"),
        normalize=flag(request, "normalize"),
    )


def _schema_id(text: str) -> int:
    """A schema id from the path; an id that is not a number names no schema (40403)."""
    try:
        return int(text)
    except ValueError:
        raise errors.SchemaNotFound() from None


@router.get("/")
async def root(_: Reader) -> JSONResponse:
    """Confluent's root answers an empty object (a liveness probe for clients)."""
    return ok({})


# --- subjects -----------------------------------------------------------------------------


@router.get("/subjects")
async def list_subjects(request: Request, _: Reader, registry: Registry) -> JSONResponse:
    """Subjects with a live version (``deleted``: also soft-deleted ones; ``deletedOnly``)."""
    found = await registry.subjects(
        deleted=flag(request, "deleted"),
        deleted_only=flag(request, "deletedOnly", "deleted_only"),
        prefix=request.query_params.get("subjectPrefix", ""),
    )
    return ok(page(request, found))


@router.get("/subjects/{subject}/versions")
async def list_versions(
    subject: str, request: Request, _: Reader, registry: Registry
) -> JSONResponse:
    """The subject's version numbers; 40401 when it has none."""
    found = await registry.versions(
        subject,
        deleted=flag(request, "deleted"),
        deleted_only=flag(request, "deletedOnly", "deleted_only"),
    )
    return ok(page(request, found))


@router.post("/subjects/{subject}/versions")
async def register(subject: str, request: Request, who: Writer, registry: Registry) -> JSONResponse:
    """Register a schema: ``{"id"}``, the same for the same schema; 409 when incompatible."""
    schema = _parse(request, await json_body(request))
    registered = await registry.register(subject, schema, actor=actor_of(who))
    return ok({"id": registered.schema_id})


@router.post("/subjects/{subject}")
async def lookup(subject: str, request: Request, _: Reader, registry: Registry) -> JSONResponse:
    """The version of the subject holding a schema; 40401 / 40403 when none does."""
    schema = _parse(request, await json_body(request))
    found = await registry.lookup(subject, schema, deleted=flag(request, "deleted"))
    return ok(found.to_wire())


@router.delete("/subjects/{subject}")
async def delete_subject(
    subject: str, request: Request, who: Writer, registry: Registry
) -> JSONResponse:
    """Soft-delete the subject (``permanent=true`` after that: remove it); its versions."""
    gone = await registry.delete_subject(
        subject, permanent=flag(request, "permanent"), actor=actor_of(who)
    )
    return ok(gone)


@router.get("/subjects/{subject}/versions/{version}")
async def get_version(
    subject: str, version: str, request: Request, _: Reader, registry: Registry
) -> JSONResponse:
    """One version (a number, ``latest`` or -1): subject, version, id, schema."""
    found = await registry.version(
        subject, parse_version(version), deleted=flag(request, "deleted")
    )
    return ok(found.to_wire())


@router.get("/subjects/{subject}/versions/{version}/schema")
async def get_version_schema(
    subject: str, version: str, request: Request, _: Reader, registry: Registry
) -> Response:
    """Only the schema text of one version, unescaped."""
    found = await registry.version(
        subject, parse_version(version), deleted=flag(request, "deleted")
    )
    return Response(found.schema, media_type=MEDIA_TYPE)


@router.delete("/subjects/{subject}/versions/{version}")
async def delete_version(
    subject: str, version: str, request: Request, who: Writer, registry: Registry
) -> JSONResponse:
    """Soft-delete one version (``permanent=true`` after that: remove it); its number."""
    gone = await registry.delete_version(
        subject, parse_version(version), permanent=flag(request, "permanent"), actor=actor_of(who)
    )
    return ok(gone)


# --- schemas by id ------------------------------------------------------------------------


@router.get("/schemas/types")
async def schema_types(_: Reader) -> JSONResponse:
    """The schema types kept: AVRO only, for now."""
    return ok(list(parsing.SCHEMA_TYPES))


@router.get("/schemas/ids/{schema_id}")
async def get_schema(schema_id: str, _: Reader, registry: Registry) -> JSONResponse:
    """The schema with this id (``?subject=`` is accepted and changes nothing: ids are
    registry-wide here); 40403 when no version holds it any more."""
    found = await registry.schema(_schema_id(schema_id))
    body: dict[str, object] = {"schema": found.schema}
    if found.schema_type != parsing.AVRO:
        body["schemaType"] = found.schema_type
    return ok(body)


@router.get("/schemas/ids/{schema_id}/schema")
async def get_schema_text(schema_id: str, _: Reader, registry: Registry) -> Response:
    """Only the schema text of this id."""
    found = await registry.schema(_schema_id(schema_id))
    return Response(found.schema, media_type=MEDIA_TYPE)


@router.get("/schemas/ids/{schema_id}/versions")
async def get_schema_versions(
    schema_id: str, request: Request, _: Reader, registry: Registry
) -> JSONResponse:
    """The subject-version pairs holding this id."""
    pairs = await registry.uses(_schema_id(schema_id), deleted=flag(request, "deleted"))
    return ok(page(request, [{"subject": s, "version": v} for s, v in pairs]))


@router.get("/schemas/ids/{schema_id}/subjects")
async def get_schema_subjects(
    schema_id: str, request: Request, _: Reader, registry: Registry
) -> JSONResponse:
    """The subjects holding this id."""
    pairs = await registry.uses(_schema_id(schema_id), deleted=flag(request, "deleted"))
    return ok(page(request, sorted({s for s, _ in pairs})))


# --- compatibility ------------------------------------------------------------------------


def _verdict(request: Request, found: list[str]) -> JSONResponse:
    body: dict[str, object] = {"is_compatible": not found}
    if flag(request, "verbose"):
        body["messages"] = found
    return ok(body)


@router.post("/compatibility/subjects/{subject}/versions/{version}")
async def check_version(
    subject: str, version: str, request: Request, _: Reader, registry: Registry
) -> JSONResponse:
    """Would a schema pass the subject's level against this version (``verbose``: why not)?"""
    schema = _parse(request, await json_body(request))
    found = await registry.check(subject, schema, parse_version(version))
    return _verdict(request, found)


@router.post("/compatibility/subjects/{subject}/versions")
async def check_versions(
    subject: str, request: Request, _: Reader, registry: Registry
) -> JSONResponse:
    """Would a schema pass the subject's level against every version the level names?"""
    schema = _parse(request, await json_body(request))
    return _verdict(request, await registry.check_all(subject, schema))


# --- config -------------------------------------------------------------------------------


async def _level(request: Request) -> Compatibility:
    body = await json_body(request)
    return Compatibility.parse(body.get("compatibility", body.get("compatibilityLevel")))


@router.get("/config")
async def get_config(_: Reader, registry: Registry) -> JSONResponse:
    """The registry's compatibility level (BACKWARD unless set)."""
    return ok({"compatibilityLevel": (await registry.levels.get()).value})


@router.put("/config")
async def put_config(request: Request, who: Writer, registry: Registry) -> JSONResponse:
    """Set the registry's level: ``{"compatibility": "FULL"}``, echoed back."""
    level = await registry.levels.set(None, await _level(request), actor=actor_of(who))
    return ok({"compatibility": level.value})


@router.get("/config/{subject}")
async def get_subject_config(
    subject: str, request: Request, _: Reader, registry: Registry
) -> JSONResponse:
    """The subject's own level; 40408 without one, unless ``defaultToGlobal=true``."""
    level = await registry.levels.get(subject, default_to_global=flag(request, "defaultToGlobal"))
    return ok({"compatibilityLevel": level.value})


@router.put("/config/{subject}")
async def put_subject_config(
    subject: str, request: Request, who: Writer, registry: Registry
) -> JSONResponse:
    """Give the subject its own level (it may have no version yet), echoed back."""
    level = await registry.levels.set(subject, await _level(request), actor=actor_of(who))
    return ok({"compatibility": level.value})


@router.delete("/config/{subject}")
async def delete_subject_config(subject: str, who: Writer, registry: Registry) -> JSONResponse:
    """Drop the subject's own level (the registry's applies); the level it had."""
    level = await registry.levels.delete(subject, actor=actor_of(who))
    return ok({"compatibilityLevel": level.value})


@router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE"])
async def unknown(path: str) -> JSONResponse:
    """Any other path under the prefix: Confluent's 404 (in its shape, not problem+json)."""
    return error(404, 404, f"HTTP 404 Not Found: /{path}")
