"""The health proof of `memfs serve`: how a client tells its server from an impostor.

``GET /_memfs/health?challenge=C`` answers ``"proof": health_proof(key, C)``.
Only a process that holds the key can compute it, and it reveals nothing about
the key, so a client can check the process on a port before it sends the key
there (see ``memfs/local/server.py``). Its own module so that a client command
need not import the server to check one.
"""

from __future__ import annotations

import hashlib
import hmac

#: HMAC-SHA256(key, HEALTH_PROOF_PREFIX + challenge), hex.
HEALTH_PROOF_PREFIX = b"memfs-health-proof:"


def health_proof(api_key: str, challenge: str) -> str:
    """What a server holding ``api_key`` answers to ``challenge``."""
    return hmac.new(api_key.encode(), HEALTH_PROOF_PREFIX + challenge.encode(),
                    hashlib.sha256).hexdigest()
