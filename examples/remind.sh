#!/bin/sh
# Schedule a reminder that comes back into your inbox (or by e-mail) when it is due.
#
#   ./remind.sh "2 hours" call mum
#   ./remind.sh "tomorrow 09:00" dentist at 10
#   ./remind.sh "next friday 18:00" take the bins out
#
# WHEN is anything GNU `date -d` understands; it is read in the time zone of your
# scheduler account (GET /account/settings), like the scheduler reads it.
# Credentials come from the environment, else from `pigeonhole setup`'s client settings:
#   PIGEONHOLE_SCHEDULER_URL   e.g. http://127.0.0.1:8002
#   PIGEONHOLE_USERNAME        your username
#   PIGEONHOLE_SCHEDULER_KEY   a scheduler access key with PermitAddItem and PermitGetSettings
# Needs: curl, GNU date, base64.
set -eu

[ "$#" -ge 2 ] || { echo "usage: remind.sh WHEN TEXT..." >&2; exit 2; }
when="$1"; shift

settings="${PIGEONHOLE_CLIENT_CONFIG:-${XDG_CONFIG_HOME:-$HOME/.config}/pigeonhole/client.toml}"
setting() { sed -n "s/^$1 = \"\(.*\)\"$/\1/p" "$settings" 2>/dev/null || true; }
url="${PIGEONHOLE_SCHEDULER_URL:-$(setting scheduler-url)}"
user="${PIGEONHOLE_USERNAME:-$(setting username)}"
key="${PIGEONHOLE_SCHEDULER_KEY:-$(setting scheduler-key)}"
[ -n "$url" ] && [ -n "$user" ] && [ -n "$key" ] || {
  echo "remind.sh: no credentials: run \`pigeonhole setup\` or set PIGEONHOLE_SCHEDULER_URL, PIGEONHOLE_USERNAME, PIGEONHOLE_SCHEDULER_KEY" >&2
  exit 2
}
api() { curl --fail-with-body --silent --show-error -H "Username: $user" -H "Access-Key: $key" "$@"; }

# The account's zone: an IANA name such as Europe/Zurich, else a fixed offset in minutes.
zone_json="$(api "$url/account/settings")"
name="$(printf '%s' "$zone_json" | sed -n 's/.*"name":"\([^"]*\)".*/\1/p')"
offset="$(printf '%s' "$zone_json" | sed -n 's/.*"offset":\(-\{0,1\}[0-9]*\).*/\1/p')"
case "$name" in
  */*) tz="$name" ;;
  *) # POSIX TZ strings count hours west of UTC
     minutes=$(( -offset )); sign=+; [ "$minutes" -lt 0 ] && { sign=-; minutes=$(( -minutes )); }
     tz="$(printf 'UTC%s%d:%02d' "$sign" $(( minutes / 60 )) $(( minutes % 60 )))" ;;
esac

day="$(TZ="$tz" date -d "$when" +%F)"
time="$(TZ="$tz" date -d "$when" +%T)"
content="$(printf '%s' "$*" | base64 | tr -d '\n')"

api -H "Content-Type: application/json" \
  --data "{\"content\":{\"type\":\"text\",\"data\":\"$content\"},\"scheduled-day\":\"$day\",\"scheduled-time\":\"$time\"}" \
  "$url/scheduler/item"
echo
echo "due $day $time ($tz)" >&2
