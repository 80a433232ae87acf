"""Grants on key prefixes: what a manifest's player holds to read the files under it."""

from __future__ import annotations

import pytest

from aigc_hub.blobs.grants import GrantRefused, PrefixGrants

PREFIX = "t/t1/dash/vid_1/42/"
NOW_MS = 1_767_225_600_000


def test_a_signed_grant_verifies_to_its_prefix_until_it_expires() -> None:
    grants = PrefixGrants("s3cret")
    token = grants.sign(PREFIX, NOW_MS // 1000 + 60)
    assert grants.verify(token, NOW_MS) == PREFIX
    assert PrefixGrants("s3cret").verify(token, NOW_MS) == PREFIX  # another process, same secret
    with pytest.raises(GrantRefused, match="expired"):
        grants.verify(token, NOW_MS + 60_000)


@pytest.mark.parametrize("mangle", ["secret", "prefix", "exp", "sig", "shape"])
def test_a_tampered_or_foreign_grant_is_refused(mangle: str) -> None:
    grants = PrefixGrants("s3cret")
    exp = NOW_MS // 1000 + 60
    token = grants.sign(PREFIX, exp)
    encoded, _, sig = token.split(".")
    forged = {
        "secret": PrefixGrants("other").sign(PREFIX, exp),
        "prefix": PrefixGrants("s3cret").sign("t/t2/dash/vid_1/42/", exp).split(".")[0]
        + f".{exp}.{sig}",
        "exp": f"{encoded}.{exp + 3600}.{sig}",
        "sig": f"{encoded}.{exp}.{sig[:-2]}AA",
        "shape": "not-a-token",
    }[mangle]
    with pytest.raises(GrantRefused):
        grants.verify(forged, NOW_MS)


@pytest.mark.parametrize(
    "path", ["../43/manifest.mpd", "/etc/passwd", "a/../../x", ".", "", "a\\b"]
)
def test_a_path_outside_the_prefix_is_refused(path: str) -> None:
    with pytest.raises(GrantRefused, match="outside"):
        PrefixGrants.key_under(PREFIX, path)


def test_paths_inside_the_prefix_name_their_keys() -> None:
    assert PrefixGrants.key_under(PREFIX, "chunk-0-00001.m4s") == PREFIX + "chunk-0-00001.m4s"
    assert PrefixGrants.key_under(PREFIX, "v0/./init.mp4") == PREFIX + "v0/init.mp4"


def test_a_prefix_must_end_with_a_slash() -> None:
    with pytest.raises(ValueError, match="ends with"):
        PrefixGrants("s").sign("t/t1/dash/vid_1", 1)
