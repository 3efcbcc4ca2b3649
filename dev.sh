#!/usr/bin/env bash
# dev.sh — one entry point for working on memfs from a checkout.
#
#   ./dev.sh demo [MOUNTPOINT]   mount a demo store of the embedded local server (default /tmp/memfs-demo)
#   ./dev.sh test [PYTEST ARGS]  run the test suite (as root: the mount tests need /dev/fuse)
#   ./dev.sh lint                ruff check
#   ./dev.sh bench               run benchmarks/*.py
#   ./dev.sh mutate [MUTANTS]    mutation testing of the sync core (mutmut; docs/TESTING.md)
#   ./dev.sh setup               only install system packages and the .venv
#
# Every command first makes sure the system packages (Debian 12) and .venv exist; apt-get runs only
# when a package is missing, pip only when pyproject.toml (or the Python) changed since the last
# install. Environment knobs: MEMFS_PYTHON (interpreter used to create .venv), MEMFS_SKIP_APT=1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$ROOT"
VENV="$ROOT/.venv"
STAMP="$VENV/.memfs-install-stamp"

# System packages: FUSE runtime and headers, the compiler for pyfuse3 (built from source), and the
# tools the tests drive through the mount. vim-tiny gives only `vi`/`vim.tiny` on Debian 12; the
# `vim` package gives the `vim` command the tests may call.
BASE_PKGS=(fuse3 libfuse3-dev pkg-config gcc libc6-dev git rsync vim-tiny vim bindfs procps psmisc
           ca-certificates util-linux)
# Only for ./dev.sh test: initdb/pg_ctl for the throwaway cluster the server tests run on
# (memfs serve --db postgresql://…). Installed without Debian's default `main` cluster.
# systemd: only its tools (systemd-analyze verify checks mount_helpers/*.service; nothing is
# booted or enabled); without it that test skips.
TEST_PKGS=(postgresql systemd)
PY_PKGS=(python3 python3-venv python3-dev)

export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

say()  { printf '==> %s\n' "$*" >&2; }
warn() { printf 'dev.sh: warning: %s\n' "$*" >&2; }
die()  { printf 'dev.sh: error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# ---------------------------------------------------------------- system packages

is_root() { [ "$(id -u)" -eq 0 ]; }

pkg_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

apt_install() { # apt_install PKG... — installs only the missing ones
  local missing=() p
  for p in "$@"; do pkg_installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  if ! is_root; then
    command -v sudo >/dev/null 2>&1 || die "missing Debian packages: ${missing[*]} (run as root, or install them)"
    sudo=(sudo -n)
  fi
  say "installing missing system packages: ${missing[*]}"
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=300 update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
    "${missing[@]}"
}

# A Python that can build the venv: >= 3.11, has venv + ensurepip, has its C headers (pyfuse3).
python_ok() {
  "$1" - <<'EOF' >/dev/null 2>&1
import os, sys, sysconfig
assert sys.version_info >= (3, 11)
import venv, ensurepip  # noqa: F401  (Debian: python3-venv)
assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))  # python3-dev
EOF
}

pick_python() { # prints the interpreter path or fails
  local cand p
  for cand in "${MEMFS_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$cand" ] || continue
    p=$(command -v "$cand" 2>/dev/null) || continue
    if python_ok "$p"; then printf '%s\n' "$p"; return 0; fi
  done
  return 1
}

have_apt() { command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1; }

ensure_system() {
  if [ "${MEMFS_SKIP_APT:-0}" = 1 ]; then
    say "MEMFS_SKIP_APT=1: not checking system packages"
  elif have_apt; then
    apt_install "${BASE_PKGS[@]}"
    # Debian's own python3 needs its -venv and -dev packages; a python3 from PATH (pyenv, …) is
    # used as it is when it passes python_ok.
    PYTHON=$(pick_python) || PYTHON=""
    if [ -z "$PYTHON" ] || [ "$(readlink -f "$PYTHON")" = "$(readlink -f /usr/bin/python3 2>/dev/null)" ]; then
      apt_install "${PY_PKGS[@]}"
      [ -n "$PYTHON" ] || PYTHON=$(pick_python) || PYTHON=""
    fi
  else
    warn "no apt-get/dpkg: not a Debian system; make sure these are installed yourself: ${BASE_PKGS[*]}"
  fi
  [ -n "${PYTHON:-}" ] || PYTHON=$(pick_python) || die "no Python >= 3.11 with venv, ensurepip and headers (Python.h) found; on Debian 12: apt-get install ${PY_PKGS[*]}"
}

# ---------------------------------------------------------------- .venv

