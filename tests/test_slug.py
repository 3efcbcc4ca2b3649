"""memfs.core.slug: the mount slug rule shared by the server and the client."""

from __future__ import annotations

import doctest

import pytest

import memfs.core.slug
from memfs.core.slug import MOUNT_ROOT, mount_slug, mount_slugs, slug


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Demo Memory", "demo-memory"),
        ("user-preferences", "user-preferences"),
        ("User_Preferences", "user-preferences"),
        ("  Team   Notes!  ", "team-notes"),
        ("a--b__c..d", "a-b-c-d"),
        ("--x--", "x"),
        ("ABC123xyz", "abc123xyz"),
        ("v2.0 Release", "v2-0-release"),
        ("Café Notes", "caf-notes"),  # non-ASCII is a separator, never transliterated
        ("İstanbul", "stanbul"),  # only ASCII letters are lowercased
        ("KELVIN\u212a", "kelvin"),  # U+212A KELVIN SIGN is not an ASCII K
        ("日本語", ""),
        ("!!!", ""),
        ("-", ""),
        ("", ""),
        ("a", "a"),
        ("0", "0"),
    ],
)
def test_slug(name: str, expected: str) -> None:
    assert slug(name) == expected


def test_slug_output_alphabet() -> None:
    for name in ["Hello, World", "\x00\x01 tab\there", "Ω≈ç√ mixed ASCII 42", "a" * 300]:
        s = slug(name)
        assert all(ch in "abcdefghijklmnopqrstuvwxyz0123456789-" for ch in s)
        assert not s.startswith("-") and not s.endswith("-") and "--" not in s


def test_mount_slugs_plain_and_empty() -> None:
    assert mount_slugs([]) == []
    assert mount_slugs([("Prefs", "memstore_1")]) == ["prefs"]
    # An empty slug uses the slug of the store id.
    assert mount_slugs([("???", "memstore_01AbCd"), ("日本", "memstore_02x")]) == [
        "memstore-01abcd",
        "memstore-02x",
    ]


def test_mount_slugs_collisions_in_resource_order() -> None:
    got = mount_slugs(
        [
            ("Notes", "memstore_a"),
            ("notes", "memstore_b"),
            ("NOTES!", "memstore_c"),
            ("other", "memstore_d"),
        ]
    )
    assert got == ["notes", "notes-2", "notes-3", "other"]
    # A natural slug taken by an earlier suffix moves on to the next free one.
    assert mount_slugs([("a", "s1"), ("a", "s2"), ("a-2", "s3")]) == ["a", "a-2", "a-2-2"]
    # A natural "x-2" that comes first keeps it; the collider skips it.
    assert mount_slugs([("x-2", "s1"), ("x", "s2"), ("x", "s3")]) == ["x-2", "x", "x-3"]
    # The id fallback takes part in collisions like any slug.
    assert mount_slugs([("memstore-1", "s1"), ("***", "memstore_1")]) == [
        "memstore-1",
        "memstore-1-2",
    ]
    assert len(set(mount_slugs([("same", f"id{i}") for i in range(8)]))) == 8


def test_one_store_at_a_time_names_as_all_at_once() -> None:
    """The --all watch names each later store with mount_slug: adding the stores one by
    one gives the directories mount_slugs gives them together at mount time."""
    stores = [("Notes", "memstore_a"), ("notes", "memstore_b"), ("a-2", "s1"), ("a", "s2"),
              ("a", "s3"), ("***", "memstore_1"), ("memstore-1", "s4"), ("", "memstore_2")]
    taken: set[str] = set()
    one_by_one = []
    for name, store_id in stores:
        one_by_one.append(mount_slug(name, store_id, taken))
        taken.add(one_by_one[-1])
    assert one_by_one == mount_slugs(stores)
    assert mount_slug("Notes", "memstore_z", {"notes", "notes-2"}) == "notes-3"
    assert mount_slug("???", "memstore_Z", set()) == "memstore-z"


def test_mount_root() -> None:
    assert MOUNT_ROOT + slug("Demo Memory") == "/mnt/memory/demo-memory"


def test_doctests() -> None:
    failures, _ = doctest.testmod(memfs.core.slug)
    assert failures == 0


def test_a_suffix_never_takes_a_name_past_255_bytes() -> None:
    """Two stores of 255-character names were `…-2`: 257 bytes, a directory no program
    could open (a helper). The name is cut short for its suffix, at a character's end
    for a session's non-ASCII directory names."""
    long = "x" * 255
    got = mount_slugs([(long, "s1"), (long, "s2"), (long, "s3")])
    assert got == [long, "x" * 253 + "-2", "x" * 253 + "-3"]
    assert all(len(name.encode()) <= 255 for name in got)
    from memfs.core.slug import unique

    wide = "é" * 127 + "x"  # 255 bytes
    second = unique(wide, {wide})
    assert second == "é" * 126 + "-2" and len(second.encode()) == 254
