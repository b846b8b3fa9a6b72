"""Obtaining one certificate from an ACME CA (RFC 8555) with certbot's client library.

``acme``/``josepy`` do the protocol (JWS, nonces, the resources); this module walks one
order through ``acme_order``'s table and does nothing else: it is synchronous (the
library speaks ``requests``), so the resident runs it in a worker thread. The DNS-01
record is published and withdrawn through the callables it is given (the resident's
fenced writes); the record is withdrawn however the order ends.

The account is the one the account key names: registered on first use (agreeing to the
CA's terms, as an unattended node must), found again afterwards (a restored node is the
same account). The CA's TLS is verified against the system's roots, or the bundle named
by ``REQUESTS_CA_BUNDLE`` for a private CA.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable

import attrs
import requests
from acme import challenges, client, crypto_util, errors, messages
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from josepy.jwa import ES256
from josepy.jwk import JWKEC

from valis_core.clock import local_now
from valis_core.edge.acme_order import Event, Order, advance, needs_withdrawal
from valis_core.errors import ValisError

log = logging.getLogger("valis.edge")

USER_AGENT = "valis"
NETWORK_TIMEOUT = 30
"""Seconds one HTTP request to the CA may take."""

ORDER_BOUND = 300.0
"""Seconds the CA gets to validate the challenge, and again to issue."""


class AcmeError(ValisError):
    """The CA refused or failed an order; the node keeps its current certificate."""


@attrs.frozen
class AcmeRequest:
    """What to ask for and of whom."""

    directory_url: str
    domain: str
    account_key_pem: bytes = attrs.field(repr=False)
    leaf_key_pem: bytes = attrs.field(repr=False)


Publish = Callable[[str], None]
"""Publishes the DNS-01 TXT value (a committed write, or an exception and nothing)."""
Served = Callable[[str], None]
"""Returns once the node answers the published value (raises when it does not in time)."""
Withdraw = Callable[[], None]
"""Removes the DNS-01 TXT record."""


def _account_jwk(pem: bytes) -> JWKEC:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise AcmeError("edge: the ACME account key is not an ECDSA key")
    return JWKEC(key=key)


def _client(request: AcmeRequest, jwk: JWKEC) -> client.ClientV2:
    net = client.ClientNetwork(
        jwk, alg=ES256, user_agent=USER_AGENT, timeout=NETWORK_TIMEOUT
    )
    directory = client.ClientV2.get_directory(request.directory_url, net)
    acme = client.ClientV2(directory, net)
    registration = messages.NewRegistration.from_data(terms_of_service_agreed=True)
    try:
        acme.new_account(registration)
        log.info("edge: ACME account registered at %s", request.directory_url)
    except errors.ConflictError as known:
        # The key is already an account there (a restart, a restore): use it.
        net.account = messages.RegistrationResource(
            uri=known.location, body=messages.Registration()
        )
        log.info("edge: ACME account %s found again", known.location)
    return acme


def _dns01(authz: messages.AuthorizationResource) -> messages.ChallengeBody:
    for challb in authz.body.challenges:
        if isinstance(challb.chall, challenges.DNS01):
            return challb
    raise AcmeError(
        f"edge: the CA offers no dns-01 challenge for {authz.body.identifier.value}; "
        "this node answers DNS-01 only"
    )


def _deadline() -> datetime.datetime:
    # The library compares with a naive local datetime.now(), the real clock's: so this
    # reads the real clock too, whatever clock the caller judges by.
    return local_now() + datetime.timedelta(seconds=ORDER_BOUND)


def obtain_certificate(
    request: AcmeRequest,
    publish: Publish,
    served: Served,
    withdraw: Withdraw,
    on_step: Callable[[Order], None] = lambda order: None,
) -> bytes:
    """Order, validate (DNS-01) and finalize one certificate for ``request.domain``;
    the issued chain (PEM, leaf first). Raises ``AcmeError`` on the CA's refusal or
    failure; a ``FencedOut`` from ``publish`` propagates (nothing was published)."""
    order = Order()

    def step(event: Event, reason: str = "") -> None:
        nonlocal order
        order = advance(order, event, reason)
        on_step(order)

    try:
        jwk = _account_jwk(request.account_key_pem)
        acme = _client(request, jwk)
        csr = crypto_util.make_csr(request.leaf_key_pem, [request.domain])
        orderr = acme.new_order(csr)
        step(Event.ORDERED)
        pending = [a for a in orderr.authorizations if a.body.status != messages.STATUS_VALID]
        if pending:
            challb = _dns01(pending[0])
            assert isinstance(challb.chall, challenges.DNS01)
            value = challb.chall.validation(jwk)
            publish(value)
            step(Event.PUBLISHED)
            served(value)
            acme.answer_challenge(challb, challb.chall.response(jwk))
            step(Event.ANSWERED)
            orderr = acme.poll_authorizations(orderr, _deadline())
        step(Event.VALIDATED)
        withdraw()
        step(Event.WITHDRAWN)
        orderr = acme.finalize_order(orderr, _deadline())
        step(Event.ISSUED)
        chain = orderr.fullchain_pem
        if not chain:
            raise AcmeError("edge: the CA finalized the order but sent no certificate")
        return chain.encode("ascii")
    except (errors.Error, messages.Error, requests.RequestException, ValueError,
            OSError) as exc:
        reached = order.stage.value
        if not order.done:
            step(Event.FAILED, _describe(exc))
        raise AcmeError(
            f"edge: ACME order for {request.domain} at {request.directory_url} failed "
            f"after {reached!r}: {_describe(exc)}; the node keeps its current certificate "
            "and tries again later"
        ) from None
    finally:
        if needs_withdrawal(order):
            try:
                withdraw()
            finally:
                order = advance(order, Event.WITHDRAWN)
                on_step(order)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, errors.ValidationError):
        problems = [
            str(challb.error)
            for authz in exc.failed_authzrs
            for challb in authz.body.challenges
            if challb.error is not None
        ]
        return "validation failed: " + "; ".join(problems)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
