#!/bin/sh
# Work through your inbox one item at a time, oldest first ("inbox zero"):
# for each item, d = done (delete it), k = keep it for later, q = quit.
#
#   ./process-inbox.sh
#
# Credentials: as capture.sh (an inbox access key with PermitShow, PermitDelete, PermitSize,
# PermitGetItems). Answers are read from standard input, so a script can drive it too:
# `printf 'd\nk\n' | ./process-inbox.sh`.
# Needs: curl, base64, sed.
set -eu

settings="${PIGEONHOLE_CLIENT_CONFIG:-${XDG_CONFIG_HOME:-$HOME/.config}/pigeonhole/client.toml}"
setting() { sed -n "s/^$1 = \"\(.*\)\"$/\1/p" "$settings" 2>/dev/null || true; }
url="${PIGEONHOLE_INBOX_URL:-$(setting inbox-url)}"
user="${PIGEONHOLE_USERNAME:-$(setting username)}"
key="${PIGEONHOLE_INBOX_KEY:-$(setting inbox-key)}"
[ -n "$url" ] && [ -n "$user" ] && [ -n "$key" ] || {
  echo "process-inbox.sh: no credentials: run \`pigeonhole setup\` or set PIGEONHOLE_INBOX_URL, PIGEONHOLE_USERNAME, PIGEONHOLE_INBOX_KEY" >&2
  exit 2
}
api() { curl --fail-with-body --silent --show-error -H "Username: $user" -H "Access-Key: $key" "$@"; }
exec 3<&0 # the answers: the loop below reads the items on its own standard input

# GET /inbox/items lists every item as {"id":…,"contents":{"type":…,"data":base64},"created":…};
# one per line is enough to walk through them.
items="$(api "$url/inbox/items" | sed 's/},{"contents"/}\n{"contents"/g; s/^\[//; s/\]$//')"
[ -n "$items" ] || { echo "The inbox is empty."; exit 0; }
total="$(printf '%s\n' "$items" | wc -l)"
n=0
printf '%s\n' "$items" | while IFS= read -r item; do
  n=$((n + 1))
  id="$(printf '%s' "$item" | sed -n 's/.*"id":"\([0-9a-f-]*\)".*/\1/p')"
  data="$(printf '%s' "$item" | sed -n 's/.*"data":"\([^"]*\)".*/\1/p')"
  echo "---- $n of $total ----"
  printf '%s' "$data" | base64 -d
  echo
  printf '[d]one, [k]eep, [q]uit? '
  read -r answer <&3 || answer=q
  case "$answer" in
    d*) api -X DELETE "$url/inbox/item/$id" >/dev/null && echo "done." ;;
    q*) break ;;
    *) echo "kept." ;;
  esac
done
