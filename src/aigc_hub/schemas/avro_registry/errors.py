"""The registry's errors, each with the Confluent ``error_code`` clients read.

::

    NotFound
    ├── SubjectNotFound          40401  no (live) version under the subject
    ├── VersionNotFound          40402
    ├── SchemaNotFound           40403  no such id, or not under the subject
    ├── SubjectSoftDeleted       40404  soft-deleting it again
    ├── SubjectNotSoftDeleted    40405  a permanent delete must follow a soft one
    ├── VersionSoftDeleted       40406
    ├── VersionNotSoftDeleted    40407
    └── SubjectConfigNotFound    40408  no subject-level compatibility
    Conflict
    └── IncompatibleSchema       409    refused by the subject's compatibility level
    InvalidInput
    ├── InvalidSchema            42201  not Avro, unparseable, or using what we do not keep
    ├── InvalidVersion           42202  not ``latest``, -1 or 1..2^31-1
    ├── InvalidCompatibility     42203
    ├── OperationNotPermitted    42205  naming the id or version to give (IMPORT mode)
    └── InvalidSubject           42208  empty, too long, or with control characters

The HTTP status is the code's first three digits (40401 -> 404, 409 -> 409), as Confluent
answers; the kinds above keep the CLI exit codes and the hub's problem answers right too.
"""

from __future__ import annotations

from typing import ClassVar

from aigc_hub.core import errors


class RegistryError(errors.HubError):
    """A schema registry error with a Confluent error code."""

    error_code: ClassVar[int] = 50001

    @property
    def http_status(self) -> int:
        """The HTTP status Confluent answers this error with."""
        code = self.error_code
        return code // 100 if code >= 1000 else code


class SubjectNotFound(RegistryError, errors.NotFound):
    """The subject has no version."""

    error_code = 40401

    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' not found.")


class VersionNotFound(RegistryError, errors.NotFound):
    """The subject has no such version."""

    error_code = 40402

    def __init__(self, version: int | str) -> None:
        super().__init__(f"Version {version} not found.")


class SchemaNotFound(RegistryError, errors.NotFound):
    """No schema has this id, or the subject has no version with this schema."""

    error_code = 40403

    def __init__(self, schema_id: int | None = None) -> None:
        super().__init__(
            "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
        )


class SubjectSoftDeleted(RegistryError, errors.NotFound):
    """Every version of the subject is soft-deleted already."""

    error_code = 40404

    def __init__(self, subject: str) -> None:
        super().__init__(
            f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently"
        )


class SubjectNotSoftDeleted(RegistryError, errors.NotFound):
    """A permanent delete of a subject that still has live versions."""

    error_code = 40405

    def __init__(self, subject: str) -> None:
        super().__init__(
            f"Subject '{subject}' was not deleted first before being permanently deleted"
        )


class VersionSoftDeleted(RegistryError, errors.NotFound):
    """The version is soft-deleted already."""

    error_code = 40406

    def __init__(self, subject: str, version: int) -> None:
        super().__init__(
            f"Subject '{subject}' Version {version} was soft deleted. "
            "Set permanent=true to delete permanently"
        )


class VersionNotSoftDeleted(RegistryError, errors.NotFound):
    """A permanent delete of a version that is still live."""

    error_code = 40407

    def __init__(self, subject: str, version: int) -> None:
        super().__init__(
            f"Subject '{subject}' Version {version} was not deleted first before being "
            "permanently deleted"
        )


class SubjectConfigNotFound(RegistryError, errors.NotFound):
    """The subject has no compatibility level of its own."""

    error_code = 40408

    def __init__(self, subject: str) -> None:
        super().__init__(
            f"Subject '{subject}' does not have subject-level compatibility configured"
        )


class IncompatibleSchema(RegistryError, errors.Conflict):
    """The schema breaks the subject's compatibility level; ``problems`` says how."""

    error_code = 409

    def __init__(self, subject: str, level: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            f"Schema being registered is incompatible with an earlier schema for subject "
            f"'{subject}' ({level}): " + "; ".join(problems)
        )


class InvalidSchema(RegistryError, errors.InvalidInput):
    """The schema is not one this registry can keep."""

    error_code = 42201

    def __init__(self, message: str) -> None:
        super().__init__("schema", f"Invalid schema: {message}")


class InvalidVersion(RegistryError, errors.InvalidInput):
    """The version is not ``latest``, -1 or a number in 1..2^31-1."""

    error_code = 42202

    def __init__(self, version: str) -> None:
        super().__init__(
            "version",
            f"The specified version '{version}' is not a valid version id. Allowed values are "
            'between [1, 2^31-1] and the string "latest"',
        )


class InvalidCompatibility(RegistryError, errors.InvalidInput):
    """The compatibility level is not one of the seven."""

    error_code = 42203

    def __init__(self, level: object) -> None:
        super().__init__(
            "compatibility",
            f"Invalid compatibility level {level!r}. Valid values are none, backward, forward, "
            "full, backward_transitive, forward_transitive, and full_transitive",
        )


class OperationNotPermitted(RegistryError, errors.InvalidInput):
    """The request asks for something this registry does not do."""

    error_code = 42205


class InvalidSubject(RegistryError, errors.InvalidInput):
    """The subject name is empty, too long or holds control characters."""

    error_code = 42208

    def __init__(self, subject: str, why: str) -> None:
        super().__init__("subject", f"The specified subject {subject!r} is not valid: {why}")
