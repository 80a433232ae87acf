"""The AVCC code: ``MA.156.10005.8361/0000002QJ`` — what each segment means, how it is made
and checked. Pure: no I/O.

The seed writes codes as ``MA.156.10005.8361/…``, the form of an MA identifier (the
ISO/IEC 15459 issuing agency "MA"):

=========  =========  ===========================================================
segment    example    meaning
=========  =========  ===========================================================
``MA``     ``MA``     the identifier scheme
country    ``156``    ISO 3166-1 numeric code of the issuer's country (156: China)
issuer     ``10005``  the issuer's registered code under that country
node       ``8361``   the platform node that issued it (the seed's ``platform_node``)
serial     ``0000002Q``  the work's ``avcc_record_id`` (98) in base 36, 8 characters or more
check      ``J``      the check character (below)
=========  =========  ===========================================================

The serial is the record id, so a record has one code whatever retries happen and two
records never share one; the ``avcc_code`` column is also unique. The check character is
ISO 7064 MOD 37,36 (python-stdnum) over the scheme, country, issuer, node and serial, so a
mistyped or swapped character anywhere in the code is caught before any look-up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stdnum.iso7064 import mod_37_36

from aigc_hub.core.errors import InvalidInput

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_SERIAL_WIDTH = 8
_CODE = re.compile(
    r"^MA\.(?P<country>[0-9]{3})\.(?P<issuer>[0-9]{3,8})\.(?P<node>[0-9]{2,8})"
    r"/(?P<serial>[0-9A-Z]{8,13})(?P<check>[0-9A-Z])$"
)


class InvalidCode(InvalidInput):
    """Not an AVCC code: wrong form or check character."""

    def __init__(self, message: str) -> None:
        super().__init__("code", message)


@dataclass(frozen=True)
class CodeParts:
    """A code taken apart."""

    country: str
    issuer: str
    node: str
    record_id: int


def _base36(n: int) -> str:
    digits = []
    while True:
        n, rest = divmod(n, 36)
        digits.append(_ALPHABET[rest])
        if n == 0:
            return "".join(reversed(digits)).rjust(_SERIAL_WIDTH, "0")


def _checked(country: str, issuer: str, node: str, serial: str) -> str:
    return mod_37_36.calc_check_digit(f"MA{country}{issuer}{node}{serial}")


def make_code(country: str, issuer: str, node: str, record_id: int) -> str:
    """The code of record ``record_id`` issued by ``issuer`` at ``node`` in ``country``."""
    if record_id < 1:
        raise ValueError("record ids start at 1")
    serial = _base36(record_id)
    return f"MA.{country}.{issuer}.{node}/{serial}{_checked(country, issuer, node, serial)}"


def parse_code(code: str) -> CodeParts:
    """The parts of ``code``; :class:`InvalidCode` when its form or check character is wrong."""
    found = _CODE.fullmatch(code.strip().upper())
    if found is None:
        raise InvalidCode(
            "not an AVCC code: expected MA.<country>.<issuer>.<node>/<serial><check>, "
            "e.g. MA.156.10005.8361/0000002QJ"
        )
    country, issuer, node = found["country"], found["issuer"], found["node"]
    serial = found["serial"]
    if _checked(country, issuer, node, serial) != found["check"]:
        raise InvalidCode("the check character does not match: the code is mistyped")
    return CodeParts(country, issuer, node, int(serial, 36))
