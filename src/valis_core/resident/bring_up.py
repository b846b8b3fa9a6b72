"""The resident's bring-up as data: ``STAGES``, the ordered table of named stages.

Each stage is an async step over the frozen ``Boot`` context (``valis_core.boot``) that
returns it with its own part added and pushes how to undo itself on the resident's exit
stack. The steps live with the concepts they bring up (the fence watch's beside
``fence_watch``, the edge's in ``edge.stages``, the owner terminus's in ``owner``, …);
this table only orders and names them, and ``resident.run`` runs it. The
``STATUS=bring-up: <stage>`` lines, the teardown log line and the stage table in
docs/resident.md are all made from this one table (``stage_table`` renders the doc's; a
test holds the two equal), so adding a stage is one entry here and its body in its room.
"""

from __future__ import annotations

from collections.abc import Sequence

from valis_core.boot import Stage
from valis_core.edge.stages import acme_elected, edge_elected, keep_certificate, start_edge
from valis_core.owner.terminus_stage import has_owner_descriptor, serve_owner_terminus
from valis_core.plugin.modules import start_modules
from valis_core.resident.adopt_stage import adopt
from valis_core.resident.fabric_stage import start_fabric
from valis_core.resident.fence_stage import open_fence
from valis_core.resident.process import check_codec, launch_argv, refuse_root
from valis_core.resident.push import has_ports_to_push, push
from valis_core.resident.secondaries_stage import offer_transfers
from valis_core.resident.serve_stage import serve_dns
from valis_core.resident.state_stages import load_identity, open_config, read_store_head
from valis_core.resident.zone_stage import index_zones

