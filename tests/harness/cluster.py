"""A Redis Cluster on free loopback ports: N masters with R replicas each
(default 3 + 3), created with `redis-cli --cluster create`, for the Cluster
tests (issue 12).

    with RedisCluster() as c:           # created; every node agrees and every replica is linked
        c.url()                         # redis-cluster://127.0.0.1:P1,127.0.0.1:P2,...
        c.masters(), c.replicas(m)      # ClusterNode objects in those roles right now
        c.key_slot(b"watchlock:{name}") # CRC16 slot with the hash-tag rule
        c.master_for_key(key)           # the master that owns the key's slot
        c.failover(m)                   # CLUSTER FAILOVER on m's replica; returns the new master
        c.kill_master(m)                # SIGKILL; returns the promoted replica
        c.restart(m)                    # back on its ports; it rejoins (as a replica if it was replaced)
        c.migrate_slot(slot, dst)       # IMPORTING/MIGRATING, MIGRATE every key, SETSLOT NODE
        c.begin_migration(slot, dst); c.move_keys(slot, keys=[k]); c.finish_migration(slot)
        with c.paused(node): ...        # SIGSTOP for the block
        node.pipeline(("ASKING",), ("GET", k))  # commands on one connection, errors as values

    python3 tests/harness/cluster.py --serve [--tls] [--masters N] [--replicas R]
        starts a cluster, prints one line "url=... masters=P1,P2,P3 replicas=P4,P5,P6
        [tls_dir=DIR]" and keeps it up until stdin closes (for the C tests).
    python3 tests/harness/cluster.py --serve [--tls] ... -- COMMAND [ARGS...]
        runs COMMAND with a fresh cluster instead (exits with its status):
        WATCHLOCK_URL is the cluster's URL, WATCHLOCK_TEST_PORT the first
        master's port, WATCHLOCK_CLUSTER_MASTERS the masters' ports "P1,P2,P3"
        (and WATCHLOCK_TEST_TLS_DIR the certificates with --tls), as
        redis_server.py does for one server (for the Lua tests).

Every node is a RedisServer (redis_server.py) with --cluster-enabled yes,
its nodes.conf in its own directory and an explicit --cluster-port: the
default bus port is port + 10000, which does not exist for the upper part
of the ephemeral range that free_port() draws from. A restarted node keeps
both ports and its nodes.conf, so it rejoins under its old node id, with an
empty data set (no persistence).

Timing: --cluster-node-timeout 1000 by default, so a killed master is
replaced after about 2-3 s (node timeout, failure reports, election delay).
--cluster-replica-validity-factor 0 lets a replica fail over however long
its link was down (a test that paused the master first still gets its
failover). Every wait is on a condition with a deadline; nothing sleeps a
fixed time.

"Agree": the harness waits until every running node's CLUSTER NODES gives
the same slot owners and the same role and master for every running node,
every running node sees all the others connected and none flagged fail,
CLUSTER INFO says cluster_state:ok on each, and every running replica's
replication link is up. Operations return only in that state (except
stop(), kill() and the single migration steps), so which node is asked
for the topology does not matter between them.

With tls (a tls.Certs), every node listens with TLS only and uses TLS on
the cluster bus and for replication (--tls-cluster yes, --tls-replication
yes); url() is rediss-cluster://...?cacert=CA.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_server import (RedisError, RedisServer, _encode, _read_reply, connect, die_with_parent,  # noqa: E402
                          free_port, tls_query)
from sentinel import Timeout, _info, wait_until  # noqa: E402

__all__ = ["RedisCluster", "ClusterNode", "NodeView", "crc16", "key_slot", "SLOTS", "Timeout"]

SLOTS = 16384


# ---- key slots (Redis Cluster spec, "Keys distribution model")

def _crc16_table() -> List[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _crc16_table()


def crc16(data: bytes) -> int:
    """CRC16-XMODEM (polynomial 0x1021, initial value 0, not reflected):
    the checksum Redis Cluster hashes keys with. crc16(b"123456789") == 0x31C3."""
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ b]
    return crc


def key_slot(key: bytes | str) -> int:
    """The hash slot of key: CRC16 mod 16384 of the hash tag if there is one
    (the bytes between the first '{' and the first '}' after it, when not
    empty), else of the whole key."""
    if isinstance(key, str):
        key = key.encode()
    start = key.find(b"{")
    if start != -1:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return crc16(key) % SLOTS


# ---- one node

class ClusterNode(RedisServer):
    """A RedisServer in cluster mode. node_id is its cluster id (kept
    across restarts in its nodes.conf); bus_port its cluster bus port."""

    def __init__(self, index: int, cluster_args: Sequence[str], password: Optional[str] = None,
                 tls=None, tls_auth_clients: str = "no"):
        super().__init__(password=password, tls=tls, tls_auth_clients=tls_auth_clients)
        self.index = index
        self.bus_port = 0
        self.node_id = ""
        self.nodes_conf = os.path.join(self.dir, "nodes.conf")
        self.paused = False  # SIGSTOPped by RedisCluster.paused()
        self.cluster_args = ["--cluster-config-file", self.nodes_conf, *cluster_args]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __repr__(self) -> str:
        state = "running" if self.running() else "stopped"
        return f"<ClusterNode {self.index} {self.address} {self.node_id[:8] or '?'} {state}>"

    def running(self) -> bool:
        """The process is alive and not paused (so it answers)."""
        return self.proc is not None and self.proc.poll() is None and not self.paused

    def start(self, port: Optional[int] = None) -> "ClusterNode":
        """Without port: fresh client and bus ports (retried on a clash) and a
        fresh nodes.conf. With port (a restart): the same ports and nodes.conf."""
        if port is not None:
            self.extra_args = self.cluster_args + ["--cluster-port", str(self.bus_port)]
            super().start(port=port)
        else:
            for _ in range(20):
                port, bus = free_port(), free_port()
                if port == bus:
                    continue
                self.bus_port = bus
                self.extra_args = self.cluster_args + ["--cluster-port", str(bus)]
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.nodes_conf)
                try:
                    super().start(port=port)
                    break
                except RuntimeError:  # one of the ports was taken meanwhile
                    continue
            else:
                raise RuntimeError(f"cluster node {self.index} did not start (log in {self.dir})")
        self.node_id = _text(self.call("CLUSTER", "MYID"))
        return self

    def call(self, *args):
        """command(), raising RedisError for an error reply."""
        reply = self.command(*args)
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def pipeline(self, *commands: Sequence) -> list:
        """Several commands on one connection (e.g. ("ASKING",), ("GET", key));
        returns their replies, errors as RedisError values."""
        with connect(self.port, self.tls) as s:
            if self.password:
                commands = (("AUTH", self.password),) + commands
            s.sendall(b"".join(_encode(c) for c in commands))
            f = s.makefile("rb")
            replies = [_read_reply(f) for _ in commands]
        return replies[1:] if self.password else replies

    def role(self) -> Optional[str]:
        """"master" or "slave" as the node itself says (ROLE); None if it does not answer."""
        try:
            r = self.command("ROLE")
        except OSError:
            return None
        return _text(r[0]) if isinstance(r, list) and r else None

    def kill(self) -> None:
        """SIGKILL, no waiting for the cluster to notice."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.send_signal(signal.SIGCONT)  # SIGTERM would wait for a paused node forever
        super().stop()


