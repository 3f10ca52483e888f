"""The pre-registrations never change: each section of docs/registrations.md (its heading line to the next heading)
must hash to the digest it had when it was written. The digests below were computed from docs/results.md as it stood
before the registrations moved out of it (``git show eba52b2:docs/results.md``, the same heading-to-heading rule),
so they also prove the move was byte for byte. A new registration adds a section and its digest here, in the commit
that registers it; an edit of a registered one fails this test, whatever the edit."""
import hashlib
import re
from pathlib import Path

import pytest

REGISTRATIONS = Path(__file__).resolve().parents[1] / "docs" / "registrations.md"
HEADING = re.compile(r"^#", re.M)

PINNED = {  # heading line -> SHA-256 of the section's UTF-8 bytes
    "## Pre-registration of the second edition (issue 25), short testbed, registered 2026-12-01":
        "69cfd54d997de51ffbf30cc9de236c49632c94ca21eab3b3c64c505be9828cf9",
    "### ES across budgets: the confirmation (`studies/confirm/es_scaling*.yaml`), registered 2026-12-02":
        "d9c5c9c337eeecac3ee1819b8f7d6e67383c4021dfbdd8387aedc3f9bf68d832",
    "### Multi-block ES across budgets (`studies/multiblock_es_scaling*.yaml`), registered 2026-12-02":
        "d7a3f35002e55ed9bc4936cb5c0912724f31f33523c3f5879479628e69f9ce0a",
    "### Multi-block testbed, four methods (`studies/confirm/multiblock.yaml`), registered 2026-12-01":
        "537b6206c6d1a09b74793c3264d722fcfd7b3a7430bc918b91eaec30aa95a00d",
    "### Multi-block testbed, the seed's silent bugs (`studies/confirm/multiblock_silent_bugs.yaml`), registered "
    "2026-12-02": "215f9d41605be279684e597b7506df31b6395797be83fe06ed8c13d7a5a13283",
    "### Multi-block testbed, equal FLOPs (`studies/confirm/multiblock_flops.yaml`), registered 2026-12-02":
        "79af4869abdc1308c627c900515f91b6ed07224f496e0c58a5ef82e25911f035",
    "### Multi-block testbed, estimators (`studies/confirm/multiblock_estimators.yaml`), registered 2026-12-04":
        "e67ad7b1afae314ff41ef1cb72dbf803aaef41496e5723dc66510da9cf0de588",
    "### Multi-block testbed, equal seconds (`studies/confirm/multiblock_wallclock.yaml`), registered 2026-12-05":
        "a7f1e221fc7069795fcd0ff7bba41b5fb43561b634593f0782874bb8cf67984c",
    "### Matched decoding: the sign checks (`studies/confirm/*_matched.yaml`), registered 2026-12-07":
        "d75028dcb56294a45db4893dbc02b8036e28bf5491dc224c6c64782a93623096",
    "### Compute curves on the multi-block testbed (`studies/confirm/multiblock_curves.yaml`), registered 2026-12-07":
        "086dad7cfcb9f81ee2354423e8492abd0bd97f6e0fcb6a38539a2682b53809c2",
}


def sections(text: str) -> dict[str, str]:
    """Each section by its heading line: the text from the heading to the next heading (or the end)."""
    starts = [m.start() for m in HEADING.finditer(text)] + [len(text)]
    return {text[a:b].split("\n", 1)[0]: text[a:b] for a, b in zip(starts, starts[1:])}


def digest(section: str) -> str:
    return hashlib.sha256(section.encode("utf-8")).hexdigest()


@pytest.mark.parametrize("heading", PINNED, ids=[h.split("(")[0].strip("# ") for h in PINNED])
def test_each_registration_is_as_written(heading):
    found = sections(REGISTRATIONS.read_text(encoding="utf-8"))
    assert heading in found, f"docs/registrations.md: the registration {heading!r} is gone or its heading changed"
    assert digest(found[heading]) == PINNED[heading], f"docs/registrations.md: {heading!r} was edited"


def test_the_registrations_keep_their_order():
    headings = [h for h in sections(REGISTRATIONS.read_text(encoding="utf-8")) if h in PINNED]
    assert headings == list(PINNED)


def test_one_changed_byte_fails():
    text = REGISTRATIONS.read_text(encoding="utf-8")
    heading = next(iter(PINNED))
    start = text.index(heading) + len(heading) + 50
    for changed in (text[:start] + ("x" if text[start] != "x" else "y") + text[start + 1:],  # a letter
                    text[:start] + text[start + 1:],  # a letter removed
                    text.replace(heading + "\n", heading + " \n", 1)):  # a trailing space
        section = sections(changed).get(heading)
        assert section is None or digest(section) != PINNED[heading]
