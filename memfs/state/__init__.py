"""A mount's persistent state: state.db (its one owner), the blob cache, the state directory."""
