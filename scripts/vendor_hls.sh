#!/bin/sh
# Re-vendor hls.js into the console's static files from the npm registry (no CDN at run time).
#
#   scripts/vendor_hls.sh [VERSION]     (default: the pinned version below)
#
# Fetches the package tarball with `npm pack` (the registry's own integrity check applies),
# copies dist/hls.min.js and the LICENSE next to it, and rewrites the README there with the
# version and the sha256 of the vendored file, so a review can check what is served.
set -eu

VERSION="${1:-1.7.4}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/src/aigc_hub/interfaces/console/static/vendor"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

(cd "$WORK" && npm pack --silent "hls.js@$VERSION" >/dev/null)
tar -xzf "$WORK"/hls.js-"$VERSION".tgz -C "$WORK"
mkdir -p "$DEST"
cp "$WORK/package/dist/hls.min.js" "$DEST/hls.min.js"
cp "$WORK/package/LICENSE" "$DEST/hls.js.LICENSE"
TARBALL_SHA="$(sha256sum "$WORK"/hls.js-"$VERSION".tgz | cut -d' ' -f1)"
FILE_SHA="$(sha256sum "$DEST/hls.min.js" | cut -d' ' -f1)"

cat >"$DEST/README.md" <<README
# Vendored player libraries

Served by the console as static files; nothing is loaded from a CDN.

| file | package | version | sha256 |
|---|---|---|---|
| \`hls.min.js\` | [hls.js](https://www.npmjs.com/package/hls.js) (\`dist/hls.min.js\`) | $VERSION | \`$FILE_SHA\` |
| \`hls.js.LICENSE\` | hls.js's LICENSE (Apache-2.0) | $VERSION | |

The npm tarball \`hls.js-$VERSION.tgz\` had sha256 \`$TARBALL_SHA\`.
Re-vendor (or move to another version) with \`scripts/vendor_hls.sh [VERSION]\`.
README
echo "hls.js $VERSION vendored: sha256 $FILE_SHA"