venv_stamp() { # what the installed .venv corresponds to (setup.py builds memfs/_fastopen.c)
  { sha256sum pyproject.toml setup.py memfs/_fastopen.c memfs/_fastopen.map | cut -d' ' -f1
    "$VENV/bin/python" -c 'import sys; print(sys.version)'; } 2>/dev/null
}

ensure_venv() {
  # Several people (and CI) may run this at once in one tree: serialize the venv bootstrap.
  local lock
  lock="${TMPDIR:-/tmp}/memfs-dev-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1).lock"
  exec 9>"$lock"
  flock 9
  if [ -e "$VENV" ] && ! "$VENV/bin/python" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    say "$VENV is broken or too old (its Python is gone?): recreating it"
    rm -rf "$VENV"
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV with $PYTHON ($("$PYTHON" -c 'import sys; print(sys.version.split()[0])'))"
    "$PYTHON" -m venv "$VENV"
    rm -f "$STAMP"
  fi
  if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$(venv_stamp)" ] || [ ! -x "$VENV/bin/memfs" ]; then
    say "pip install -e '.[test]' into .venv (pyfuse3 builds from source: ~1 min)"
    "$VENV/bin/python" -m pip install -q --upgrade pip || warn "could not upgrade pip; going on"
    # The distribution was called `memfs` before (a name PyPI gives another project).
    "$VENV/bin/python" -m pip uninstall -q -y memfs 2>/dev/null || true
    "$VENV/bin/python" -m pip install -q -e '.[test]'
    venv_stamp >"$STAMP"
  fi
  flock -u 9
  exec 9>&-
  export PATH="$VENV/bin:$PATH"
}

bootstrap() { ensure_system; ensure_venv; compile_bytecode; }

# Every mount starts two Python processes (the CLI, then the daemon). A regular install writes
# memfs's bytecode at install time; an editable one does not, and where PYTHONDONTWRITEBYTECODE
# is set (as in some sandboxes) Python would then compile every changed module at each start:
# about 0.15 s per process. So compile what changed, as an install would (cheap when nothing did).
compile_bytecode() {
  "$VENV/bin/python" -m compileall -q "$ROOT/memfs" >/dev/null || warn "compileall failed"
}

ensure_test_system() {
  [ "${MEMFS_SKIP_APT:-0}" = 1 ] && return 0
  have_apt || { warn "no apt-get: install PostgreSQL (initdb, pg_ctl) yourself, or its tests skip"; return 0; }
  if ! pkg_installed postgresql; then
    # Debian's postgresql would create and start a `main` cluster: the tests make their own.
    apt_install postgresql-common
    if is_root && [ -f /etc/postgresql-common/createcluster.conf ]; then
      sed -ri 's/^#? *(create_main_cluster) .*$/\1 = false/' /etc/postgresql-common/createcluster.conf
    fi
  fi
  apt_install "${TEST_PKGS[@]}"
}

# ---------------------------------------------------------------- FUSE

check_fuse() { # returns 1 (after saying why) when FUSE mounts can't work here
  local ok=0
  if [ ! -e /dev/fuse ] && is_root && command -v modprobe >/dev/null 2>&1; then
    modprobe fuse 2>/dev/null || true
  fi
  if [ ! -e /dev/fuse ]; then
    warn "/dev/fuse does not exist (modprobe fuse did not help): FUSE mounts CANNOT work on this machine"
    warn "in a container, run it with --device /dev/fuse --cap-add SYS_ADMIN"
    ok=1
  fi
  if ! command -v fusermount3 >/dev/null 2>&1; then
    warn "fusermount3 not found (Debian package fuse3): FUSE mounts CANNOT work"
    ok=1
  fi
  if ! is_root; then
    warn "not root: mount tests need root (or access to /dev/fuse and a setuid fusermount3)"
  fi
  return $ok
}

# ---------------------------------------------------------------- commands

cmd_test() {
  bootstrap
  ensure_test_system
  check_fuse || warn "continuing: the tests that need real mounts will fail or be skipped"
  # Run the whole tests/ folder unless a path (file, dir or node id) is given.
  local args=() a has_path=0
  for a in "$@"; do [ -e "${a%%::*}" ] && has_path=1; done
  # The whole suite runs in MEMFS_TEST_JOBS processes (default 3, pytest-xdist), a test file
  # per process at a time: the tests mostly wait on servers and mounts, so three beat two
  # even on 2 cores (docs/TESTING.md). Every test has its own servers, mounts and XDG dirs.
  # A path given runs in one process (easier to debug); MEMFS_TEST_JOBS=1 runs everything
  # in one.
  [ $has_path = 1 ] || args=(tests)
  local jobs=${MEMFS_TEST_JOBS:-3}
  if [ $has_path = 0 ] && [ "$jobs" -gt 1 ]; then
    args+=(-n "$jobs" --dist loadfile)
  fi
  say "$(printf '%s ' "$VENV/bin/python" -m pytest -q -p no:cacheprovider "${args[@]}" "$@")"
  local rc=0
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider "${args[@]}" "$@" || rc=$?
  if [ $rc -eq 5 ]; then
    printf 'dev.sh: pytest collected no tests: treating that as a failure\n' >&2
    rc=1
  fi
  exit $rc
}

