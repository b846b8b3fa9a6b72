"""The real host a condense plan runs against: a state directory, a run account, the
operator-state database and one serving unit.

``LocalCondenseHost`` does each step of ``valis_core.ops.condense`` for real, reusing the
pieces that own each concern: ``materialise_genesis`` and ``restore_backup`` for durable
state, the configuration store's file for site facts, ``PgZoneSource.load`` to prove a
zone servable exactly as the resident will load it and ``zone_servable`` that the state
directory holds every signing key operator state names for it, ``boot_certificate`` for
an elected edge's certificate, the SQL fence (seed or claim), a
``UnitController`` to start the unit, and a DNS query to the served address for the
read-back. Everything written into the state directory is written as the run account
(``acting_as``): the resident (never root) must read it, and root must not follow what
that account's directory holds.
"""

from __future__ import annotations

import grp
import os
import pwd
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import psycopg
import trio
from pyroute2 import netns as pyroute2_netns

from valis_core.acting_as import acting_as
from valis_core.apply.unit_control import ProcessUnitController, UnitController
from valis_core.atomic import write_atomic
from valis_core.clock import Clock, monotonic, wall
from valis_core.config_store import (
    DIR_MODE,
    STORE_FILE,
    STORE_MODE,
    open_config_store,
    store_path,
)
from valis_core.dns.dnssec.zone_keys import file_zone, load_key_ring
from valis_core.dns.dnssec.zone_servable import missing_keys
from valis_core.edge.boot_certificate import boot_certificate
from valis_core.fence import StaleClaim
from valis_core.identity.custody import load_keyfile
from valis_core.identity.instance import holder_name, load_or_mint_instance, read_instance
from valis_core.operator_state.connection import connect
from valis_core.operator_state.fence import claim_instance_fence, seed_instance_fence
from valis_core.operator_state.site_facts import (
    EVERY_ZONE,
    check_site_facts,
    parse_site_facts,
)
from valis_core.operator_state.site_facts_file import write_site_facts
from valis_core.operator_state.site_facts_rows import record_served_zones
from valis_core.operator_state.zone_signing import ZoneSigning, signed_zones
from valis_core.operator_state.zone_source import PgZoneSource
from valis_core.operator_state.zones import zone_names
from valis_core.ops.backup import read_backup_set, restore_backup
from valis_core.ops.condense import (
    BackupOlderThanFence,
    CondenseError,
    Step,
    parse_module_requirement,
)
from valis_core.plugin.dist_home import DEFAULT_DIST_HOME, registered_dist
from valis_core.plugin.install import (
    Fetch,
    fetch_modules,
    fetch_url,
    install_checked,
    resolve_pin,
)
from valis_core.plugin.installed import modules_dir
from valis_core.plugin.modules import check_installed
from valis_core.state_layout import CONFIG_STORE, signing_keys_dir
from valis_core.store.head import HEAD_MODE, head_path, materialise_genesis, read_store_head
from valis_core.store.manifest import dumps, normalize_name

Connect = Callable[[], psycopg.Connection[Any]]
"""A new autocommit connection to the operator-state database."""

AskSoa = Callable[[str, tuple[str, int]], dns.message.Message]
"""Ask ``address`` for the apex SOA of a zone; raise when no response comes back."""

READY_TIMEOUT = 60.0
SOA_TIMEOUT = 10.0
_SOA_ATTEMPT = 1.0


class CondenseHostError(CondenseError):
    """One step could not be done on this host."""


def ask_soa_udp(zone: str, address: tuple[str, int]) -> dns.message.Message:
    """The apex SOA question over UDP from this process's own network namespace."""
    host, port = address
    query = dns.message.make_query(zone, dns.rdatatype.SOA)
    return dns.query.udp(query, host, port=port, timeout=_SOA_ATTEMPT)


def ask_soa_in_netns(netns: str) -> AskSoa:
    """Ask from inside the named network namespace, for a unit address the namespace
    ``valis condense`` runs in cannot reach (a dedicated NIC). The socket is made inside
    it (a socket keeps the namespace it was made in) and this thread returns at once, so
    nothing else runs there and no second program is started."""

    def ask(zone: str, address: tuple[str, int]) -> dns.message.Message:
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            pyroute2_netns.pushns(netns)
        except OSError as exc:
            raise CondenseHostError(
                f"cannot enter network namespace {netns} to ask {host}: "
                f"{exc.strerror or exc}"
            ) from exc
        try:
            sock = socket.socket(family, socket.SOCK_DGRAM)
        finally:
            pyroute2_netns.popns()
        with sock:
            query = dns.message.make_query(zone, dns.rdatatype.SOA)
            return dns.query.udp(query, host, port=port, timeout=_SOA_ATTEMPT, sock=sock)

    return ask


