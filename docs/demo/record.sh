#!/usr/bin/env bash
# Re-record docs/demo.svg from docs/demo/demo.sh with termtosvg (PyPI; any venv will do):
#   python3 -m venv /tmp/rec && /tmp/rec/bin/pip install termtosvg
#   TERMTOSVG=/tmp/rec/bin/termtosvg docs/demo/record.sh
# termtosvg needs a terminal: script(1) gives it one when there is none.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
rec=${TERMTOSVG:-termtosvg}
cmd="$rec $here/docs/demo.svg -g 110x26 -M 2500 -D 4000 -c 'bash $here/docs/demo/demo.sh'"
if [ -t 0 ] && [ -t 1 ]; then
  eval "$cmd"
else
  script -qec "$cmd" /dev/null
fi