cmd_lint() {
  bootstrap
  say "ruff check"
  "$VENV/bin/ruff" check "$@" .
}

cmd_bench() {
  bootstrap
  check_fuse || warn "benchmarks that mount will fail"
  # The plot of bench_network.py needs matplotlib (the `bench` extra), from PyPI on first use.
  if ! "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
    say "pip install -e '.[test,bench]' into .venv (matplotlib, for docs/benchmarks.png)"
    "$VENV/bin/python" -m pip install -q -e '.[test,bench]' || warn "no matplotlib: no plot"
  fi
  shopt -s nullglob
  local files=(benchmarks/*.py) f rc=0 a extra quick=0
  shopt -u nullglob
  if [ ${#files[@]} -eq 0 ]; then
    say "no benchmarks/*.py yet: nothing to run"
    return 0
  fi
  for a in "$@"; do [ "$a" = --quick ] && quick=1; done
  for f in "${files[@]}"; do
    case "$(basename "$f")" in _*|conftest.py) continue ;; esac
    extra=()
    # A full run of the network benchmark regenerates the plot linked from README.md and the
    # markdown tables for docs/BENCHMARKS.md; a --quick run leaves them alone.
    if [ "$(basename "$f")" = bench_network.py ] && [ $quick = 0 ]; then
      extra=(--plot docs/benchmarks.png --markdown docs/benchmarks-network.md)
    fi
    say "benchmark: $f"
    "$VENV/bin/python" "$f" "${extra[@]}" "$@" || { warn "$f failed"; rc=1; }
  done
  return $rc
}

cmd_mutate() {
  bootstrap
  # mutmut is a tool of this command only (like matplotlib for bench): installed on first use,
  # not part of the `test` extra that every CI run installs.
  if ! "$VENV/bin/python" -c 'import mutmut' 2>/dev/null; then
    say "pip install mutmut into .venv (mutation testing, first use only)"
    "$VENV/bin/python" -m pip install -q 'mutmut>=3.8,<4'
  fi
  # One worker unless asked: the machine is usually shared. mutmut keeps its results in
  # mutants/ and retests only what changed; MEMFS_MUTATE_FRESH=1 starts over.
  [ "${MEMFS_MUTATE_FRESH:-0}" = 1 ] && rm -rf mutants
  local start=$SECONDS rc=0
  "$VENV/bin/mutmut" run --max-children "${MEMFS_MUTATE_JOBS:-1}" "$@" || rc=$?
  mutate_report
  say "mutmut run took $((SECONDS - start)) s; survivors: $VENV/bin/mutmut results," \
      "one of them: $VENV/bin/mutmut show NAME"
  return $rc
}

mutate_report() { # the score per module, from mutmut's own results (mutants/**/*.meta)
  "$VENV/bin/python" - <<'EOF'
import json, pathlib
from mutmut.stats import status_by_exit_code
DETECTED = {"killed", "timeout", "caught by type check", "segfault"}
print(f"{'module':34} {'mutants':>7} {'checked':>7} {'killed':>6} {'survived':>8} {'score':>6}")
for meta in sorted(pathlib.Path("mutants").rglob("*.py.meta")):
    codes = json.loads(meta.read_text())["exit_code_by_key"].values()
    statuses = [status_by_exit_code[c] for c in codes]
    checked = [s for s in statuses if s not in ("not checked", "skipped")]
    killed = sum(s in DETECTED for s in checked)
    score = f"{100 * killed / len(checked):5.1f}%" if checked else "    -"
    name = str(meta.relative_to("mutants"))[:-5]
    print(f"{name:34} {len(statuses):7} {len(checked):7} {killed:6} {len(checked) - killed:8}"
          f" {score}")
EOF
}

is_mounted() { # is_mounted DIR — a mount point in /proc/mounts (works on a dead FUSE mount too)
  local d
  d=$(readlink -f "$1" 2>/dev/null || printf '%s' "$1")
  # /proc/mounts writes a space, tab, newline or backslash of a path as \040, \011, \012, \134.
  awk -v d="$d" '{ m = $2; gsub(/\\040/, " ", m); gsub(/\\011/, "\t", m); gsub(/\\012/, "\n", m)
                   gsub(/\\134/, "\\", m) } m == d { found = 1 } END { exit !found }' /proc/mounts
}

