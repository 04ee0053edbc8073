"""String formats (``format`` keyword) as regexes, written from their RFCs, and a check of a value against one."""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema

_HEX = "[0-9a-fA-F]"
_DEC_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_IPV4 = rf"(?:{_DEC_OCTET}\.){{3}}{_DEC_OCTET}"
_H16 = f"{_HEX}{{1,4}}"
_LS32 = f"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = "|".join(
    [
        f"(?:{_H16}:){{6}}{_LS32}",
        f"::(?:{_H16}:){{5}}{_LS32}",
        f"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
        f"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
        f"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
        f"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
        f"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
        f"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
        f"(?:(?:{_H16}:){{0,6}}{_H16})?::",
    ]
)
_YEAR = "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"  # 0001-9999, as Python's datetime
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"  # Gregorian
_DATE = (
    f"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    f"|{_LEAP_YEAR}-02-29)"
)
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?(?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_DUR_TIME = "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DUR_DATE = "(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
_LABEL = "[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
_ATEXT = r"[a-zA-Z0-9!#$%&'*+\-/=?^_`{|}~]"
_UNRESERVED = r"[a-zA-Z0-9\-._~]"
_PCT = f"%{_HEX}{{2}}"
_SUB_DELIMS = r"[!$&'()*+,;=]"
_PCHAR = f"(?:{_UNRESERVED}|{_PCT}|{_SUB_DELIMS}|[:@])"
_URI = (
    r"[a-zA-Z][a-zA-Z0-9+\-.]*:"
    "(?:"
    f"//(?:(?:{_UNRESERVED}|{_PCT}|{_SUB_DELIMS}|:)*@)?"
    rf"(?:\[(?:{_IPV6}|v{_HEX}+\.(?:{_UNRESERVED}|{_SUB_DELIMS}|:)+)\]|{_IPV4}|(?:{_UNRESERVED}|{_PCT}|{_SUB_DELIMS})*)"
    "(?::[0-9]*)?"
    f"(?:/{_PCHAR}*)*"
    f"|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?"
    f"|{_PCHAR}+(?:/{_PCHAR}*)*"
    "|"
    ")"
    rf"(?:\?(?:{_PCHAR}|[/?])*)?"
    rf"(?:#(?:{_PCHAR}|[/?])*)?"
)

#: String formats and their full-match regexes (in the syntax Python's ``re`` and llguidance share): RFC 3339 dates
#: and times (+ appendix A; real Gregorian days of 0001-9999, as ``datetime.date`` accepts), RFC 5321 email
#: (dot-string or IPv4 literal), RFC 1123 hostname, RFC 3986 ipv4/ipv6/uri, RFC 4122 uuid.
FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}[tT]{_TIME}",
    "duration": f"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)",
    "email": rf"{_ATEXT}+(?:\.{_ATEXT}+)*@(?:{_LABEL}(?:\.{_LABEL})*|\[{_IPV4}\])",
    "hostname": f"{_LABEL}(?:\\.{_LABEL})*",
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uuid": f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "uri": _URI,
}

#: Length limits, as extra regexes a value must also fully match: email RFC 5321 section 4.5.3.1 (local part at
#: most 64 octets, the address 254), hostname RFC 1035 section 2.3.4 (253 characters without the final dot).
FORMAT_LIMITS: dict[str, tuple[str, ...]] = {
    "email": ("[^@]{1,64}@[^@]+", "(?s:.{3,254})"),
    "hostname": ("(?s:.{1,253})",),
}


#: Formats Pydantic writes for types whose JSON value is any string (``Path``, ``bytes``, ``SecretStr``...): they
#: name no syntax, so the grammar writes a free string and the tool's own validation checks the value.
FREE_FORMATS: frozenset[str] = frozenset(
    {"path", "file-path", "directory-path", "new-path", "binary", "password"}
)


def format_matches(name: str, value: str) -> bool:
    """Whether ``value`` is a string of format ``name`` (a key of :data:`FORMATS`), its length limits
    (:data:`FORMAT_LIMITS`) included. Raises ``KeyError`` for an unknown format."""
    return all(re.fullmatch(rx, value) is not None for rx in (FORMATS[name], *FORMAT_LIMITS.get(name, ())))


@functools.cache
def grammar_format_checker() -> Any:
    """A ``jsonschema.FormatChecker`` (built once) of exactly the string formats the tool-call grammar enforces
    (:data:`FORMATS`, with their regexes and length limits), so a remote model is held to what the embedded
    one can write; values that are not strings pass."""
    checker = jsonschema.FormatChecker(formats=())
    for fmt in FORMATS:

        def check(value: Any, _fmt: str = fmt) -> bool:
            return not isinstance(value, str) or format_matches(_fmt, value)

        checker.checks(fmt)(check)
    return checker