# ---- CLUSTER NODES

@dataclass
class NodeView:
    """One line of CLUSTER NODES: how the asked node sees node `id`."""
    id: str
    port: int
    flags: frozenset
    master_id: Optional[str]
    link: str
    ranges: List[Tuple[int, int]] = field(default_factory=list)
    migrating: Dict[int, str] = field(default_factory=dict)  # only on the "myself" line
    importing: Dict[int, str] = field(default_factory=dict)

    @property
    def role(self) -> str:
        return "master" if "master" in self.flags else "slave"

    @property
    def failing(self) -> bool:
        return bool(self.flags & {"fail", "fail?", "handshake", "noaddr"})

    def owns(self, slot: int) -> bool:
        return any(a <= slot <= b for a, b in self.ranges)


def parse_cluster_nodes(text) -> Dict[str, NodeView]:
    """CLUSTER NODES output as {node id: NodeView}; "myself" is in the flags."""
    out = {}
    for line in _text(text).splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        node_id, addr, flags, master, _ping, _pong, _epoch, link, *slots = parts
        hostport = addr.split("@", 1)[0]
        v = NodeView(id=node_id, port=int(hostport.rsplit(":", 1)[1] or 0), flags=frozenset(flags.split(",")),
                     master_id=None if master == "-" else master, link=link)
        for s in slots:
            if s.startswith("["):  # [slot->-dst] migrating, [slot-<-src] importing
                body = s[1:-1]
                if "->-" in body:
                    slot, other = body.split("->-")
                    v.migrating[int(slot)] = other
                else:
                    slot, other = body.split("-<-")
                    v.importing[int(slot)] = other
            elif "-" in s:
                a, b = s.split("-")
                v.ranges.append((int(a), int(b)))
            else:
                v.ranges.append((int(s), int(s)))
        out[node_id] = v
    return out


