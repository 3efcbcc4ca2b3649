"""memfs.server.db in-process: listing/pagination against a brute-force model."""

from __future__ import annotations

import random

import pytest

from memfs.server.db import Actor, ApiError, Database

ACTOR = Actor.for_api_key("k")


@pytest.fixture
def db_target(tmp_path, db_backend, request) -> str:
    """Where a Database opens: a SQLite file, or a fresh PostgreSQL database."""
    if db_backend == "postgresql":
        return request.getfixturevalue("pg_url")
    return str(tmp_path / "m.db")


def model_list(paths, prefix, depth):
    out = {}
    for p in paths:
        if not p.startswith(prefix):
            continue
        rest = p[len(prefix) :]
        if depth == 1 and "/" in rest:
            sub = prefix + rest.split("/", 1)[0] + "/"
            out[sub] = ("memory_prefix", sub)
        else:
            out[p] = ("memory", p)
    return [out[k] for k in sorted(out, key=str.encode)]


def walk(db, sid, prefix, depth, limit):
    items, page = [], None
    while True:
        res = db.list_memories(sid, path_prefix=prefix, depth=depth, limit=limit, page=page)
        assert len(res["data"]) <= limit
        items += [(i["type"], i["path"]) for i in res["data"]]
        page = res["next_page"]
        if page is None:
            return items
        assert len(res["data"]) == limit


@pytest.mark.parametrize("seed", range(6))
def test_listing_matches_model(db_target, seed):
    rng = random.Random(seed)
    db = Database(db_target)
    sid = db.create_store(name="s")["id"]
    names = ["a", "b", "a-b", "a.md", "Z", "é", "ab", "a0", "x y"]
    paths: set[str] = set()
    for _ in range(120):
        depth = rng.randint(1, 4)
        p = "/" + "/".join(rng.choice(names) for _ in range(depth))
        try:
            db.create_memory(sid, path=p, content=p, actor=ACTOR)
            paths.add(p)
        except ApiError as e:
            assert e.status == 409
            other = e.extra["conflicting_path"]
            assert other == p or p.startswith(other + "/") or other.startswith(p + "/")
    prefixes = ["/"] + sorted({p[: p.index("/", 1) + 1] for p in paths if p.count("/") > 1})
    for prefix in prefixes[:4]:
        for depth in (0, 1):
            want = model_list(paths, prefix, depth)
            for limit in (1, 2, 3, 7, 100):
                assert walk(db, sid, prefix, depth, limit) == want, (prefix, depth, limit)
    db.close()


def test_schema_version_and_reopen(db_target):
    db = Database(db_target)
    sid = db.create_store(name="s")["id"]
    db.close()
    db = Database(db_target)
    assert db.get_store(sid)["name"] == "s"
    db.close()


def test_a_sha_with_a_trailing_newline_is_no_sha():
    """`^[0-9a-f]{64}$` with `re.match` took "<sha>\\n" for a sha (`$` matches before a
    last newline): one check of a sha for the client, the models and the server now
    (`core.paths.is_sha`), found reading the change, 6 December."""
    from memfs.core.paths import is_sha
    from memfs.server.db_common import ApiError, check_sha256

    sha = "a" * 64
    assert check_sha256(sha, name="x") == sha and is_sha(sha)
    for bad in (sha + "\n", sha.upper(), sha[:-1], None):
        assert not is_sha(bad)
        with pytest.raises(ApiError):
            check_sha256(bad, name="x")
