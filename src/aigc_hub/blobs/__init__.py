"""The blob seam: tenant-scoped object keys, a small store protocol, signed URLs, multipart.

Engines: :mod:`aigc_hub.blobs.local` (files under one folder, HMAC-signed URLs served by the
hub API; no extra dependency) and :mod:`aigc_hub.blobs.s3` (any S3-compatible store through
boto3; ``pip install 'aigc-hub[s3]'``). The S3 engine is not imported here, so importing this
package never needs boto3.
"""

from __future__ import annotations

from aigc_hub.blobs.base import (
    BlobInfo,
    BlobNotFound,
    BlobStore,
    Features,
    MultipartUploads,
    PresignedPut,
    SignatureError,
    SignatureExpired,
    SignatureInvalid,
    UploadRejected,
)
from aigc_hub.blobs.keys import check_key, object_key, safe_filename, tenant_of
from aigc_hub.blobs.local import LocalBlobStore

__all__ = [
    "BlobInfo",
    "BlobNotFound",
    "BlobStore",
    "Features",
    "LocalBlobStore",
    "MultipartUploads",
    "PresignedPut",
    "SignatureError",
    "SignatureExpired",
    "SignatureInvalid",
    "UploadRejected",
    "check_key",
    "object_key",
    "safe_filename",
    "tenant_of",
]
