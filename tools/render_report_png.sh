#!/usr/bin/env bash
# render_report_png.sh — render a kvbench report (index.html) to a PNG with headless Chromium.
#
#   tools/render_report_png.sh REPORT_DIR/index.html OUT.png [WIDTHxHEIGHT]
#
# Needs the Debian package `chromium` (apt-get install chromium); no network is used: the
# report is self-contained (inline SVG, no scripts). Default window 1500x2400 pixels.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 index.html out.png [WIDTHxHEIGHT]" >&2
  exit 2
fi
html=$1
png=$2
size=${3:-1500x2400}
[ -f "$html" ] || { echo "$0: $html: no such file" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "$0: chromium not found (Debian: apt-get install chromium)" >&2; exit 3; }
abs_html=$(realpath "$html")
abs_png=$(realpath -m "$png")
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# --no-sandbox: Chromium refuses to run as root (CI containers) with the sandbox on.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --user-data-dir="$profile" --window-size="${size/x/,}" \
  --screenshot="$abs_png" "file://$abs_html" >"$profile/log" 2>&1 || {
  cat "$profile/log" >&2
  exit 1
}
[ -s "$abs_png" ] || { cat "$profile/log" >&2; echo "$0: no PNG written" >&2; exit 1; }
echo "wrote $abs_png"
