"""The configuration `memfs mount` hands its daemon (JSON over a pipe): a store mount
and a session root share their settings (MountSettings), and the JSON keeps the form
it had before they did, so an older memfs and a newer one read each other's."""

from __future__ import annotations

import json

import pytest

from memfs.core.mountconfig import (
    GroupConfig,
    GroupStore,
    MountConfig,
    MountSettings,
    SyncOptions,
    config_from_json,
)

# Written by memfs before MountSettings (the same values as the objects below).
OLD_STORE_JSON = (
    '{"kind": "store", "store_id": "memstore_a", "mountpoint": "/m", "base_url": '
    '"http://127.0.0.1:1", "state_dir": "/s", "options": {"write_back_delay": 1.0, '
    '"max_push_delay": 5.0, "delete_delay": 30.0, "poll_interval": 3.0, "feed": true, '
    '"full_resync": 600.0, "deletes": "enabled", "prefetch": true, "read_only": true, '
    '"push_concurrency": 32, "show_meta": false}, "flush_timeout": 30.0, "embedded": true, '
    '"local_only_patterns": [".*.swp", ".*.swo", ".*.swx", ".*.swpx", "*~", ".#*", "#*#", '
    '"4913"], "allow_other": false, "owner": [1, 2], "store_name": "A", '
    '"metrics_addr": "127.0.0.1:9"}'
)
OLD_GROUP_JSON = (
    '{"kind": "session", "root": "/r", "base_url": "http://127.0.0.1:1", "group_dir": "/g", '
    '"stores": [{"store_id": "memstore_a", "name": "a", "state_dir": "/s/a", "read_only": '
    'true, "display_name": "A"}], "options": {"write_back_delay": 1.0, "max_push_delay": '
    '5.0, "delete_delay": 30.0, "poll_interval": 2.0, "feed": true, "full_resync": 600.0, '
    '"deletes": "enabled", "prefetch": true, "read_only": false, "push_concurrency": 32, '
    '"show_meta": false}, "flush_timeout": 5.0, "embedded": false, "local_only_patterns": '
    '[".*.swp", ".*.swo", ".*.swx", ".*.swpx", "*~", ".#*", "#*#", "4913"], "allow_other": '
    'true, "owner": null, "session_id": "sesn_1", "cache_dir": null, "state_key": "k", '
    '"read_only": false, "allow_partial": false, "metrics_addr": ":9", "group": true}'
)


def store_config() -> MountConfig:
    return MountConfig(store_id="memstore_a", mountpoint="/m", base_url="http://127.0.0.1:1",
                       state_dir="/s", options=SyncOptions(read_only=True, poll_interval=3.0),
                       embedded=True, owner=[1, 2], store_name="A", metrics_addr="127.0.0.1:9")


def group_config() -> GroupConfig:
    return GroupConfig(kind="session", root="/r", base_url="http://127.0.0.1:1",
                       group_dir="/g", stores=[GroupStore("memstore_a", "a", "/s/a", True, "A")],
                       session_id="sesn_1", allow_other=True, flush_timeout=5.0,
                       state_key="k", metrics_addr=":9")


def test_new_code_reads_the_old_json():
    assert config_from_json(OLD_STORE_JSON) == store_config()
    assert config_from_json(OLD_GROUP_JSON) == group_config()


def test_the_json_keeps_its_old_keys_and_values():
    """An older memfs read its JSON with ``cls(**fields)``: the same flat keys and
    values (their order aside) are what it can read."""
    assert json.loads(store_config().to_json()) == json.loads(OLD_STORE_JSON)
    assert json.loads(group_config().to_json()) == json.loads(OLD_GROUP_JSON)
    for cfg in (store_config(), group_config()):
        assert config_from_json(cfg.to_json()) == cfg


@pytest.mark.parametrize("name", SyncOptions.LATER)
def test_an_option_added_since_is_written_only_when_set(name):
    """`--lost-answer-wait` and `--feed-lookback` came after that form: at its default
    each is left out (the JSON an older memfs reads), set it goes across."""
    cfg = store_config()
    assert name not in json.loads(cfg.to_json())["options"]
    setattr(cfg.options, name, 5.0)
    assert json.loads(cfg.to_json())["options"][name] == 5.0
    assert config_from_json(cfg.to_json()) == cfg


def test_a_root_hands_every_shared_setting_to_its_stores():
    group = group_config()
    store = group.store_config(group.stores[0])
    for f in MountSettings.__dataclass_fields__:
        if f != "options":
            assert getattr(store, f) == getattr(group, f), f
    assert store.options == SyncOptions(read_only=True)  # the store is attached read-only
    assert (store.store_id, store.mountpoint, store.state_dir, store.store_name) == \
        ("memstore_a", "/r/a", "/s/a", "A")
    assert store.local_only_patterns is not group.local_only_patterns
