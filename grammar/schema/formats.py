"""String `format`s as regular languages over the string's characters (before JSON escaping).

Exact for date, date-time, time (RFC 3339, leap years and leap seconds included), uuid, ipv4, ipv6 and uri
(RFC 3986). Two are deliberate subsets, so that the grammar never accepts an invalid value:
  * hostname: RFC 1123 labels (a label starting "xn--" only as an IDNA A-label: "xn--" and LDH
    characters here; whether one is valid needs Punycode decoding and the IDNA2008 rules, which no regex
    does, so schema/labels.py decides it in the matcher): a first label of up to 63 characters and up to
    4 more of up to 20, which keeps the 253-character total. Every counted character is a state of the
    token automaton, and outlines-core stores a token map per state, so the exact rule (8+ labels of 63)
    would cost ~4x more.
  * time / date-time: a leap second (":60") is allowed with offsets whose minutes are :00 or :30.
email is the RFC 5321 `Mailbox` syntax (section 4.1.2: dot-atom or quoted local part; a domain of
LDH sub-domains, or an IPv4 or IPv6 address literal); the size limits of section 4.5.3 are not syntax and
are not counted (counting would cost one automaton state per character, see hostname).
"""

from __future__ import annotations

import functools

from sprig.grammar.regex import ir
from sprig.grammar.regex.char_classes import Dialect
from sprig.grammar.regex.pattern import regex_language


def _re(pattern: str) -> ir.Node:
    return regex_language(pattern, Dialect.PYTHON, search=False)


_FRAC = r"(?:\.[0-9]+)?"
_MONTH_DAY = (r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
              r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
              r"|02-(?:0[1-9]|1[0-9]|2[0-8]))")
_LEAP_YEAR = r"(?:(?:[02468][048]|[13579][26])00|[0-9]{2}(?:0[48]|[2468][048]|[13579][26]))"
_DATE = rf"(?:[0-9]{{4}}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_OFFSET = r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_HEX = "[0-9A-Fa-f]"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"


def _leap_seconds() -> str:
    """hh:mm:60 for every local time that is 23:59:60 UTC under an offset with :00 or :30 minutes."""
    by_local: dict[str, list[str]] = {"23:59": ["[Zz]", r"[+-]00:00"]}
    for sign in (1, -1):
        for oh in range(24):
            for om in (0, 30):
                if oh == 0 and om == 0:
                    continue
                minutes = (23 * 60 + 59 + sign * (oh * 60 + om)) % (24 * 60)
                local = f"{minutes // 60:02d}:{minutes % 60:02d}"
                by_local.setdefault(local, []).append(("\\+" if sign > 0 else "-") + f"{oh:02d}:{om:02d}")
    return "|".join(f"{local}:60{_FRAC}(?:{'|'.join(offsets)})" for local, offsets in sorted(by_local.items()))


_TIME = rf"(?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]{_FRAC}{_OFFSET}|{_leap_seconds()})"


def _ipv6() -> str:
    h16, ls32 = f"{_HEX}{{1,4}}", f"(?:{_HEX}{{1,4}}:{_HEX}{{1,4}}|{_IPV4})"
    forms = [f"(?:{h16}:){{6}}{ls32}", f"::(?:{h16}:){{5}}{ls32}", f"(?:{h16})?::(?:{h16}:){{4}}{ls32}"]
    for before, after in ((1, f"(?:{h16}:){{3}}{ls32}"), (2, f"(?:{h16}:){{2}}{ls32}"), (3, f"{h16}:{ls32}"),
                          (4, ls32), (5, h16), (6, "")):
        forms.append(f"(?:(?:{h16}:){{0,{before}}}{h16})?::{after}")
    return "(?:" + "|".join(forms) + ")"


def _uri() -> str:
    unreserved, sub_delims, pct = r"A-Za-z0-9\-._~", r"!$&'()*+,;=", f"%{_HEX}{_HEX}"
    pchar = f"(?:[{unreserved}{sub_delims}:@]|{pct})"
    userinfo = f"(?:[{unreserved}{sub_delims}:]|{pct})*"
    reg_name = f"(?:[{unreserved}{sub_delims}]|{pct})*"
    ip_future = f"[vV]{_HEX}+\\.[{unreserved}{sub_delims}:]+"
    host = f"(?:\\[(?:{_ipv6()}|{ip_future})\\]|{_IPV4}|{reg_name})"
    authority = f"(?:{userinfo}@)?{host}(?::[0-9]*)?"
    segment, segment_nz = f"{pchar}*", f"{pchar}+"
    hier = (f"(?://{authority}(?:/{segment})*|/(?:{segment_nz}(?:/{segment})*)?"
            f"|{segment_nz}(?:/{segment})*|)")
    tail = f"(?:[/?]|{pchar})*"
    return f"[A-Za-z][A-Za-z0-9+\\-.]*:{hier}(?:\\?{tail})?(?:#{tail})?"


def _label(max_len: int) -> str:
    """An RFC 1123 label that does not start with "xn--" (those are `_a_label`s); "ab--cd" is one."""
    a, ldh = "[A-Za-z0-9]", "[A-Za-z0-9-]"
    not_xn = f"(?:[A-WYZa-wyz0-9]{ldh}|[Xx][A-MO-Za-mo-z0-9-])"
    return (f"(?:{a}|{a}{a}|{a}{ldh}{a}|{a}{ldh}{ldh}{a}"
            f"|{not_xn}{ldh}{ldh}{ldh}{{0,{max_len - 5}}}{a}|[Xx][Nn](?:{a}{ldh}|-{a}){ldh}{{0,{max_len - 5}}}{a})")


def _a_label(max_len: int) -> str:
    """"xn--" and LDH characters: a candidate A-label, decided by the matcher (grammar/schema/labels.py)."""
    return f"[Xx][Nn]--[A-Za-z0-9-]{{0,{max_len - 5}}}[A-Za-z0-9]"


def _hostname() -> str:
    first, rest = f"(?:{_label(63)}|{_a_label(63)})", f"(?:{_label(20)}|{_a_label(20)})"
    return f"{first}(?:\\.{rest}){{0,4}}"


def _email() -> str:
    atext = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\-]"
    local = rf"(?:{atext}+(?:\.{atext}+)*|\"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*\")"
    sub_domain = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"  # why: the Mailbox ABNF counts nothing
    domain = rf"(?:{sub_domain}(?:\.{sub_domain})*|\[{_IPV4}\]|\[IPv6:{_ipv6()}\])"
    return f"{local}@{domain}"


_FORMATS = {
    "date": lambda: _DATE,
    "time": lambda: _TIME,
    "date-time": lambda: f"{_DATE}[Tt]{_TIME}",
    "uuid": lambda: f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "ipv4": lambda: _IPV4,
    "ipv6": _ipv6,
    "uri": _uri,
    "hostname": _hostname,
    "email": _email,
}
SUPPORTED_FORMATS = frozenset(_FORMATS)


@functools.cache
def format_language(name: str) -> ir.Node:
    """The values a `format` accepts; KeyError for formats sprig does not support."""
    return _re(_FORMATS[name]())