def _slot_map(view: Dict[str, NodeView]) -> tuple:
    return tuple(sorted((a, b, v.id) for v in view.values() for a, b in v.ranges))


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


# ---- the cluster

class RedisCluster:
    """`masters` masters with `replicas` replicas each, all on 127.0.0.1.
    `nodes` lists every ClusterNode (index order = creation order; redis-cli
    makes the first `masters` of them the masters). Which node is a master
    right now is asked of the cluster: it changes with failovers."""

    def __init__(self, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1000, tls=None,
                 tls_auth_clients: str = "no", password: Optional[str] = None, extra_args: Sequence[str] = ()):
        if masters < 3:
            raise ValueError("redis-cli --cluster create needs at least 3 masters")
        self.masters_count = masters
        self.replicas_count = replicas
        self.node_timeout_ms = node_timeout_ms
        self.tls = tls
        self.password = password
        args = ["--cluster-enabled", "yes", "--cluster-node-timeout", str(node_timeout_ms),
                "--cluster-replica-validity-factor", "0",
                # replicas sync at once (the default diskless sync waits 5 s for more replicas)
                "--repl-diskless-sync-delay", "0"]
        if tls is not None:
            args += ["--tls-cluster", "yes", "--tls-replication", "yes"]
        if password:
            args += ["--masterauth", password]
        args += list(extra_args)
        self.nodes: List[ClusterNode] = [
            ClusterNode(i, args, password=password, tls=tls, tls_auth_clients=tls_auth_clients)
            for i in range(masters * (1 + replicas))]
        self._migrations: Dict[int, Tuple[ClusterNode, ClusterNode]] = {}

    # ---- life cycle

    def start(self, timeout: float = 60.0) -> "RedisCluster":
        try:
            for n in self.nodes:
                n.start()
            self._create(timeout)
            self.wait_healthy(timeout, created=True)
        except BaseException:
            self.close()
            raise
        return self

    def _cli_args(self) -> List[str]:
        args = []
        if self.tls is not None:
            args += ["--tls", "--cacert", self.tls.ca, "--cert", self.tls.client_cert, "--key", self.tls.client_key]
        if self.password:
            args += ["-a", self.password, "--no-auth-warning"]
        return args

    def _create(self, timeout: float) -> None:
        exe = shutil.which("redis-cli")
        if exe is None:
            raise RuntimeError("redis-cli not found (the test command installs it)")
        cmd = [exe, *self._cli_args(), "--cluster", "create", *self.seeds(),
               "--cluster-replicas", str(self.replicas_count), "--cluster-yes"]
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0 or "[OK] All 16384 slots covered" not in r.stdout:
            raise RuntimeError(f"redis-cli --cluster create failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")

    def close(self) -> None:
        """Kills every node and removes their directories. (SIGKILL: nothing
        is kept, and a master's SIGTERM shutdown waits up to 10 s for a
        lagging replica.)"""
        for n in self.nodes:
            n.kill()
            n.close()

    def __enter__(self) -> "RedisCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- addresses

    def seeds(self, nodes: Optional[Sequence[ClusterNode]] = None) -> List[str]:
        """["127.0.0.1:P", ...] of nodes (default: all, in index order)."""
        return [n.address for n in (self.nodes if nodes is None else nodes)]

    def url(self, nodes: Optional[Sequence[ClusterNode]] = None, **options) -> str:
        """redis-cluster://[:password@]127.0.0.1:P1,...[?options] with nodes as
        the seeds (default: all); rediss-cluster:// and cacert= first with tls.
        Options are appended as given (connect_timeout=..., ...)."""
        scheme = "redis-cluster"
        if self.tls is not None:
            scheme = "rediss-cluster"
            options = {"cacert": self.tls.ca, **options}
        auth = f":{self.password}@" if self.password else ""
        return f"{scheme}://{auth}{','.join(self.seeds(nodes))}{tls_query(**options)}"

    def node_by_id(self, node_id: str) -> ClusterNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node with id {node_id}")

    def node_at(self, port: int) -> ClusterNode:
        for n in self.nodes:
            if n.port == port:
                return n
        raise KeyError(f"no node on port {port}")

    # ---- topology (as the cluster sees it right now)

    def running(self) -> List[ClusterNode]:
        return [n for n in self.nodes if n.running()]

    def view(self, node: Optional[ClusterNode] = None) -> Dict[str, NodeView]:
        """CLUSTER NODES of node, or of the first running node that answers."""
        if node is not None:
            return parse_cluster_nodes(node.call("CLUSTER", "NODES"))
        last: Optional[BaseException] = None
        for n in self.running():
            try:
                return parse_cluster_nodes(n.call("CLUSTER", "NODES"))
            except (OSError, RedisError) as e:
                last = e
        raise RuntimeError(f"no cluster node answers CLUSTER NODES (last error: {last})")

    def masters(self) -> List[ClusterNode]:
        """Running masters that are not failed, ordered by their lowest slot
        (masters without slots last)."""
        view = self.view()
        ms = [(min(v.ranges, default=(SLOTS, 0))[0], self.node_by_id(v.id)) for v in view.values()
              if v.role == "master" and not v.failing]
        return [n for _, n in sorted(ms, key=lambda t: (t[0], t[1].index)) if n.running()]

    def replicas(self, master: Optional[ClusterNode] = None) -> List[ClusterNode]:
        """Running replicas (of master, if given), in index order."""
        view = self.view()
        ids = {v.id for v in view.values() if v.role == "slave" and not v.failing
               and (master is None or v.master_id == master.node_id)}
        return [n for n in self.nodes if n.node_id in ids and n.running()]

    def slots_of(self, master: ClusterNode) -> List[Tuple[int, int]]:
        """The slot ranges master owns, inclusive."""
        v = self.view().get(master.node_id)
        return list(v.ranges) if v else []

    def node_for_slot(self, slot: int) -> ClusterNode:
        """The master that owns slot."""
        for v in self.view().values():
            if v.owns(slot):
                return self.node_by_id(v.id)
        raise LookupError(f"slot {slot} has no owner")

    @staticmethod
    def key_slot(key: bytes | str) -> int:
        return key_slot(key)

    def master_for_key(self, key: bytes | str) -> ClusterNode:
        return self.node_for_slot(key_slot(key))

    # ---- conditions

    def healthy(self, created: bool = False) -> bool:
        """The "agree" state of the module docstring, over the running nodes.
        created: also `masters_count` masters with `replicas_count` replicas
        each and every node running (the state right after creation)."""
        running = self.running()
        ref = None
        for n in running:
            if _info(n.call("CLUSTER", "INFO")).get("cluster_state") != "ok":
                return False
            view = parse_cluster_nodes(n.call("CLUSTER", "NODES"))
            roles = {}
            for m in running:
                v = view.get(m.node_id)
                if v is None or v.failing or v.link != "connected":
                    return False
                roles[m.node_id] = (v.role, v.master_id)
            key = (_slot_map(view), roles)
            if ref is None:
                ref = key
            elif key != ref:
                return False
        if ref is None:
            return False
        slot_map, roles = ref
        if sum(b - a + 1 for a, b, _ in slot_map) != SLOTS:
            return False
        for n in running:
            role, master_id = roles[n.node_id]
            if role == "master":
                if n.role() != "master":
                    return False
                continue
            i = _info(n.call("INFO", "replication"))
            master = next((m for m in running if m.node_id == master_id), None)
            if master is None or i.get("master_link_status") != "up" or i.get("master_port") != str(master.port):
                return False
        if created:
            if len(running) != len(self.nodes):
                return False
            owners = {o for _, _, o in slot_map}
            if len(owners) != self.masters_count:
                return False
            for o in owners:
                if sum(1 for r, m in roles.values() if r == "slave" and m == o) != self.replicas_count:
                    return False
        return True

    def wait_healthy(self, timeout: float = 30.0, created: bool = False) -> None:
        wait_until(lambda: self.healthy(created), timeout,
                   "the cluster to agree (cluster_state:ok, same slot owners and roles on every node, "
                   "replicas linked)" + (f", {self.masters_count} masters with {self.replicas_count} "
                                          "replicas each" if created else ""))

    def _owner_everywhere(self, slots: Sequence[Tuple[int, int]], node: ClusterNode) -> bool:
        """Every running node's view says node owns all of slots (ranges)."""
        for n in self.running():
            view = parse_cluster_nodes(n.call("CLUSTER", "NODES"))
            v = view.get(node.node_id)
            if v is None or not all(any(x <= a and b <= y for x, y in v.ranges) for a, b in slots):
                return False
        return True

    # ---- faults

    def failover(self, master: ClusterNode, replica: Optional[ClusterNode] = None, how: str = "",
                 timeout: float = 30.0) -> ClusterNode:
        """CLUSTER FAILOVER [how: "FORCE" or "TAKEOVER"] on replica (default:
        master's first replica). Returns the replica once it says it is a
        master, every running node names it the owner of master's slots and
        the cluster agrees again (the old master, if running, is then its
        replica). A manual failover that has not happened after its own
        timeout (5 s) is asked for again."""
        slots = self.slots_of(master)
        if replica is None:
            reps = self.replicas(master)
            if not reps:
                raise RuntimeError(f"{master} has no replica to fail over to")
            replica = reps[0]
        asked_at = [None]

        def promoted():
            if replica.role() == "master":
                return self._owner_everywhere(slots, replica)
            now = time.monotonic()
            if asked_at[0] is None or now - asked_at[0] > 6.0:
                asked_at[0] = now
                replica.call("CLUSTER", "FAILOVER", *([how] if how else []))
            return False
        wait_until(promoted, timeout, f"{replica} to take over from {master}")
        self.wait_healthy(timeout)
        return replica

    def kill_master(self, master: ClusterNode, timeout: float = 30.0) -> ClusterNode:
        """SIGKILL of master; returns the replica the cluster promoted, once
        every running node names it the owner of master's slots and the
        cluster agrees again. restart(master) brings the old one back."""
        slots = self.slots_of(master)
        reps = self.replicas(master)
        if not reps:
            raise RuntimeError(f"{master} has no replica that could replace it")
        master.kill()

        def promoted():
            for r in reps:
                if r.running() and r.role() == "master" and self._owner_everywhere(slots, r):
                    return r
            return None
        new = wait_until(promoted, timeout, f"a replica of {master} to be promoted")
        self.wait_healthy(timeout)
        return new

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL of node; returns at once (see wait_healthy)."""
        node.kill()

    def stop(self, node: ClusterNode) -> None:
        """SIGTERM of node, waiting for the process to end but not for the
        cluster to notice (a stopped master's replica is promoted ~2 s later)."""
        node.stop()

    def restart(self, node: ClusterNode, wait: bool = True, timeout: float = 30.0) -> None:
        """Starts a stopped (or running) node again on its ports with its
        nodes.conf; it rejoins under its node id, empty. If it was a master
        that has been replaced meanwhile, the cluster turns it into a replica
        of the node that took its slots. wait: until the cluster agrees again."""
        if node.running():
            node.stop()
        node.start(port=node.port)
        if wait:
            self.wait_healthy(timeout)

    @contextlib.contextmanager
    def paused(self, node: ClusterNode):
        """SIGSTOP of node for the block, SIGCONT after. A paused master is
        failed over after the node timeout, like a dead one; meanwhile the
        node counts as not running() (wait_healthy() ignores it)."""
        node.proc.send_signal(signal.SIGSTOP)
        node.paused = True  # not running(): the topology is asked of the others meanwhile
        try:
            yield node
        finally:
            node.paused = False
            if node.proc is not None:
                node.proc.send_signal(signal.SIGCONT)

    # ---- resharding (the steps of redis-cli's clusterManagerMoveSlot)

    def migrate_slot(self, slot: int, dst: ClusterNode, timeout: float = 30.0) -> int:
        """Moves slot and every key in it from its owner to master dst;
        returns the number of keys moved. = begin_migration + move_keys +
        finish_migration."""
        self.begin_migration(slot, dst)
        moved = self.move_keys(slot)
        self.finish_migration(slot, timeout)
        return moved

    def begin_migration(self, slot: int, dst: ClusterNode) -> ClusterNode:
        """CLUSTER SETSLOT slot IMPORTING src on dst, then MIGRATING dst on
        src (in this order, so that no client is sent by an ASK to a node
        that does not take it yet). Returns src. From now on src answers ASK
        for keys of the slot it no longer has, and dst takes them after ASKING."""
        if slot in self._migrations:
            raise RuntimeError(f"slot {slot} is already being migrated")
        src = self.node_for_slot(slot)
        if src is dst:
            raise ValueError(f"{dst} already owns slot {slot}")
        dst.call("CLUSTER", "SETSLOT", str(slot), "IMPORTING", src.node_id)
        src.call("CLUSTER", "SETSLOT", str(slot), "MIGRATING", dst.node_id)
        self._migrations[slot] = (src, dst)
        return src

    def keys_in_slot(self, node: ClusterNode, slot: int, count: int = 1000) -> List[bytes]:
        """CLUSTER GETKEYSINSLOT on node (up to count keys)."""
        return list(node.call("CLUSTER", "GETKEYSINSLOT", str(slot), str(count)) or [])

    def move_keys(self, slot: int, keys: Optional[Sequence[bytes | str]] = None, batch: int = 100) -> int:
        """MIGRATE keys of a slot under migration from src to dst: the given
        keys (those of them still on src), or every key in the slot (in
        batches, until GETKEYSINSLOT on src is empty). Returns how many moved."""
        src, dst = self._migrations[slot]
        if keys is not None:
            keys = [k.encode() if isinstance(k, str) else k for k in keys]
            other = [k for k in keys if key_slot(k) != slot]
            if other:
                raise ValueError(f"keys not in slot {slot}: {other!r}")
            # (asked of GETKEYSINSLOT: a key command on src would answer ASK for a key already moved)
            on_src = set(self.keys_in_slot(src, slot, src.call("CLUSTER", "COUNTKEYSINSLOT", str(slot)) or 1))
            present = [k for k in keys if k in on_src]
            for i in range(0, len(present), batch):
                self._migrate(src, dst, present[i:i + batch])
            return len(present)
        moved = 0
        while True:
            found = self.keys_in_slot(src, slot, batch)
            if not found:
                return moved
            self._migrate(src, dst, found)
            moved += len(found)

    def _migrate(self, src: ClusterNode, dst: ClusterNode, keys: Sequence[bytes]) -> None:
        auth = ["AUTH", self.password] if self.password else []
        r = src.command("MIGRATE", "127.0.0.1", str(dst.port), "", "0", "5000", *auth, "KEYS", *keys)
        if isinstance(r, RedisError) or r != "OK":
            raise RedisError(f"MIGRATE from {src} to {dst} failed: {r}")

    def finish_migration(self, slot: int, timeout: float = 30.0) -> None:
        """CLUSTER SETSLOT slot NODE dst on dst first, then src, then every
        other running master (redis-cli's order: if dst is told last and
        dies before, the slot has no owner); then waits until every running
        node names dst the owner and no node shows the slot importing or
        migrating. src refuses while it still has keys of the slot."""
        src, dst = self._migrations[slot]
        dst.call("CLUSTER", "SETSLOT", str(slot), "NODE", dst.node_id)
        r = src.command("CLUSTER", "SETSLOT", str(slot), "NODE", dst.node_id)
        # a source that just gave away its last slot may already be a replica (redis #9223)
        if isinstance(r, RedisError) and "only with masters" not in str(r):
            raise RedisError(f"CLUSTER SETSLOT {slot} NODE on the source {src}: {r}")
        for m in self.masters():
            if m is not src and m is not dst:
                m.call("CLUSTER", "SETSLOT", str(slot), "NODE", dst.node_id)
        del self._migrations[slot]

        def settled():
            if not self._owner_everywhere([(slot, slot)], dst):
                return False
            for n in self.running():
                me = next(v for v in parse_cluster_nodes(n.call("CLUSTER", "NODES")).values() if "myself" in v.flags)
                if slot in me.migrating or slot in me.importing:
                    return False
            return True
        wait_until(settled, timeout, f"every node to name {dst} the owner of slot {slot}")
        self.wait_healthy(timeout)


def _serve(argv: List[str]) -> int:
    import argparse
    command: List[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    p = argparse.ArgumentParser(prog="cluster.py --serve")
    p.add_argument("--tls", action="store_true")
    p.add_argument("--masters", type=int, default=3)
    p.add_argument("--replicas", type=int, default=1)
    a = p.parse_args(argv)
    RedisServer.preexec = staticmethod(die_with_parent)  # nothing outlives this process
    tls = None
    cert_dir = None
    if a.tls:
        from tls import make_certs
        cert_dir = tempfile.mkdtemp(prefix="watchlock-certs-")
        tls = make_certs(cert_dir)
    try:
        with RedisCluster(masters=a.masters, replicas=a.replicas, tls=tls) as c:
            if command:
                masters = [str(n.port) for n in c.masters()]
                env = dict(os.environ, WATCHLOCK_URL=c.url(), WATCHLOCK_TEST_PORT=masters[0],
                           WATCHLOCK_CLUSTER_MASTERS=",".join(masters))
                if cert_dir:
                    env["WATCHLOCK_TEST_TLS_DIR"] = cert_dir
                return subprocess.call(command, env=env)
            line = (f"url={c.url()} masters={','.join(str(n.port) for n in c.masters())} "
                    f"replicas={','.join(str(n.port) for n in c.replicas())}")
            if cert_dir:
                line += f" tls_dir={cert_dir}"
            print(line, flush=True)
            sys.stdin.read()  # until the caller closes our stdin (or dies)
    finally:
        if cert_dir:
            shutil.rmtree(cert_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--serve":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # tear down on SIGTERM too
        sys.exit(_serve(sys.argv[2:]))
    sys.exit("usage: cluster.py --serve [--tls] [--masters N] [--replicas R] [-- COMMAND [ARGS...]]")
