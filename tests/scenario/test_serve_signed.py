"""`valis serve --sign-key`: a zone file served signed online with a key file, as a
benchmark or a trial signs without a database; dnspython validates what it answers."""

from __future__ import annotations

import time
from pathlib import Path

import dns.message
import dns.name
import dns.query
import dns.rdataclass
import dns.rdatatype

from tests.dns_ask import over_udp
from tests.property.dnssec_check import validate, validate_sections
from tests.scenario.serve_process import ZONE_FILE, run_valis, start_server, stop_server
from valis_core.dns import dnssec
from valis_core.dns.dnssec.zone_keys import encode_key

APEX = dns.name.from_text("example.com.")


def key_file(tmp_path: Path, algorithm: int) -> tuple[Path, int]:
    key = dnssec.ZoneKey(dnssec.generate_key(algorithm))
    path = tmp_path / f"Kexample.com+{algorithm:03d}+{key.tag:05d}.pem"
    path.write_bytes(encode_key(key))
    path.chmod(0o600)
    return path, key.tag


def ask(port: int, name: str, rdtype: str, *, do: bool) -> dns.message.Message:
    return over_udp(port, name, rdtype, do=do, edns=True, timeout=3)


def test_a_zone_served_with_a_sign_key_answers_signed_and_validates(tmp_path: Path) -> None:
    path, tag = key_file(tmp_path, 13)
    server = start_server(tmp_path / "valis.log", extra=("--sign-key", f"example.com={path}"))
    try:
        keys = ask(server.port, "example.com.", "DNSKEY", do=True)
        dnskey = keys.find_rrset(keys.answer, APEX, dns.rdataclass.IN, dns.rdatatype.DNSKEY)
        sig = keys.find_rrset(keys.answer, APEX, dns.rdataclass.IN, dns.rdatatype.RRSIG,
                              dns.rdatatype.DNSKEY)
        assert [dns.dnssec.key_id(key) for key in dnskey] == [tag]
        validate(dnskey, sig, {APEX: dnskey})
        for name in ("www.example.com.", "nowhere.example.com."):
            signed = ask(server.port, name, "A", do=True)
            assert validate_sections(signed, {APEX: dnskey}, now=time.time()) >= 1
            plain = ask(server.port, name, "A", do=False)
            assert not any(rrset.rdtype == dns.rdatatype.RRSIG
                           for rrset in plain.answer + plain.authority)
    finally:
        assert stop_server(server) == 0
    assert f"signing example.com. online with algorithm 13, key tag {tag}" in server.log_text()


def test_a_sign_key_for_a_zone_not_served_is_refused(tmp_path: Path) -> None:
    path, _ = key_file(tmp_path, 15)
    done = run_valis("serve", "--zone", str(ZONE_FILE), "--listen", "127.0.0.1:0",
                     "--sign-key", f"example.org={path}")
    assert done.returncode == 1
    assert "--sign-key names zone example.org., which no --zone serves" in done.stderr