# The id of the store named "demo": saved id if the server still knows it, else found by name,
# else a new store.
demo_store_id() {
  local state_dir="${XDG_STATE_HOME:-$HOME/.local/state}/memfs"
  local id_file="$state_dir/demo-store-id" id="" listing=""
  mkdir -p "$state_dir"
  chmod 700 "$state_dir" 2>/dev/null || true
  [ -s "$id_file" ] && id=$(tr -d '[:space:]' <"$id_file")
  if listing=$(memfs stores list --json 2>/dev/null); then
    # Accept a list of stores or the API's {"data": [...]} envelope.
    id=$(printf '%s' "$listing" | "$VENV/bin/python" -c '
import json, sys
want = sys.argv[1]
doc = json.load(sys.stdin)
stores = doc.get("data", doc.get("stores", [])) if isinstance(doc, dict) else doc
active = [s for s in stores if isinstance(s, dict) and not s.get("archived_at")]
ids = [s.get("id") for s in active]
if want and want in ids:
    print(want)
else:
    named = [s.get("id") for s in active if s.get("name") == "demo"]
    print(named[0] if named else "")
' "$id" 2>/dev/null) || id=""
  fi
  if [ -z "$id" ]; then
    say "memfs stores create demo"
    id=$(memfs stores create demo | tail -n 1 | tr -d '[:space:]')
    [ -n "$id" ] || die "memfs stores create demo printed no store id"
  fi
  printf '%s\n' "$id" >"$id_file"
  printf '%s\n' "$id"
}

write_demo_files() { # only files that don't exist yet: never overwrite what the user edited
  local mp=$1
  mkdir -p "$mp/notes" "$mp/projects"
  [ -e "$mp/README.md" ] || cat >"$mp/README.md" <<'EOF'
# Demo memory store

Every file under this directory is one memory in the store "demo" on the embedded local
memfs server. Edit, create, rename or delete files with any program; memfs pushes the
changes to the server about a second after the file is closed.
EOF
  [ -e "$mp/notes/preferences.md" ] || cat >"$mp/notes/preferences.md" <<'EOF'
- Always use tabs, not spaces.
- Prefer short commit messages in the imperative mood.
EOF
  [ -e "$mp/projects/memfs.md" ] || cat >"$mp/projects/memfs.md" <<'EOF'
memfs mounts a Memory Store as a FUSE filesystem.
Limits: 102,400 bytes per file, 1,024-byte paths, 2,000 files per store.
EOF
}

cmd_demo() {
  local mp="${1:-/tmp/memfs-demo}"
  bootstrap
  check_fuse || die "FUSE mounts cannot work here (see above): the demo needs a real mount"
  # The demo runs against the embedded local server, never against a hosted account.
  if [ -n "${ANTHROPIC_BASE_URL:-}${ANTHROPIC_API_KEY:-}${ANTHROPIC_API_KEY_FILE:-}" ]; then
    say "ignoring ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY for the demo: it uses the embedded local server"
  fi
  unset ANTHROPIC_BASE_URL ANTHROPIC_API_KEY ANTHROPIC_API_KEY_FILE

  if is_mounted "$mp"; then
    if ls "$mp" >/dev/null 2>&1; then
      say "$mp is already mounted: leaving it as it is"
    else
      say "$mp is a dead mount (daemon gone): unmounting it"
      fusermount3 -u "$mp" 2>/dev/null || fusermount3 -uz "$mp"
    fi
  fi
  if ! is_mounted "$mp"; then
    local id
    id=$(demo_store_id)
    mkdir -p "$mp"
    say "memfs mount $id $mp"
    memfs mount "$id" "$mp"
    is_mounted "$mp" || die "memfs mount returned but $mp is not mounted"
    write_demo_files "$mp"
  fi

  cat <<EOF

memfs demo is mounted at $mp (store "demo", embedded local server).
Try:
  ls -la $mp
  cat $mp/notes/preferences.md
  echo "- Run the tests with ./dev.sh test" >> $mp/notes/preferences.md
  $VENV/bin/memfs status $mp
  $VENV/bin/memfs unmount $mp
(Put $VENV/bin on your PATH to type plain 'memfs'.) Running ./dev.sh demo again reuses the store.
EOF
}

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
  demo)  cmd_demo "$@" ;;
  test)  cmd_test "$@" ;;
  lint)  cmd_lint "$@" ;;
  bench) cmd_bench "$@" ;;
  mutate) cmd_mutate "$@" ;;
  setup) bootstrap; say "system packages and $VENV are ready" ;;
  help|-h|--help) usage ;;
  *) usage >&2; die "unknown command: $cmd" ;;
esac
