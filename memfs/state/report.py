"""What a mount has not pushed yet, and how much of its tree is cached: the parts of
`memfs status` (and of an unmount's answer) that the state alone can tell: live (`State`)
or offline (`StateView`, read-only), by the same reads."""

from __future__ import annotations

from memfs.core import decide
from memfs.core.mountconfig import SyncOptions
from memfs.state.view import StateView

#: Why a file stays here by its name: an editor's or a tool's temp file, or a name the
#: mount's --local-only patterns name (it said "editor/tool temp file" of those too,
#: which hid that they are the user's own files: a helper).
LOCAL_BY_NAME = "local-only by name (a temp file, or --local-only)"


def pending(state: StateView, *, delete_delay: float | None = None,
            read_only: bool = False, push_delays: SyncOptions | None = None,
            delete_mode: str = "enabled", gone: str | None = None) -> dict:
    """Pending creates/updates/renames/deletes, refused and local-only files.

    On a read-only mount nothing is ever pushed: a file edited here (or kept
    after the server deleted it) is listed as local-only, with the reason, and a
    delete left from an earlier mount has no due time; nor has any delete when none
    is sent (`delete_mode`: `--deletes log-only|disabled`) or `delete_delay` is None.
    `push_delays`: a live mount's options, for each dirty file's `due_at` (when the
    pusher will send it, by its own rule). `gone`: the store was "archived" or
    "deleted" on the server, which made the mount read-only, and the reason says so."""
    read_only = read_only or gone is not None
    refusal = f"the store was {gone} on the server" if gone else "read-only mount"
    creates, updates, renames, refused, local_only = [], [], [], [], []
    # A file whose change is exactly what a request whose answer was lost sent: on the
    # server already, perhaps (`in_doubt`): the next pass asks it.
    sent = {(t.ino, t.sha, t.path) for t in state.doubts.values()}
    for node in state.files():
        path = state.path_of(node)
        if state.is_local_only(node):
            local_only.append({"path": path, "reason": LOCAL_BY_NAME})
            continue
        if state.is_refused(node):
            refused.append({"path": path, "reason": node.refused_reason})
            continue
        if not state.is_dirty(node):
            continue
        if read_only:
            why = ("not on the server (deleted there, or never pushed)"
                   if node.memory_id is None else "edited here")
            local_only.append({"path": path, "memory_id": node.memory_id,
                               "reason": f"{refusal}: {why}; kept here, unsynced"})
            continue
        due = {}
        if push_delays is not None:
            due["due_at"] = decide.push_due_at(
                node.changed_at, node.dirty_since,
                write_back_delay=push_delays.write_back_delay,
                max_push_delay=push_delays.max_push_delay)
        if node.error:  # refused for another reason than content: waits, then retried
            due.update(error=node.error, retry_at=node.retry_at)
        if (node.ino, node.sha, path) in sent:
            due["in_doubt"] = True
        if node.memory_id is None:
            creates.append({"path": path, "size": node.size, **due})
            continue
        if node.sha != node.base_sha:
            updates.append({"path": path, "memory_id": node.memory_id, "size": node.size,
                            **due})
        if path != node.base_path:
            renames.append({"from": node.base_path, "to": path, "memory_id": node.memory_id,
                            **due})
    deletes = []
    for t in state.tombstones.values():
        item = {"path": t.base_path, "memory_id": t.memory_id, "deleted_at": t.deleted_at}
        if delete_delay is not None and not read_only and delete_mode == "enabled":
            item["due_at"] = t.deleted_at + delete_delay
        if t.error:
            item.update(error=t.error, retry_at=t.retry_at)
        deletes.append(item)
    # Requests whose answer was lost: the next pass asks the server what they did.
    unconfirmed = [{"path": t.path, "memory_id": t.memory_id, "sent_at": t.sent_at,
                    "request": "create" if t.memory_id is None else "update"}
                   for t in state.doubts.values()]
    return {"creates": creates, "updates": updates, "renames": renames, "deletes": deletes,
            "unconfirmed": unconfirmed, "refused": refused, "local_only": local_only,
            "read_only_unpushed": read_only}


def tree_summary(state: StateView, cache) -> dict:
    """Files and bytes in the tree, and how many of them are cached (the daemon's status)."""
    files = total = cached = cached_bytes = 0
    for node in state.files():
        files += 1
        total += node.size
        if node.sha and cache.has(node.sha):
            cached += 1
            cached_bytes += node.size
    return {"files": files, "bytes": total, "cached_files": cached, "cached_bytes": cached_bytes}


#: What a flush's answer (`StoreEngine.kept_local`) says stays here that the user must
#: hear of, kind by kind, and the sentence that says it: `memfs unmount` prints it, the
#: daemon (stopped by a signal, no unmount to tell) and a session root's owner log it.
KEPT_HERE = (
    ("saved_open", "{n} file(s) were still open with unsaved writes"),
    ("not_pushed", "{n} file(s) stay here only, NOT on the server"),
    ("waiting", "{n} change(s) the server turned down last time stay journaled, "
                "tried again on the next mount"),
    ("conflicts", "{n} conflict(s) keep what was written here aside, NOT on the server "
                  "(memfs conflicts shows each; memfs conflicts restore ID puts one back)"),
    ("in_doubt", "{n} request(s) whose answer was lost may yet be applied by the server: "
                 "the next mount asks it, and sends what it did not apply"),
)


#: What `KEPT_HERE` says instead of a store archived or deleted on the server.
GONE_SAYS = {
    "waiting": "{n} change(s) the server turned down stay journaled",
    "conflicts": "{n} conflict(s) keep what was written here aside, NOT on the server "
                 "(memfs salvage writes each out, under .conflicts/)",
}

#: How many items of one kind `kept_here` names: a tree of git objects refused for
#: their bytes is a thousand lines that bury the rest; the others are counted, and
#: `memfs status MOUNTPOINT` (read from state.db once the daemon is gone) names each.
NAMED = 20


def kept_here(reply: dict, *, named: int = NAMED) -> list[tuple[str, list[str]]]:
    """Each kind of `KEPT_HERE` the reply holds: its sentence and its items, one
    "path: reason" each (a conflict led by its id, which `memfs conflicts` takes),
    the first `named` of them and a line that counts the rest."""
    def line(i: dict) -> str:
        return (f"#{i['id']} " if "id" in i else "") + f"{i['path']}: {i['reason']}"

    def lines(items: list[dict]) -> list[str]:
        more = len(items) - named
        return [line(i) for i in items[:named]] + (
            [f"... and {more} more (memfs status names each)"] if more > 0 else [])

    said = dict(KEPT_HERE)
    if reply.get("gone"):  # no mount will push them: restore has nowhere to put them
        said.update(GONE_SAYS)
    return [(said[kind].format(n=len(items)), lines(items))
            for kind, _sentence in KEPT_HERE if (items := reply.get(kind))]


def kept_here_lines(reply: dict) -> list[str]:
    """`kept_here` as log lines: "sentence: item; item"."""
    return [f"{sentence}: {'; '.join(items)}" for sentence, items in kept_here(reply)]
