"""coscheduling.api.quantity against the API server's own parser (k8s.io/apimachinery's
resource.ParseQuantity, built from Go modules as gomod/quantitycheck): the same generated
strings, the same answer, accept or refuse, and the same exact value.

Here rather than under tests/unit because, like the control plane, it needs the Go toolchain
(and the module proxy on the first run) to build the parser it compares with. The strings
come from a seeded generator ($COSCHEDULING_QUANTITY_SEED picks another seed).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from coscheduling.api.quantity import CPU, MEMORY, QuantityError, parse_quantity, to_units
from coscheduling.localcluster.build import ensure_quantitycheck

SEED = int(os.environ.get("COSCHEDULING_QUANTITY_SEED", "35"))
GENERATED = 120_000
DECIMAL_SUFFIXES = ("", "n", "u", "m", "k", "M", "G", "T", "P", "E")
BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_GO_SPACE = "\x1c\x1f\u200b\ufeff\x00"
# Characters a mutation inserts: the grammar's own, and some it must refuse.
MUTATION_ALPHABET = ("0123456789.+-eEinumkKMGTPx_ ,/" + GO_SPACE[:6] + NOT_GO_SPACE
                     + "\u0663\uff11\u00e9")
# Known forms, each the kind of string a reader could get wrong.
KNOWN = (
    "1E", "1Ei", "1E3", "1e3", "1e", "1E+", "1e-", "1Ee3", "1Ei3", "E", "e", "e5", "e-10",
    "e-9", "Ki", "Ti", "Pi", "Ei", "+Pi", ".Ki", ".Pi", "+", "-", ".", "+.", "-.e-10", "0",
    "00", "-0", "1.", ".5", "1.5Gi", "0.1Ki", "8Ei", "-8Ei", "7.99999Ei", "100n", "1n",
    "0.1n", "-0.1n", "0.000000001", "0.0000000001", "1e-9", "1e-10", "1e4294967296",
    "1e-4294967297", "1e9223372036854775807", "1e9223372036854775808", "1e-9223372036854775808",
    "9223372036854775807", "9223372036854775808", "9223372036854775807m", "1E+018",
    "123456789012345678", "1234567890123456789", "0.123456789012345678", "1K", "1ki", "1 Ki",
    " 1Ki ", "\t1\n", "1\x1c", "", " ", "1_000", "1,5", "0x10", "1e0x1", "--1", "+-1", "1.2.3",
)


@dataclass(frozen=True)
class Verdict:
    """What Go said about one string: refused, or its exact value and scaled values."""

    refused: bool
    value: Decimal | None = None
    milli: int | None = None
    units: int | None = None


def _digits(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, longest)))


def _number(rng: random.Random) -> str:
    """``<sign><whole>[.<fraction>]``, each part possibly empty."""
    sign = rng.choice(("", "", "+", "-"))
    whole = rng.choice(("", "0", "00", "1", _digits(rng, 3), _digits(rng, 20),
                        "000" + _digits(rng, 3), _digits(rng, 40)))
    fraction = rng.choice(("", "", ".", "." + _digits(rng, 3), "." + _digits(rng, 12),
                           "." + _digits(rng, 40), ".000000001", ".0000000001", ".5"))
    return sign + whole + fraction


def _suffix(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:
        return rng.choice(DECIMAL_SUFFIXES)
    if kind < 0.7:
        return rng.choice(BINARY_SUFFIXES)
    power = rng.choice((rng.randint(-30, 30), rng.randint(-12, -8), rng.randint(17, 20),
                        rng.randint(-2000, 2000), 2**32 + rng.randint(-20, 20),
                        -(2**32) + rng.randint(-20, 20), 2**63 - 1, -(2**63), 2**63))
    sign = "+" if power >= 0 and rng.random() < 0.3 else ""
    zeros = "0" * rng.choice((0, 0, 0, 1, 3))
    text = str(abs(power))
    return rng.choice("eE") + ("-" if power < 0 else sign) + zeros + text


def _spaced(rng: random.Random, text: str) -> str:
    if rng.random() < 0.85:
        return text
    around = GO_SPACE + NOT_GO_SPACE
    return (rng.choice(("", rng.choice(around), rng.choice(around) * 2)) + text
            + rng.choice(("", rng.choice(around))))


def _mutated(rng: random.Random, text: str) -> str:
    """One to three random edits: insert, delete or replace a character."""
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(chars))
        edit = rng.choice(("insert", "delete", "replace"))
        if edit == "insert" or not chars:
            chars.insert(at, rng.choice(MUTATION_ALPHABET))
        elif edit == "delete":
            del chars[min(at, len(chars) - 1)]
        else:
            chars[min(at, len(chars) - 1)] = rng.choice(MUTATION_ALPHABET)
    return "".join(chars)


def generated(seed: int, count: int) -> Iterator[str]:
    """The known forms, every character of the Basic Multilingual Plane before and after a
    quantity (which ones are trimmed as space), then ``count`` strings from the grammar, a
    third of them mutated."""
    rng = random.Random(seed)
    yield from KNOWN
    for char in map(chr, range(0x10000)):
        if not "\ud800" <= char <= "\udfff":  # surrogates are not text
            yield from (char + "1k", "1Ki" + char)
    for _ in range(count):
        text = _number(rng) + _suffix(rng)
        yield _spaced(rng, _mutated(rng, text) if rng.random() < 0.33 else text)


_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)")


def go_can_answer(text: str) -> bool:
    """Go parses a power of ten beyond about 10^100,000 for minutes (it builds the whole
    integer), so such strings are left out; the check reads the text, not either parser."""
    for match in _EXPONENT.finditer(text):
        power = int(match[1]) if len(match[1].lstrip("+-0")) <= 19 else 0
        if abs((power + 2**31) % 2**32 - 2**31) > 100_000:
            return False
    return True


def go_verdicts(texts: list[str]) -> list[Verdict]:
    """Every string through the Go parser in one process call."""
    lines = "".join(json.dumps(text) + "\n" for text in texts)
    result = subprocess.run([str(ensure_quantitycheck())], input=lines, capture_output=True,
                            text=True, timeout=600, check=True)
    answers = result.stdout.splitlines()
    assert len(answers) == len(texts), result.stderr
    return [_verdict(answer) for answer in answers]


def _verdict(answer: str) -> Verdict:
    kind, _, rest = answer.partition(" ")
    if kind == "refused":
        return Verdict(refused=True)
    assert kind == "ok", answer
    unscaled, scale, milli, units = rest.split(" ")
    return Verdict(refused=False, value=Decimal(f"{unscaled}E{-int(scale)}"),
                   milli=None if milli == "-" else int(milli),
                   units=None if units == "-" else int(units))


def disagreement(text: str, go: Verdict) -> str | None:
    """How the Python parser differs from Go on ``text``, or None when they agree. Any
    exception other than QuantityError is a difference: callers catch only that one."""
    try:
        value = parse_quantity(text)
    except QuantityError as err:
        return None if go.refused else f"refused ({err}), Go accepts it as {go.value}"
    except Exception as err:  # what escaped is the finding
        return f"raised {type(err).__name__}: {err}"
    if go.refused:
        return f"accepted as {value}, Go refuses it"
    if value != go.value:
        return f"reads {value}, Go reads {go.value}"
    return _units_disagreement(text, value, go)


def _units_disagreement(text: str, value: Decimal, go: Verdict) -> str | None:
    """Scheduler units agree with Go's MilliValue (cpu) and Value (others) where those fit
    an int64; a negative amount is refused."""
    for resource, expected in ((CPU, go.milli), (MEMORY, go.units)):
        try:
            units = to_units(resource, text)
        except QuantityError:
            if value < 0 or expected is None:
                continue
            return f"{resource}: refused, Go's scaled value is {expected}"
        except Exception as err:  # what escaped is the finding
            return f"{resource}: raised {type(err).__name__}: {err}"
        if value < 0:
            return f"{resource}: the negative amount {value} was accepted as {units}"
        if expected is not None and units != expected:
            return f"{resource}: {units} units, Go says {expected}"
    return None


def test_every_generated_quantity_parses_as_the_api_server_parses_it() -> None:
    candidates = list(generated(SEED, GENERATED))
    texts = [text for text in candidates if go_can_answer(text)]
    verdicts = go_verdicts(texts)
    differences = [(text, why) for text, verdict in zip(texts, verdicts, strict=True)
                   if (why := disagreement(text, verdict)) is not None]
    accepted = sum(not verdict.refused for verdict in verdicts)
    print(f"\nquantity differential (seed {SEED}): {len(texts)} strings, "
          f"{len(texts) - len(differences)} agreed ({accepted} accepted by Go, "
          f"{len(texts) - accepted} refused; {len(candidates) - len(texts)} left out for a "
          f"power of ten beyond 10^100000)")
    assert len(texts) >= 100_000
    assert not differences, f"{len(differences)} of {len(texts)} differ, e.g.:\n" + "\n".join(
        f"{text!r}: {why}" for text, why in differences[:25])
