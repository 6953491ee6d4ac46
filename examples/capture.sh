#!/bin/sh
# Capture a note into your Pigeonhole inbox from any shell, cron job or script.
#
#   ./capture.sh buy milk
#   echo "call the plumber" | ./capture.sh
#
# Credentials come from the environment, else from the client settings that
# `pigeonhole setup` wrote (~/.config/pigeonhole/client.toml):
#   PIGEONHOLE_INBOX_URL   e.g. http://127.0.0.1:8001
#   PIGEONHOLE_USERNAME    your username
#   PIGEONHOLE_INBOX_KEY   an inbox access key with PermitAdd
# Needs: curl.
set -eu

settings="${PIGEONHOLE_CLIENT_CONFIG:-${XDG_CONFIG_HOME:-$HOME/.config}/pigeonhole/client.toml}"
setting() { sed -n "s/^$1 = \"\(.*\)\"$/\1/p" "$settings" 2>/dev/null || true; }
url="${PIGEONHOLE_INBOX_URL:-$(setting inbox-url)}"
user="${PIGEONHOLE_USERNAME:-$(setting username)}"
key="${PIGEONHOLE_INBOX_KEY:-$(setting inbox-key)}"
[ -n "$url" ] && [ -n "$user" ] && [ -n "$key" ] || {
  echo "capture.sh: no credentials: run \`pigeonhole setup\` or set PIGEONHOLE_INBOX_URL, PIGEONHOLE_USERNAME, PIGEONHOLE_INBOX_KEY" >&2
  exit 2
}

if [ "$#" -gt 0 ]; then note="$*"; else note="$(cat)"; fi

# POST /inbox/text takes the body as the note: no JSON, no base64.
printf '%s' "$note" | curl --fail-with-body --silent --show-error \
  -H "Username: $user" -H "Access-Key: $key" -H "Content-Type: text/plain; charset=utf-8" \
  --data-binary @- "$url/inbox/text"
echo
