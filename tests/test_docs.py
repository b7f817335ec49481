"""The documentation holds together: every relative link in README.md and docs/ reaches a file, and an anchor
a heading of that file; a page's table of contents lists its sections in order and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ballast.cli import build_parser
from ballast.testing.parts import ROOT

PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "scheduler_config" / "examples" / "README.md",
]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
TOC_LINE = re.compile(r"^ *- \[(?P<title>.+)\]\(#(?P<anchor>[^)]+)\)$")


def prose(text: str) -> str:
    """The page without its code blocks (a ``# comment`` in a shell block is not a heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def headings(text: str) -> list[tuple[int, str]]:
    return [(len(m[1]), m[2].strip()) for m in re.finditer(r"^(#{1,6}) (.+)$", prose(text), flags=re.M)]


def anchors(text: str) -> list[str]:
    """GitHub's anchors: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``, repeats
    numbered ``-1``, ``-2``."""
    seen: dict[str, int] = {}
    out = []
    for _, title in headings(text):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.append(slug if n == 0 else f"{slug}-{n}")
    return out


def test_anchors_follow_githubs_rules() -> None:
    text = "# A\n## The `x` label: y, z (w)\n```\n# not a heading\n```\n"
    text += "## Sidecar or Service?\n## Sidecar or Service?\n"
    assert anchors(text) == ["a", "the-x-label-y-z-w", "sidecar-or-service", "sidecar-or-service-1"]


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    text = page.read_text()
    targets = LINK.findall(prose(text))
    assert targets, f"{page.name} links nowhere"
    for target in targets:
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target} does not exist"
        assert ROOT in linked.parents, f"{page.name}: {target} leaves the repository"
        if anchor:
            assert linked.suffix == ".md", f"{page.name}: {target} has an anchor into a non-page"
            assert anchor in anchors(linked.read_text()), f"{page.name}: no heading for #{anchor} in {path}"


def test_every_page_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        link = page.relative_to(ROOT).as_posix()
        assert f"]({link})" in readme, f"the README does not link {link}"


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_a_table_of_contents_lists_the_sections_in_order(page: Path) -> None:
    """A long page has a table of contents (links to its own anchors before its first section). It names
    every ``##`` section, in the page's order, with its heading's title; ``###`` entries are optional, but
    each one given is a heading of the page, in order too."""
    text = page.read_text()
    first_section = re.search(r"^## ", text, flags=re.M)
    toc = [
        (m["title"], m["anchor"])
        for line in text[: first_section.start() if first_section else 0].splitlines()
        if (m := TOC_LINE.match(line))
    ]
    if not toc:
        assert len(text.splitlines()) < 150, f"{page.name} is long: give it a table of contents"
        return
    entries = [
        (title, anchor, level) for (level, title), anchor in zip(headings(text), anchors(text), strict=True)
    ]
    order = {(title, anchor): i for i, (title, anchor, level) in enumerate(entries) if level in (2, 3)}
    for entry in toc:
        assert entry in order, f"{page.name}: the TOC entry {entry} is no section of the page"
    assert [order[e] for e in toc] == sorted(order[e] for e in toc), f"{page.name}: the TOC is out of order"
    sections = [(title, anchor) for title, anchor, level in entries if level == 2]
    assert [e for e in toc if e in sections] == sections, f"{page.name}: the TOC does not list every section"


def _program_flags(command: str) -> set[str]:
    parser = next(a for a in build_parser()._actions if a.dest == "command").choices[command]  # type: ignore[attr-defined]
    parsers = [
        parser,
        *(sub for a in parser._actions if a.dest == "agent_command" for sub in a.choices.values()),
    ]
    return {s for p in parsers for a in p._actions for s in a.option_strings if s.startswith("--")} - {
        "--help"
    }


@pytest.mark.parametrize("command", ["extender", "annotator", "rebalancer", "agent"])
def test_the_configuration_reference_lists_every_flag_and_no_other(command: str) -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text.split(f"\n## `ballast {command}` flags\n")[1].split("\n## ")[0]
    section = section.replace("--[no-]", "--no-") + section.replace("--[no-]", "--")  # --[no-]leader-elect
    documented = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", section)) - {"--help"}
    flags = _program_flags(command)
    assert sorted(flags - documented) == [], f"ballast {command}: flags missing from docs/configuration.md"
    assert sorted(documented - flags) == [], f"docs/configuration.md names flags ballast {command} lacks"


def test_the_readme_names_every_package_ci_installs() -> None:
    """Prerequisites and Tests together name what `.ci/run` installs on a bare Debian, so a contributor
    who follows the README runs every test."""
    (ci,) = re.findall(r"^apt_packages=\(([^)]*)\)", (ROOT / ".ci" / "run").read_text(), flags=re.M)
    readme = (ROOT / "README.md").read_text()
    (listed,) = re.findall(r"`apt-get install (prometheus [^`]*)`", readme)
    prerequisites = readme.split("\n## Prerequisites\n")[1].split("\n## ")[0]
    for tool in ("python3-venv", "make", "flock", "jq", "curl"):
        assert re.search(rf"`(apt-get install )?{tool}`", prerequisites), tool
    basics = {"python3", "python3-venv", "make", "util-linux"}  # util-linux: flock
    assert set(listed.split()) == set(ci.split()) - basics
