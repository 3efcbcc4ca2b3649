"""A throwaway PostgreSQL cluster for the tests (Debian's `postgresql` package).

    cluster = PgCluster.start(tmpdir)      # initdb + pg_ctl start, on a free port
    url = cluster.new_database()           # postgresql://…/memfs_N, empty
    cluster.stop()

The cluster lives in a temp directory, listens on 127.0.0.1 only with trust
auth, and is stopped (pg_ctl -m immediate) and deleted at the end of the
session. As root, the server runs as the `postgres` user (initdb refuses root).
`pg_bin()` finds initdb/pg_ctl under /usr/lib/postgresql/*/bin; without them
the PostgreSQL tests skip locally, but fail under CI (CI=true), which must run
them.
"""

from __future__ import annotations

import glob
import itertools
import os
import pathlib
import pwd
import shutil
import socket
import subprocess
from dataclasses import dataclass, field


def pg_bin() -> pathlib.Path | None:
    """The newest /usr/lib/postgresql/N/bin holding initdb and pg_ctl."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    for initdb in reversed(found):
        bindir = pathlib.Path(initdb).parent
        if (bindir / "pg_ctl").exists():
            return bindir
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgCluster:
    bindir: pathlib.Path
    root: pathlib.Path
    port: int
    run_as: str | None  # "postgres" when we are root
    _names: itertools.count = field(default_factory=lambda: itertools.count(1))

    @property
    def datadir(self) -> pathlib.Path:
        return self.root / "data"

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = list(args)
        if self.run_as is not None:
            cmd = ["runuser", "-u", self.run_as, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=True, cwd=str(self.root))

    @classmethod
    def start(cls, root: pathlib.Path) -> PgCluster:
        bindir = pg_bin()
        if bindir is None:
            raise FileNotFoundError("PostgreSQL binaries (initdb, pg_ctl) not found")
        run_as = None
        if os.geteuid() == 0:
            run_as = "postgres"
            pw = pwd.getpwnam(run_as)
            root.mkdir(parents=True, exist_ok=True)
            os.chown(root, pw.pw_uid, pw.pw_gid)
            # The parent temp dirs must be traversable by the postgres user.
            for parent in root.parents:
                if str(parent) in ("/", "/tmp"):
                    break
                os.chmod(parent, os.stat(parent).st_mode | 0o011)
        cluster = cls(bindir, root, _free_port(), run_as)
        cluster._run(str(bindir / "initdb"), "-D", str(cluster.datadir), "-U", "postgres",
                     "--auth=trust", "--encoding=UTF8", "--locale=C", "-N")
        opts = (f"-c listen_addresses=127.0.0.1 -c port={cluster.port} "
                f"-c unix_socket_directories={root} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        cluster._run(str(bindir / "pg_ctl"), "-D", str(cluster.datadir), "-l",
                     str(root / "pg.log"), "-o", opts, "-w", "-t", "60", "start")
        return cluster

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        import psycopg

        name = f"memfs_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate",
                      "-w", "stop", timeout=60)
        except (subprocess.SubprocessError, OSError):
            pass
        shutil.rmtree(self.root, ignore_errors=True)
