"""The README, checked: what it puts first, the schemes it names, its links, and its commands run as written.

`test_readme_commands_run_in_order_as_written` (slow) copies the working tree into a temp folder, links `.venv`
there, and runs every command of the README's ```bash blocks in order, each with bash in the copy's root: what a
newcomer types after set-up. Each must exit 0. The commands left out are in EXCLUDED, each with its reason; it
prints every command's wall time, so the two-minute comparison's time can be read off a run.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from octlm.config.registry import SCHEMES

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = (
    README,
    ROOT / "docs" / "RESULTS.md",
    ROOT / "docs" / "INTERNALS.md",
)  # the pages whose links are checked
MAX_README_LINES = 150
# The README's commands the test does not run, by their words (comments dropped), with the reason.
EXCLUDED = {
    "bash scripts/main": "set-up and the 6-minute main job; no later command reads its run, and the token cache it "
    "leaves is built first by PREPARE",
    "bash scripts/test": "runs every test, this one included",
    ".venv/bin/octlm inspect --hf gpt2": "downloads gpt2 from the Hugging Face Hub: needs the network",
}
# Stands in for what the excluded main job leaves that later commands reuse: the cached token files, so the
# two-minute comparison is timed as a newcomer meets it (after the main job) and not with the tokenizer's training.
PREPARE = ".venv/bin/octlm data"
# Top-level entries of the working tree not copied: history, the environment (linked instead), and what commands
# write (runs, the token cache, reports, exports), so the copy starts as a fresh clone does.
NOT_COPIED = {".git", ".venv", "runs", "data", "reports", "out", "mutants", ".whl", "octlm.egg-info"}
NOT_COPIED_ANYWHERE = shutil.ignore_patterns("__pycache__", "node_modules", ".pytest_cache", ".ruff_cache")
COMMAND_TIMEOUT_S = 1800
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def bash_blocks(text: str) -> list[tuple[str, list[str]]]:
    """The ```bash blocks of a Markdown text in order, as (the heading above, [command line, ...]).

    Blank lines and whole-line comments are dropped; a line ending in a backslash continues on the next."""
    blocks: list[tuple[str, list[str]]] = []
    heading, block = "", None
    for line in text.splitlines():
        if block is None and line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif block is None and line.strip() == "```bash":
            block = []
        elif block is not None and line.strip() == "```":
            blocks.append((heading, block))
            block = None
        elif block is not None and line.strip() and not line.lstrip().startswith("#"):
            if block and block[-1].endswith("\\"):
                block[-1] = block[-1][:-1] + line.strip()
            else:
                block.append(line.strip())
    assert block is None, "a ```bash block of the README is never closed"
    return blocks


def words(command: str) -> str:
    """A command line's words without its comment, spelled one way (how EXCLUDED names commands)."""
    return shlex.join(shlex.split(command, comments=True))


def readme_commands() -> list[tuple[str, str]]:
    """Every command of the README in order, as (its section, the line as written)."""
    return [(heading, line) for heading, block in bash_blocks(README.read_text("utf-8")) for line in block]


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in page.read_text("utf-8").splitlines() if re.match(r"#+ ", line)}


def test_bash_blocks_keep_order_join_continuations_and_drop_comments() -> None:
    text = (
        "# Top\n\n```bash\n# a comment\nbash a.sh   # why\n\n```\n\n## Second\n\n```python\nx = 1\n```\n\n"
        "```bash\n  octlm run \\\n    --flag 1\nb\n```\n"
    )
    assert bash_blocks(text) == [("Top", ["bash a.sh   # why"]), ("Second", ["octlm run --flag 1", "b"])]
    assert words('octlm inspect RUN --tokens " self"   # nearest') == "octlm inspect RUN --tokens ' self'"


def test_readme_says_what_octlm_is_then_gives_the_two_scripts_first() -> None:
    text = README.read_text("utf-8")
    before, _, _ = text.partition("```bash")
    description = [line for line in before.splitlines()[1:] if line and not line.startswith("#")]
    assert before.startswith("# octlm\n") and description[0].startswith("octlm is ") and len(description) == 3
    first_block = bash_blocks(text)[0][1]
    assert [words(line) for line in first_block] == ["bash scripts/main", "bash scripts/test"]
    assert len(text.splitlines()) <= MAX_README_LINES


def test_readme_names_every_registered_position_scheme_in_order() -> None:
    listed = re.search(r"`--position` takes any of `([^`]+)`", README.read_text("utf-8"))
    assert listed is not None and listed.group(1).split() == list(SCHEMES)


def test_every_excluded_command_is_in_the_readme() -> None:
    commands = [words(line) for _, line in readme_commands()]
    assert [name for name in EXCLUDED if name not in commands] == []


def test_links_lead_to_files_and_headings_that_exist() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text("utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # a URL: not checked offline
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or (anchor and anchor not in anchors(linked)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def copy_of_the_tree(tmp_path: Path) -> Path:
    """The working tree without history, environment or outputs, with `.venv` linked to the repository's."""
    copy = tmp_path / "octlm"

    def ignore(folder: str, names: list[str]) -> set[str]:
        top = {name for name in names if name in NOT_COPIED} if Path(folder) == ROOT else set()
        return top | NOT_COPIED_ANYWHERE(folder, names)

    shutil.copytree(ROOT, copy, ignore=ignore, symlinks=True)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    return copy


def run_timed(command: str, cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(
        ["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    return time.perf_counter() - start, done


@pytest.mark.slow
def test_readme_commands_run_in_order_as_written(tmp_path: Path) -> None:
    copy = copy_of_the_tree(tmp_path)
    _, done = run_timed(PREPARE, copy)
    assert done.returncode == 0, done.stderr[-2000:]
    timings: dict[str, float] = {}
    for section, command in readme_commands():
        if words(command) in EXCLUDED:
            continue
        seconds, done = run_timed(command, copy)
        print(f"{seconds:7.1f} s  {command}", flush=True)
        timings[section] = timings.get(section, 0.0) + seconds
        assert done.returncode == 0, (
            f"{command}\nexit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    for section, total in timings.items():
        print(f"{total:7.1f} s  in all: {section}")