def _quiet(_: str) -> None:
    pass


@attrs.define
class LocalCondenseHost:
    """Condense onto this machine.

    ``assess`` raises when the host is not ready (the CLI passes every clause of
    ``valis assess``). ``facts`` are the site facts to render into the configuration store
    (the new location's for evacuate); None keeps the store a backup restored.
    ``holder`` names the node at its location (``node@location``, as the resident names
    itself); at the fence it is qualified by the state directory's instance token.
    ``dns_address`` is where the unit serves, for the apex SOA read-back; ``ask_soa``
    asks it (from another namespace when the served address is not reachable from this
    one). ``dist_home`` holds the registration of the private dist modules are installed
    from; ``fetch`` reads from it. A genesis pins its modules only over https or file
    unless ``allow_insecure_dist``, and ``say`` tells the operator each pin made (name,
    version, sha256, where from) to compare with the wheel published. ``clock`` (wall)
    dates a state directory set aside, ``ticks`` (monotonic) bounds the read-back.
    """

    state_dir: Path
    run_account: tuple[int, int]
    connect: Connect
    unit: UnitController
    holder: str
    dns_address: tuple[str, int]
    assess: Callable[[], None]
    facts: Mapping[str, str] | None = None
    ready_timeout: float = READY_TIMEOUT
    soa_timeout: float = SOA_TIMEOUT
    ask_soa: AskSoa = ask_soa_udp
    dist_home: Path = DEFAULT_DIST_HOME
    fetch: Fetch = fetch_url
    allow_insecure_dist: bool = False
    say: Callable[[str], None] = _quiet
    clock: Clock = wall
    ticks: Clock = monotonic

    def assess_host(self, step: Step) -> None:
        self.assess()

    def materialise_durable_state(self, step: Step) -> None:
        assert step.generation is not None
        if step.backup is None:
            if not self.state_dir.is_dir():
                raise CondenseHostError(
                    f"state directory {self.state_dir} does not exist; create it owned by "
                    "the run account (mode 0700)"
                )
            with acting_as(self.run_account):
                manifest, _ = materialise_genesis(self.state_dir)
            claimed = {step.generation}
        else:
            # resume: a re-run of a condense that stopped part-way finds its own restore.
            restore_backup(Path(step.backup), self.state_dir, owner=self.run_account,
                           resume=True)
            found = read_store_head(self.state_dir)
            if found is None:
                raise CondenseHostError(f"the backup set {step.backup} restored no store head")
            manifest = found
            # An earlier run of this condense may have recorded its claim already.
            claimed = {step.generation, step.generation + 1}
        if manifest.generation not in claimed:
            raise CondenseHostError(
                f"the store head of {self.state_dir} is at generation {manifest.generation}, "
                f"not {step.generation}; condense only into a fresh state directory, or "
                "re-run the condense that made this one"
            )
        with acting_as(self.run_account):
            load_or_mint_instance(self.state_dir)
            if step.backup is not None:
                # The owner seed the backup carried, loaded as the resident's identity
                # stage loads it (genesis mints none here: the resident does).
                load_keyfile(self.state_dir)

    def fence_holder(self) -> str:
        """This state directory's holder at the fence: ``holder`` and its instance token."""
        token = read_instance(self.state_dir)
        if token is None:
            raise CondenseHostError(
                f"no instance token in {self.state_dir}: durable state was never materialised"
            )
        return holder_name(self.holder, token)

    def condense_modules(self, step: Step) -> None:
        # The head's pins are what the resident loads at boot, so they are installed
        # before anything could start; a genesis node's requested modules are pinned to
        # the dist's wheels first and recorded in its head.
        head = read_store_head(self.state_dir)
        if head is None:
            raise CondenseHostError(
                f"no store head in {self.state_dir}: durable state was never materialised"
            )
        if not head.modules and not step.modules:
            return
        index_url = registered_dist(self.dist_home)
        wheels = list(fetch_modules(head.modules, index_url, fetch=self.fetch))
        if step.modules and head.modules:
            # A re-run of a genesis that pinned its modules already: the pins recorded are
            # the node's, whatever the dist offers now.
            def named(name: str, version: str) -> tuple[str, str]:
                return normalize_name(name), version

            requested = {named(*parse_module_requirement(text)) for text in step.modules}
            if requested != {named(pin.name, pin.version) for pin in head.modules}:
                pinned = ", ".join(f"{pin.name}=={pin.version}" for pin in head.modules)
                raise CondenseHostError(
                    f"the store head of {self.state_dir} already pins {pinned}, not the "
                    f"modules asked for ({', '.join(step.modules)}); re-run the condense "
                    "that made it as it was"
                )
            step = attrs.evolve(step, modules=())
        if step.modules:
            resolved = [
                resolve_pin(index_url, *parse_module_requirement(text), fetch=self.fetch,
                            allow_insecure=self.allow_insecure_dist)
                for text in step.modules
            ]
            for pin, _ in resolved:
                self.say(
                    f"valis: pinned {pin.name}=={pin.version} to sha256 {pin.sha256}, as "
                    f"{index_url} serves it; compare it with the wheel you published"
                )
            try:
                head = attrs.evolve(head, modules=(*head.modules, *(pin for pin, _ in resolved)))
            except ValueError as exc:
                raise CondenseHostError(f"the genesis modules cannot be pinned: {exc}") from exc
            wheels += [contents for _, contents in resolved]
        install_checked(self.state_dir, head.modules, wheels, owner=self.run_account)
        if step.modules:
            path = head_path(self.state_dir)
            with acting_as(self.run_account):
                write_atomic(path, dumps(head), mode=HEAD_MODE)
        # Read back as the resident will at boot: the installed modules are the pinned.
        with acting_as(self.run_account):
            check_installed(modules_dir(self.state_dir), head.modules)

    def render_site_facts(self, step: Step) -> None:
        path = store_path(self.state_dir)
        if self.facts is not None:
            check_site_facts(self.facts)
            with acting_as(self.run_account):
                path.parent.mkdir(mode=DIR_MODE, exist_ok=True)
                write_site_facts(path, self.facts, mode=STORE_MODE)
        # Read back through the resident's own reader (an empty environment: the store
        # alone must carry every fact).
        open_config_store(self.state_dir, {})

    def prove_zone_servable(self, step: Step) -> None:
        # Before the fence is claimed (the predecessor fenced out), whatever the
        # resident's bring-up would refuse the zone for: its rows, and for a zone signed
        # in operator state every key its signing and its roll need, held in this state
        # directory (decided by ``zone_servable``, as the resident decides it).
        # Every zone (``*``): one load of them all, and every signed zone's keys.
        assert step.zone is not None
        source = PgZoneSource(self.connect, [step.zone])
        try:
            trio.run(source.load)
        finally:
            source.close()
        with self.connect() as conn:
            signed = signed_zones(conn)
        for zone in source.zones:
            if zone in signed:
                self._prove_keys(zone, signed[zone])

    def _prove_keys(self, zone: str, row: ZoneSigning) -> None:
        with acting_as(self.run_account):
            held = load_key_ring(self.state_dir).get(file_zone(zone), {})
        shortfall = missing_keys(row, held)
        if shortfall is not None:
            raise CondenseHostError(
                f"{shortfall.describe()} in {signing_keys_dir(self.state_dir)}, so the "
                "resident would answer it SERVFAIL and stop at bring-up; nothing was "
                "claimed at the fence, so the node holding it serves on. A backup set taken "
                "before the zone was signed or its rollover began lacks the key: make a new "
                "one on the node holding the fence (valis backup create) and condense from "
                "that"
            )

    def prove_edge_servable(self, step: Step) -> None:
        # The elected edge's certificate, as the resident's edge stage will find it: the
        # site facts say whether the node obtains one over ACME or waits for one.
        config = open_config_store(self.state_dir, {})
        with acting_as(self.run_account):
            boot_certificate(
                self.state_dir, acme=config.obtains_certificate,
                on_demand=config.edge_on_demand,
            )

    def seed_fence(self, step: Step) -> None:
        holder = self.fence_holder()
        with self.connect() as conn:
            seeded = seed_instance_fence(conn, holder)
        if seeded.generation != step.generation:
            raise CondenseHostError(
                f"the fence already stands at generation {seeded.generation} (held by "
                f"{seeded.holder}); a genesis node could never write there: evacuate or "
                "restore from that holder's backup instead"
            )
        self.record_served_zones()

    def record_served_zones(self) -> None:
        # Once this node holds the fence: the zones it serves, under its node name in
        # operator state, so `valis zone list` names it under SERVED BY and `valis zone
        # delete` refuses them without --force. Written after the claim, so a condense
        # refused before it leaves the database as it was; keyed by the node name, so an
        # evacuation keeping the name rewrites its predecessor's row to the same zones.
        config = open_config_store(self.state_dir, {})
        with self.connect() as conn:
            record_served_zones(conn, config.node_name, config.served_zones)

    def claim_fence(self, step: Step) -> None:
        # The claim and the head are one recoverable act: the claim commits first, then
        # the head records it. Stopped between the two (or anywhere after), the same
        # condense re-run resumes this directory's restore, re-claims its own generation
        # as the no-op the fence allows its holder, and writes the head again.
        assert step.generation is not None
        holder = self.fence_holder()
        with self.connect() as conn:
            try:
                claim_instance_fence(conn, step.generation, holder)
            except StaleClaim as exc:
                raise BackupOlderThanFence(
                    step.generation - 1, exc.current, self.clear_state_command()
                ) from exc
        self.record_served_zones()
        manifest = read_store_head(self.state_dir)
        if manifest is None:
            raise CondenseHostError(f"no store head in {self.state_dir} to record the claim")
        if manifest.generation == step.generation:
            return
        path = head_path(self.state_dir)
        with acting_as(self.run_account):
            write_atomic(path, dumps(attrs.evolve(manifest, generation=step.generation)),
                         mode=HEAD_MODE)

    def clear_state_command(self) -> str:
        """The commands that move this state directory aside and make it again, empty and
        the run account's: what a restore from another backup set needs first."""
        uid, gid = self.run_account
        try:
            owner = pwd.getpwuid(uid).pw_name
        except KeyError:
            owner = str(uid)
        try:
            group = grp.getgrgid(gid).gr_name
        except KeyError:
            group = str(gid)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock()))
        aside = f"{self.state_dir}.older-{stamp}"
        return (
            f"mv {self.state_dir} {aside} && install -d -o {owner} -g {group} -m 0700 "
            f"{self.state_dir} (keep {aside} until the new restore serves: it holds the "
            "owner seed)"
        )

    def start_unit(self, step: Step) -> None:
        self.unit.restart()

    def read_back_ready(self, step: Step) -> None:
        if not self.unit.wait_up(self.ready_timeout):
            raise CondenseHostError(
                f"the unit did not say READY=1 within {self.ready_timeout:.0f}s; read its "
                "log for the bring-up stage that failed"
            )

    def read_back_apex_soa(self, step: Step) -> None:
        assert step.zone is not None
        deadline = self.ticks() + self.soa_timeout
        zones = [step.zone]
        if step.zone == EVERY_ZONE:  # each zone of operator state, within one timeout
            with self.connect() as conn:
                zones = list(zone_names(conn))
        for zone in zones:
            self._read_back_soa(zone, deadline)

    def _read_back_soa(self, zone: str, deadline: float) -> None:
        host, port = self.dns_address
        problem = "no answer"
        while self.ticks() < deadline:
            try:
                response = self.ask_soa(zone, self.dns_address)
            except (dns.exception.DNSException, OSError, CondenseHostError) as exc:
                problem = f"no answer ({exc or type(exc).__name__})"
                time.sleep(0.1)
                continue
            authoritative = bool(response.flags & dns.flags.AA)
            has_soa = any(r.rdtype == dns.rdatatype.SOA for r in response.answer)
            if response.rcode() == dns.rcode.NOERROR and authoritative and has_soa:
                return
            problem = (
                f"rcode {dns.rcode.to_text(response.rcode())}, "
                f"{'authoritative' if authoritative else 'not authoritative'}, "
                f"{'with' if has_soa else 'without'} the SOA"
            )
            time.sleep(0.1)
        raise CondenseHostError(
            f"the apex SOA of {zone} at {host} port {port}: {problem}"
        )



