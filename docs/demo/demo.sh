#!/usr/bin/env bash
# The terminal session in docs/demo.svg: a session mount, the memory tool, a file's history.
# Runs against a private embedded server (its own XDG dirs), as root (FUSE); leaves nothing
# behind. Recorded by docs/demo/record.sh; run it alone to watch it.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
export PATH="$here/.venv/bin:$PATH"
work=$(mktemp -d /tmp/memfs-demo-rec.XXXXXX)
export XDG_CACHE_HOME=$work/cache XDG_DATA_HOME=$work/data
unset ANTHROPIC_BASE_URL ANTHROPIC_API_KEY ANTHROPIC_API_KEY_FILE
cd "$work"
root=memory
cleanup() {
  memfs unmount "$work/$root" >/dev/null 2>&1 || fusermount3 -uz "$work/$root" 2>/dev/null || true
  memfs serve stop >/dev/null 2>&1 || true
  cd / && rm -rf "$work"
}
trap cleanup EXIT

run() {  # show the command as typed, then run it
  printf '\033[1;32m$\033[0m '
  local text="$*" i
  for ((i = 0; i < ${#text}; i++)); do printf '%s' "${text:i:1}"; sleep 0.02; done
  printf '\n'
  eval "$@"
  sleep 1.2
}

memfs stores create "Team Notes" >/dev/null && memfs stores create "Style Guide" >/dev/null
memfs tool "Style Guide" >/dev/null <<'JSON'
{"command": "create", "path": "/memories/indent.md", "file_text": "Always use tabs.\n"}
JSON
run 'sid=$(memfs sessions create --store "Team Notes" --store "Style Guide:read_only" 2>/dev/null | tail -1)'
run "memfs mount --session \$sid $root"
run "ls $root $root/style-guide"
run "echo 'Ship on Fridays.' > $root/team-notes/rules.md"
run "echo 'spaces!' > $root/style-guide/indent.md || true"
run "echo '{\"command\": \"str_replace\", \"path\": \"/memories/rules.md\", \"old_str\": \"Fridays\", \"new_str\": \"Thursdays\"}' | memfs tool team-notes"
run "memfs history $root/team-notes/rules.md"
run "cat $root/team-notes/rules.md"
run "memfs unmount $root"
