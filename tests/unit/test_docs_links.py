"""The README is a front page (issue 29): at most 250 lines, linking every page of docs/; every relative link in
README.md and docs/*.md reaches a file that exists, and a ``#anchor`` into a Markdown file a heading it has; the
README's minimal config loads without a problem and its minimal rollout is the example file the tests train."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Set

import pytest
import yaml

from grpo_rollout.config import config_from_dict

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
MAX_README_LINES = 250

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")


def prose_lines(text: str) -> List[str]:
    """The lines outside fenced code blocks, with inline code spans blanked (a link or `#` in code is no link)."""
    lines, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            lines.append("")
            continue
        lines.append("" if in_fence else INLINE_CODE.sub("code", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation (backticks, colons, brackets, ...) dropped, spaces to
    hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> Set[str]:
    """The anchors of a Markdown file's headings, a repeated one numbered as GitHub does (``x``, ``x-1``, ...)."""
    found: Set[str] = set()
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            name, k = base, 0
            while name in found:
                k += 1
                name = f"{base}-{k}"
            found.add(name)
    return found


def relative_links(path: Path) -> List[tuple]:
    """``(line number, target)`` of every link and image in a Markdown file that is not a URL (no scheme)."""
    out = []
    for number, line in enumerate(prose_lines(path.read_text(encoding="utf-8")), start=1):
        for target in LINK.findall(line):
            if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                out.append((number, target))
    return out


def broken_links(path: Path) -> List[str]:
    """``file:line: target (why)`` for each relative link of ``path`` to a missing file or a missing heading."""
    broken = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.name}:{number}: {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where} (no heading with that anchor in {dest.name})")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_relative_link_reaches_a_file_and_heading(page):
    assert relative_links(page) or page.name in ("benchmarks.md", "reliability.md"), "no links found: parser broken?"
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path):
    (tmp_path / "other.md").write_text("# Title\n\n## A `code` heading: (x)\n\n## Twice\n\n## Twice\n\n```bash\n"
                                       "# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-code-heading-x) [ok](other.md#twice-1) [ok](#here) [url](https://example.com/x)\n"
                    "# Here\n"
                    "[gone](missing.md) ![gone](img/none.png) [bad](other.md#not-a-heading) [bad](#nowhere)\n"
                    "`[in code](missing.md)`\n```\n[in a block](missing.md)\n```\n")
    assert broken_links(page) == [
        "page.md:3: missing.md (no such file)",
        "page.md:3: img/none.png (no such file)",
        "page.md:3: other.md#not-a-heading (no heading with that anchor in other.md)",
        "page.md:3: #nowhere (no heading with that anchor in page.md)",
    ]


def test_the_readme_is_a_front_page_linking_every_docs_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES, f"README.md has {len(text.splitlines())} lines: move text to docs/"
    linked = {(README.parent / target.partition("#")[0]).resolve() for _, target in relative_links(README)}
    unlinked = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert unlinked == [], "add each docs page to the README's Documentation list"


def readme_block(section: str, language: str) -> str:
    """The first ``language`` code block under the README's ``## section`` heading."""
    text = README.read_text(encoding="utf-8")
    after = text[text.index(f"\n## {section}\n"):]
    start = after.index(f"```{language}\n") + len(language) + 4
    return after[start:after.index("\n```", start) + 1]


def test_the_readme_minimal_rollout_is_the_tested_example():
    block = readme_block("A minimal rollout", "python")
    assert block.startswith("def rollout(prompts, client,") and "return {" in block
    assert block in (REPO / "examples" / "client_rollout" / "rollout.py").read_text(encoding="utf-8")


def test_the_readme_minimal_config_loads_without_a_problem():
    config, problems = config_from_dict(yaml.safe_load(readme_block("A minimal config", "yaml")))
    assert [(p.key, p.message) for p in problems] == []
    assert config.sampling.num_generations == 8 and config.training.max_steps == 100
    assert config.rewards[0].function == "my_rewards.py:correct" and config.vllm.mode == "spawn"


CITED_TEST = re.compile(r"(?:tests/)?(test_\w+\.py)(?:::(\w+))?")


def missing_cited_tests(text: str, tests_dir: Path) -> List[str]:
    """The ``test_x.py`` and ``test_x.py::name`` a page cites that no file under ``tests_dir`` (or a folder in it) has
    (a file, or a test, fixture or constant of that name defined at the top level of that file)."""
    missing = []
    for file, name in CITED_TEST.findall(text):
        found = sorted(tests_dir.rglob(file))  # tests/unit/ or tests/integration/
        path = found[0] if found else tests_dir / file
        if not path.is_file():
            missing.append(file)
        elif name and not re.search(rf"^(?:async def|def|class) {name}\b|^{name}\s*=", path.read_text(), re.M):
            missing.append(f"{file}::{name}")
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_cited_test_exists(page):
    """Issue 29: splitting the test files left docs/reliability.md citing tests in files that no longer held them."""
    assert missing_cited_tests(page.read_text(), REPO / "tests") == []


def test_a_cited_test_that_moved_is_found(tmp_path):
    (tmp_path / "test_a.py").write_text("def test_here():\n    pass\nCASES = {}\n")
    text = "`test_a.py::test_here`, `tests/test_a.py::CASES`, `test_a.py::test_gone`, `test_b.py`"
    assert missing_cited_tests(text, tmp_path) == ["test_a.py::test_gone", "test_b.py"]


def test_the_readme_minimal_reward_scores_its_data_row():
    import json

    block = readme_block("A minimal config", "python")
    row = json.loads(block.splitlines()[0].partition(":")[2])
    scope: dict = {}
    exec(block, scope)  # noqa: S102 - the README's own example
    assert scope["correct"]([row["answer"], " 4"], answer=[row["answer"]] * 2, prompts=[row["prompt"]] * 2) == [1.0, 0.0]