def let_unit_notify(unit: ProcessUnitController, run_account: tuple[int, int]) -> None:
    """Let the run account reach ``unit``'s ``NOTIFY_SOCKET``.

    The controller's socket lives in a 0700 directory of whoever made it (root here);
    the resident runs as the run account behind a launcher that drops privilege, and
    says READY=1 itself, so the directory and the socket become the run account's.
    """
    uid, gid = run_account
    os.chown(os.path.dirname(unit.notify_path), uid, gid)
    os.chown(unit.notify_path, uid, gid)


def connect_as_account(dsn: str, run_account: tuple[int, int]) -> Connect:
    """Connections to ``dsn`` made as the run account when this process is root.

    The operator-state DSN is the run account's and PostgreSQL maps OS accounts to roles
    by peer authentication, so root takes the run account's effective ids for the connect
    only (the connection keeps the identity it was opened with).
    """

    def open_connection() -> psycopg.Connection[Any]:
        with acting_as(run_account):
            return connect(dsn, autocommit=True)

    return open_connection


def backup_paths(archive: Path) -> frozenset[str]:
    """The paths (under a state directory) of the files a backup set holds."""
    _, contents = read_backup_set(archive.read_bytes())
    return frozenset(contents)


def backup_site_facts(archive: Path) -> dict[str, str]:
    """The site facts in a backup set's configuration store (restore keeps them)."""
    _, contents = read_backup_set(archive.read_bytes())
    name = f"{CONFIG_STORE}/{STORE_FILE}"
    if name not in contents:
        raise CondenseHostError(
            f"the backup set {archive} holds no configuration store ({name}); pass "
            "--site-facts FILE"
        )
    return parse_site_facts(contents[name].decode("utf-8"))
