#!/bin/sh
# Re-vendor the console's players, hls.js and dash.js, into its static files from the npm
# registry (no CDN at run time).
#
#   scripts/vendor_players.sh [HLS_VERSION] [DASH_VERSION]   (default: the pinned versions)
#
# Fetches each package tarball with `npm pack` (the registry's own integrity check applies),
# copies the single-file player and its LICENSE, and rewrites the README there with the
# versions and the sha256 of every vendored file, so a review can check what is served.
set -eu

HLS_VERSION="${1:-1.7.4}"
DASH_VERSION="${2:-5.2.1}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/src/aigc_hub/interfaces/console/static/vendor"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

(cd "$WORK" && npm pack --silent "hls.js@$HLS_VERSION" "dashjs@$DASH_VERSION" >/dev/null)
mkdir -p "$WORK/hls" "$WORK/dash" "$DEST"
tar -xzf "$WORK"/hls.js-"$HLS_VERSION".tgz -C "$WORK/hls"
tar -xzf "$WORK"/dashjs-"$DASH_VERSION".tgz -C "$WORK/dash"
cp "$WORK/hls/package/dist/hls.min.js" "$DEST/hls.min.js"
cp "$WORK/hls/package/LICENSE" "$DEST/hls.js.LICENSE"
# The legacy UMD build: one file defining window.dashjs, for browsers without modules too.
cp "$WORK/dash/package/dist/legacy/umd/dash.all.min.js" "$DEST/dash.all.min.js"
cp "$WORK/dash/package/LICENSE.md" "$DEST/dash.js.LICENSE"
sha() { sha256sum "$1" | cut -d' ' -f1; }

cat >"$DEST/README.md" <<README
# Vendored player libraries

Served by the console as static files; nothing is loaded from a CDN.

| file | package | version | sha256 |
|---|---|---|---|
| \`hls.min.js\` | [hls.js](https://www.npmjs.com/package/hls.js) (\`dist/hls.min.js\`) | $HLS_VERSION | \`$(sha "$DEST/hls.min.js")\` |
| \`hls.js.LICENSE\` | hls.js's LICENSE (Apache-2.0) | $HLS_VERSION | |
| \`dash.all.min.js\` | [dashjs](https://www.npmjs.com/package/dashjs) (\`dist/legacy/umd/dash.all.min.js\`) | $DASH_VERSION | \`$(sha "$DEST/dash.all.min.js")\` |
| \`dash.js.LICENSE\` | dash.js's LICENSE (BSD-3-Clause) | $DASH_VERSION | |

The npm tarballs had sha256 \`$(sha "$WORK"/hls.js-"$HLS_VERSION".tgz)\` (hls.js-$HLS_VERSION.tgz)
and \`$(sha "$WORK"/dashjs-"$DASH_VERSION".tgz)\` (dashjs-$DASH_VERSION.tgz).
Re-vendor (or move to other versions) with \`scripts/vendor_players.sh [HLS_VERSION] [DASH_VERSION]\`.
README
echo "vendored hls.js $HLS_VERSION and dash.js $DASH_VERSION"
