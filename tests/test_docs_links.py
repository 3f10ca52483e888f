"""Every reference in the repository stays inside it: the relative links of README.md and docs/ resolve to a file
(and a heading, where they name one), and no file points at design notes kept outside the repository."""
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, ...

# References to notes outside the repository (this file, which must spell them, is the only one exempt):
# a section of the design notes ("DESIGN" then a section sign), the notes' file, a path into a folder named
# shared (also ../shared/ and /shared/), and the files of the notes' research and seed folders.
OUTSIDE = re.compile(r"DESIGN\s*\N{SECTION SIGN}|DESIGN\.md|(?<![\w.-])shared/|\bresearch/\w+\.md|\bseed/[\w-]+\.md")
BINARY = {".gz", ".png", ".pdf", ".safetensors", ".pt", ".db", ".whl", ".zip"}


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text without markup, lower case, punctuation dropped, spaces -> hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")  # drops ` and * with the punctuation


def anchors(path: Path) -> Iterator[str]:
    """Anchors of a Markdown file's headings, the n-th repeat of a heading suffixed -n as GitHub does."""
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        yield base if count == 0 else f"{base}-{count}"


def links(path: Path) -> list[str]:
    """The link targets of a Markdown file, outside code blocks and code spans."""
    prose = CODE_SPAN.sub("", FENCE.sub("", path.read_text()))
    return LINK.findall(prose)


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``path`` that name no file inside ``root``, or no heading of the file they name."""
    broken = []
    for target in links(path):
        if EXTERNAL.match(target):
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif not resolved.is_relative_to(root):
            broken.append(f"{target} (outside the repository)")
        elif anchor and resolved.suffix == ".md" and anchor not in set(anchors(resolved)):
            broken.append(f"{target} (no heading #{anchor} in {resolved.relative_to(root)})")
    return broken


def repository_files() -> list[Path]:
    """Tracked and untracked-but-not-ignored files (what a commit would hold), or every file outside .git."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                capture_output=True, check=True).stdout.decode().split("\0")
        return [ROOT / name for name in listed if name and (ROOT / name).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.relative_to(ROOT).parts]


def test_slugs_follow_githubs_rule():
    assert slug("The multi-block testbed (model `tiny-multiblock`, task `multi_sum`)") == \
        "the-multi-block-testbed-model-tiny-multiblock-task-multi_sum"
    assert slug("Carrying runs to another store (`arena export`, `arena import`)") == \
        "carrying-runs-to-another-store-arena-export-arena-import"
    assert slug("Tuning: **arena tune** — [link](x.md)") == "tuning-arena-tune--link"


def test_the_checks_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A heading\n\n[ok](#a-heading) [gone](missing.md) [bad](page.md#nowhere) `[code](x.md)`\n"
                    "```\n[fenced](y.md)\n```\n")
    assert broken_links(page, tmp_path) == ["missing.md (no such file)",
                                            "page.md#nowhere (no heading #nowhere in page.md)"]
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "page.md").write_text("[up](../page.md)\n")
    assert broken_links(tmp_path / "inside" / "page.md", tmp_path / "inside") == ["../page.md (outside the repository)"]
    for text in ("see DESIGN \N{SECTION SIGN}4", "in ../shared/DESIGN.md", "cd /shared/arena", "`shared/x.md`",
                 "research/gpu_anchors.md", "seed/block-grpo-blog.md"):
        assert OUTSIDE.search(text), text
    for text in ("the shared clean stream", "share of prompts", "a not_shared/ folder", "docs/design.md"):
        assert not OUTSIDE.search(text), text


def test_there_are_docs_with_links():
    assert len(DOCS) >= 10 and sum(len(links(doc)) for doc in DOCS) >= 20


@pytest.mark.parametrize("doc", DOCS, ids=[str(doc.relative_to(ROOT)) for doc in DOCS])
def test_every_relative_link_resolves(doc):
    assert not broken_links(doc), f"{doc.relative_to(ROOT)}: broken links: {broken_links(doc)}"


def test_no_file_refers_outside_the_repository():
    found = []
    for path in repository_files():
        if path.suffix in BINARY or path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert len(repository_files()) > 100
    assert not found, "references to notes outside the repository:\n" + "\n".join(found)
