#!/bin/sh
# A morning summary for cron: how full the inbox is, its oldest items, and what is due
# today. cron mails what a job prints, so this line in `crontab -e` e-mails it daily:
#
#   MAILTO=you@example.org
#   0 7 * * *  /path/to/daily-digest.sh
#
# Credentials: as capture.sh and remind.sh (inbox key with PermitSize and PermitGetItems,
# scheduler key with PermitGetItems and PermitGetSettings).
# Needs: curl, base64, sed, GNU date.
set -eu

settings="${PIGEONHOLE_CLIENT_CONFIG:-${XDG_CONFIG_HOME:-$HOME/.config}/pigeonhole/client.toml}"
setting() { sed -n "s/^$1 = \"\(.*\)\"$/\1/p" "$settings" 2>/dev/null || true; }
inbox="${PIGEONHOLE_INBOX_URL:-$(setting inbox-url)}"
scheduler="${PIGEONHOLE_SCHEDULER_URL:-$(setting scheduler-url)}"
user="${PIGEONHOLE_USERNAME:-$(setting username)}"
inbox_key="${PIGEONHOLE_INBOX_KEY:-$(setting inbox-key)}"
scheduler_key="${PIGEONHOLE_SCHEDULER_KEY:-$(setting scheduler-key)}"
[ -n "$inbox" ] && [ -n "$scheduler" ] && [ -n "$user" ] && [ -n "$inbox_key" ] && [ -n "$scheduler_key" ] || {
  echo "daily-digest.sh: no credentials: run \`pigeonhole setup\` or set the PIGEONHOLE_* variables" >&2
  exit 2
}
get() { curl --fail-with-body --silent --show-error -H "Username: $user" -H "Access-Key: $1" "$2"; }

size="$(get "$inbox_key" "$inbox/inbox/size")"
echo "Inbox: $size item(s)."
get "$inbox_key" "$inbox/inbox/items" \
  | sed 's/},{"contents"/}\n{"contents"/g' \
  | sed -n 's/.*"data":"\([^"]*\)".*/\1/p' \
  | head -n 5 \
  | while IFS= read -r data; do printf '  - %s\n' "$(printf '%s' "$data" | base64 -d | head -n 1)"; done

# Scheduled items whose day is today in the account's zone.
zone_json="$(get "$scheduler_key" "$scheduler/account/settings")"
name="$(printf '%s' "$zone_json" | sed -n 's/.*"name":"\([^"]*\)".*/\1/p')"
case "$name" in */*) today="$(TZ="$name" date +%F)" ;; *) today="$(date -u +%F)" ;; esac
due="$(get "$scheduler_key" "$scheduler/scheduler/items" \
  | sed 's/},{"contents"/}\n{"contents"/g' \
  | grep "\"scheduled-day\":\"$today\"" | grep '"triggered":null' || true)"
if [ -z "$due" ]; then
  echo "Nothing scheduled for today ($today)."
else
  echo "Due today ($today):"
  # in the order they come due: the time first, so that sort orders them
  printf '%s\n' "$due" | while IFS= read -r item; do
    time="$(printf '%s' "$item" | sed -n 's/.*"scheduled-time":"\([0-9:.]*\)".*/\1/p')"
    text="$(printf '%s' "$item" | sed -n 's/.*"content":"\([^"]*\)".*/\1/p')"
    printf '%s\t%s\t%s\n' "${time:-00:00:00}" "${time:-(all day)}" "$text"
  done | LC_ALL=C sort | while IFS="$(printf '\t')" read -r _ time text; do
    printf '  - %s %s\n' "$time" "$text"
  done
fi