STAGES: tuple[Stage, ...] = (
    Stage(
        "launch argv",
        "argv read into a launch record",
        "a known flag is malformed",
        launch_argv,
    ),
    Stage(
        "privilege",
        "—",
        "the effective uid is 0 (the resident refuses root)",
        refuse_root,
    ),
    Stage(
        "adopt",
        "each descriptor is asked what it is (`fstat`, `SO_DOMAIN`, `SO_TYPE`, "
        "`SO_ACCEPTCONN`, `getsockname`); logs `adopting DNS descriptor pair udp=… tcp=…`",
        "a descriptor is not what its flag says; a port in `--ports` has no descriptor "
        "bound to it and there is no `--control-socket` to push to (a privileged one: "
        "\"never binds a privileged port itself\"); no complete UDP+TCP pair",
        adopt,
        stops="the listener descriptors close",
    ),
    Stage(
        "codec",
        "the serving stack is imported and answers a synthetic query",
        "\"serving codec not available\"",
        check_codec,
    ),
    Stage(
        "config store",
        "first boot: the site facts are copied into `config/site-facts.env` (0600); later "
        "boots read it and ignore the environment, logging any value that differs",
        "the state directory is unusable; a partial set on first boot; a damaged store",
        open_config,
    ),
    Stage(
        "store head",
        "`store/manifest.json`; written from genesis (generation 0) when absent",
        "an unreadable manifest",
        read_store_head,
    ),
    Stage(
        "identity",
        "the owner key `owner.key`, minted on the first boot only",
        "a loose or damaged keyfile",
        load_identity,
    ),
    Stage(
        "operator state",
        "connects as the run account over the DSN; checks the schema; seeds the fence at "
        "genesis; compares its standing (generation and holder) with the fence's; commits "
        "the first fenced heartbeat",
        "the database is unreachable or unmigrated (`valis db migrate` first); the store "
        "generation is not the fence's, or another instance holds it (**fenced out**: a "
        "restart never takes the fence back)",
        open_fence,
        stops="the fence connection",
    ),
    Stage(
        "zone index",
        "every served zone read from the database in one `COPY` and indexed as its rows "
        "stream in (a load that takes longer than a second tells how far it got, at most "
        "once a second: logs and `STATUS=bring-up: zone index: loading zones: N of M, R "
        "records`), then followed live (LISTEN/NOTIFY)",
        "a served zone is missing or cannot be served",
        index_zones,
        stops="the zone source",
    ),
    Stage(
        "fabric",
        "the internal endpoint starts; its public view must answer every served apex SOA",
        "the view does not answer",
        start_fabric,
        stops="the fabric",
    ),
    Stage(
        "secondaries",
        "the zones' listed secondaries are read (and the fence with them); zone "
        "transfers are offered to them (IXFR from the zones' change journal, which is "
        "pruned while the fence is held) and NOTIFY sent to them on every change",
        "the operator-state database cannot be reached",
        offer_transfers,
        stops="NOTIFY and the secondaries' reader",
    ),
    Stage(
        "serve DNS",
        "UDP and TCP loops on the adopted pair",
        "—",
        serve_dns,
        stops="DNS",
    ),
    Stage(
        "owner terminus",
        "only when `--owner-fd` was handed down: DNS UPDATE on it (see below); logs "
        "`owner terminus: accepting TSIG-signed DNS UPDATE on …`",
        "the operator-state database cannot be reached",
        serve_owner_terminus,
        stops="the owner terminus",
        applies=has_owner_descriptor,
    ),
    Stage(
        "push",
        "only when a served port has no inherited descriptor (the edge's, steered by "
        "fulcrum): a listening TCP socket on an ephemeral loopback port (never a "
        "privileged one) is pushed to fulcrum's control socket — ports declared, the "
        "descriptor sent (SCM_RIGHTS), one bounded reply read; the `edge` stage serves "
        "what the steer delivers; logs `push: fulcrum steers port(s) …`",
        "fulcrum refuses the push (its reason is the cause) or does not answer within 10 s; "
        "the control socket cannot be reached",
        push,
        stops="the pushed edge socket",
        applies=has_ports_to_push,
    ),
    Stage(
        "acme",
        "only when the edge is elected and `VALIS_SERVED_DOMAIN` and "
        "`VALIS_ACME_DIRECTORY_URL` are set: the certificate in `edge/leaf.crt` is served "
        "while it is valid; without one a certificate is obtained over ACME, the DNS-01 "
        "record written into the served zone as a fenced update and withdrawn after "
        "validation (docs/edge.md); renewed in the background when a third of its "
        "lifetime is left",
        "there is no valid certificate and the CA refuses or fails the order (unless "
        "`VALIS_EDGE_CERT=on-demand`); the node is fenced out; the served domain is in no "
        "served zone",
        keep_certificate,
        stops="certificate renewal",
        applies=acme_elected,
    ),
    Stage(
        "edge",
        "only when the edge is elected (`--edge-tcp-fd` adopted, or the push done): DNS "
        "over HTTPS (docs/edge.md) on that listener with the certificate in "
        "`edge/leaf.crt` and `edge/leaf.key`, followed for renewals; with "
        "`VALIS_EDGE_CERT=on-demand` and no certificate yet, the listener waits for one; "
        "logs `edge: serving DNS over HTTPS …`",
        "there is no certificate (unless on demand); the certificate and key do not load "
        "as a pair",
        start_edge,
        stops="the edge",
        applies=edge_elected,
    ),
    Stage(
        "modules",
        "the modules the store head pins, installed by condense in `<state-dir>/modules`: "
        "their `valis.modules` entry points are started (nothing else in the environment "
        "is loaded)",
        "the installed modules are not the pinned ones (condense again); a module cannot "
        "be loaded",
        start_modules,
        stops="modules drain",
    ),
)
"""The bring-up, in order. docs/resident.md's stage table is ``stage_table()``."""


def stage_table(stages: Sequence[Stage] = STAGES) -> str:
    """The Markdown table of ``stages`` docs/resident.md carries."""
    rows = ["| stage | what happens | fails when |", "|---|---|---|"]
    rows += [f"| `{stage.name}` | {stage.does} | {stage.fails_when} |" for stage in stages]
    return "\n".join(rows) + "\n"


def teardown_order(stages: Sequence[Stage] = STAGES) -> str:
    """What stopping does, in the order it does it (the reverse of bring-up)."""
    steps = [stage.stops for stage in reversed(stages) if stage.stops is not None]
    return ", then ".join(steps)
