"""The README and the docs site (docs/, mkdocs.yml) say what is true.

- The README's test command is the one .ci/run runs, in a fresh venv; the README stays short.
- Every code block of README.md and docs/ is checked: shell blocks and Python blocks run for
  real, section by section (``## `` headings) in a temporary folder each (with ``tests/`` of
  this checkout beside them, so the committed captures are at the paths the docs give), in
  order, so a section's later blocks see what its earlier ones made. A block that cannot run on
  a CPU-only test machine is marked by an HTML comment on the line before it: ``<!-- gpu -->``
  (needs a GPU, ncu or nsys), ``<!-- setup -->`` (installs, the test suite itself),
  ``<!-- slow -->`` (runs on a CPU, but for minutes); those are only parsed: each ``profkit`` command must
  name a command and options the CLI has (read from the command object, as ``--help`` shows
  them), each ``pip install`` extras pyproject.toml has. ``<!-- file: NAME -->`` makes a block a
  file (a script, a check file) the next blocks use.
- Every command has a guide page, and the generated references name every command, option and
  finding.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
MARKS = {"gpu", "setup", "slow"}
SHELL = {"bash", "sh", "console", "shell"}
CHECKED = SHELL | {"python", "toml", "yaml"}
UNCHECKED = {"text", ""}  # output and synopses
# Commands the docs may show besides profkit's own: set-up, tools, shell built-ins.
OTHER_COMMANDS = {
    ".",
    "source",
    "cd",
    "export",
    "mkdir",
    "ls",
    "cat",
    "head",
    "cp",
    "echo",
    "nvidia-smi",
    "nsys",
    "ncu",
    "dask",
    "sqlite-utils",
    "datasette",
    "git",
    "mkdocs",
    "python3",
    "python",
    "torchrun",
    "srun",
    "chromium",
    "apt-get",
    "sudo",
    "tmux",
    "mktemp",
    "true",
}


def load_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("profkit_docs_hooks", DOCS / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = load_hooks()


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    marks: set[str] = field(default_factory=set)
    file: str | None = None
    section: str = ""  # the "## " heading above it ("" before the first)

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line} ({self.lang or 'no language'})"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a page, each with the marks of the comment lines just above it."""
    out: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    section = ""
    while i < len(lines):
        m = re.match(r"^(\s*)```(\S*)", lines[i])
        if not m:
            if lines[i].startswith("## "):
                section = lines[i][3:].strip()
            i += 1
            continue
        indent, lang = m.group(1), m.group(2).lower()
        start = i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent) :])
            i += 1
        i += 1
        marks: set[str] = set()
        file = None
        j = start - 1
        while j >= 0 and re.fullmatch(r"\s*<!--.*-->\s*", lines[j]):
            comment = lines[j].strip()[4:-3].strip()
            if comment.startswith("file:"):
                file = comment.split(":", 1)[1].strip()
            elif comment.split(":")[0] != "generated":
                marks.add(comment)
            j -= 1
        out.append(Block(page, start + 1, lang, "\n".join(body) + "\n", marks, file, section))
    return out


ALL_BLOCKS = [b for p in PAGES for b in blocks(p)]


# ------------------------------------------------------------------------------------ parse checks
def commands(code: str) -> list[list[str]]:
    """The simple commands of a shell block (continuations joined, comments dropped), each as
    its words; the commands inside ``$(...)`` too."""
    text = code.replace("\\\n", " ")
    out: list[list[str]] = []
    for inner in re.findall(r"\$\(([^()]*)\)", text):
        out += commands(inner)
    text = re.sub(r"\$\(([^()]*)\)", "SUBST", text)
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        for token in lexer:
            if token in (";", "&&", "||", "|", "&"):
                if current:
                    out.append(current)
                current = []
            else:
                current.append(token)
        if current:
            out.append(current)
    return out


def profkit_problems(args: list[str]) -> list[str]:
    """What is wrong with ``profkit ARGS``: an unknown command, or an option the command lacks."""
    group = HOOKS.cli_command()
    known = {name: cmd for name, cmd, _ in HOOKS.subcommands(group)}
    globals_ = HOOKS.option_strings(group) | {"--help"}
    i = 0
    while i < len(args) and args[i].startswith("-"):  # profkit's own options, before the command
        if args[i].split("=")[0] not in globals_:
            return [f"unknown option {args[i]} of profkit"]
        i += 2 if args[i] == "--db" else 1
    if i == len(args):
        return []
    name, rest = args[i], args[i + 1 :]
    if name not in known:
        return [f"unknown command profkit {name}"]
    if "--" in rest:  # profkit run ... -- PROGRAM ARGS: the program's arguments are its own
        rest = rest[: rest.index("--")]
    options = HOOKS.option_strings(known[name]) | globals_
    return [
        f"profkit {name} has no option {t}"
        for t in rest
        if t.startswith("-")
        and not re.fullmatch(r"-\d[\d.]*", t)
        and t.split("=")[0] not in options
    ]


def pip_problems(args: list[str]) -> list[str]:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    named = {
        e
        for a in args
        for m in re.finditer(r"(?:^\.|profkit)\[([\w,-]+)\]", a)
        for e in m.group(1).split(",")
    }
    return [f"pip install names an extra pyproject.toml lacks: {e}" for e in sorted(named - extras)]


def command_problems(words: list[str]) -> list[str]:
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value before the command
        words = words[1:]
    if not words:
        return []
    if words[0] == "profkit":
        return profkit_problems(words[1:])
    if words[0] == "pip":
        return pip_problems(words[1:])
    for k in range(len(words) - 1):  # python -m profkit, torchrun ... -m profkit, srun ...
        if words[k : k + 2] == ["-m", "profkit"]:
            return profkit_problems(words[k + 2 :])
    if words[0] not in OTHER_COMMANDS:
        return [
            f"a command the docs test does not know: {' '.join(words)} (add it to OTHER_COMMANDS if it is "
            "not profkit's)"
        ]
    return []


def shell_lines_of(block: Block) -> str:
    if block.lang in SHELL:
        return block.code
    # YAML (a CI workflow): its `run:` steps' commands.
    lines = []
    for line in block.code.splitlines():
        s = line.strip().removeprefix("- ").strip()
        if s.startswith("run:"):
            s = s[4:].strip()
            if s in ("|", ">"):
                continue
        if re.match(r"(profkit|pip|python) ", s):
            lines.append(s)
    return "\n".join(lines)


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.lang in SHELL | {"yaml"}], ids=str)
def test_every_command_shown_is_one_the_cli_has(block: Block) -> None:
    problems = [p for words in commands(shell_lines_of(block)) for p in command_problems(words)]
    assert not problems, f"{block}: " + "; ".join(problems)


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=str)
def test_every_block_is_checked_or_output(block: Block) -> None:
    assert block.lang in CHECKED | UNCHECKED, f"{block}: a language the docs test does not check"
    assert block.marks <= MARKS, f"{block}: unknown marks {block.marks - MARKS}"
    if block.lang == "python":
        compile(block.code, str(block), "exec")
    if block.lang == "toml":
        tomllib.loads(block.code)


# ------------------------------------------------------------------------------------ running them
PRELUDE_SHELL = (
    'profkit() { "$PYTHON" -m profkit "$@"; }\npython() { "$PYTHON" "$@"; }\n'
    'sqlite-utils() { "$PYTHON" -m sqlite_utils "$@"; }\n'
)
# A notebook cell's display() where no notebook is: IPython's, which prints the repr.
PRELUDE_PYTHON = (
    "try:\n    from IPython.display import display\nexcept ImportError:\n    display = print\n"
)


def runs(block: Block) -> bool:
    return not block.marks and block.file is None and block.lang in SHELL | {"python"}


def needs_torch(page_blocks: list[Block]) -> bool:
    code = "\n".join(b.code for b in page_blocks if runs(b) or b.file)
    return bool(
        re.search(
            r"profkit (run|bench|compare|sweep)\b|^import torch|profkit\.(profile|bench)\(",
            code,
            re.M,
        )
    )


# A page's sections run apart (each in a folder of its own, in parallel where the tests are):
# a section's blocks see what the section's earlier blocks made.
RUN_SECTIONS = sorted(
    {(p, b.section) for p in PAGES for b in blocks(p) if runs(b)},
    key=lambda ps: (PAGES.index(ps[0]), ps[1]),
)


@pytest.mark.parametrize(
    ("page", "section"),
    RUN_SECTIONS,
    ids=[f"{p.relative_to(ROOT)}#{s or 'top'}" for p, s in RUN_SECTIONS],
)
def test_the_pages_examples_run(page: Path, section: str, tmp_path: Path) -> None:
    """Each section's runnable blocks, in order, in a folder of its own: exit status 0."""
    section_blocks = [b for b in blocks(page) if b.section == section]
    if needs_torch(section_blocks) and importlib.util.find_spec("torch") is None:
        pytest.skip("these examples need PyTorch")
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    env = {k: v for k, v in os.environ.items() if k != "PROFKIT_DB"}
    env.update(
        PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        COLUMNS="120",
    )
    for block in section_blocks:
        if block.file:
            (tmp_path / block.file).write_text(block.code)
            continue
        if not runs(block):
            continue
        if block.lang == "python":
            argv = [sys.executable, "-c", PRELUDE_PYTHON + block.code]
        else:
            argv = ["bash", "-euo", "pipefail", "-c", PRELUDE_SHELL + block.code]
        p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, (
            f"{block} failed ({p.returncode}):\n{block.code}\nstdout:\n{p.stdout[-3000:]}\n"
            f"stderr:\n{p.stderr[-3000:]}"
        )


# ------------------------------------------------------------------------------------ the pages
def test_readme_is_short_and_its_links_lead_somewhere() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert links and all((ROOT / link).exists() for link in links if "://" not in link), links


def test_every_command_has_a_guide_page_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for name, _, _ in HOOKS.subcommands(HOOKS.cli_command()):
        assert (DOCS / "guide" / f"{name}.md").is_file(), f"no docs/guide/{name}.md"
        assert f"guide/{name}.md" in nav


def test_the_references_are_made_from_the_cli_and_the_rules() -> None:
    reference = HOOKS.cli_reference()
    for name, cmd, _ in HOOKS.subcommands(HOOKS.cli_command()):
        assert f"\n## profkit {name}\n" in reference
        for option in HOOKS.option_strings(cmd):
            assert option in reference, (name, option)
    findings = HOOKS.findings_reference()
    rules = tomllib.loads((ROOT / "profkit" / "rules.toml").read_text())
    for kind in ("finding", "name_rule", "op_rule", "work_rule"):
        for rule in rules[kind]:
            assert f"`{rule['id']}`" in findings, (kind, rule["id"])
    assert HOOKS.generate("x <!-- generated: cli -->") == "x " + reference


def test_the_reference_reads_a_typer_app_as_well(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command reference and the docs' command checks read Click's public API only, so a
    Typer app (turned into its Click command by typer.main.get_command) serves as well."""
    typer = pytest.importorskip("typer")
    import profkit.cli

    app = typer.Typer(help="A test app.")

    @app.callback()
    def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Tracebacks.")) -> None:
        """The app."""

    @app.command()
    def kernels(
        run: str = typer.Argument(..., help="Run name or id."),
        limit: int = typer.Option(5000, help="At most this many launches."),
        fmt: str = typer.Option("table", "--format", "-f", help="Output format."),
    ) -> None:
        """List a run's kernel launches."""

    @app.command()
    def runs() -> None:
        """List runs."""

    monkeypatch.setattr(profkit.cli, "app", app)
    reference = HOOKS.cli_reference()
    assert "\n## profkit kernels\n" in reference and "List a run's kernel launches." in reference
    assert "`-f, --format <str>`: Output format." in reference and "Run name or id." in reference
    assert {
        name: sorted(HOOKS.option_strings(cmd))
        for name, cmd, _ in HOOKS.subcommands(HOOKS.cli_command())
    } == {"kernels": ["--format", "--limit", "-f"], "runs": []}
    assert profkit_problems(["kernels", "r", "--limit", "3"]) == []
    assert profkit_problems(["kernels", "r", "--top", "3"]) == [
        "profkit kernels has no option --top"
    ]
    assert profkit_problems(["summary", "r"]) == ["unknown command profkit summary"]


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    line = next(l for l in readme.splitlines() if "pytest" in l and l.startswith("pip install"))
    install, *checks = [part.strip() for part in line.split("&&")]
    ci = [
        l.strip()
        for l in (ROOT / ".ci" / "run").read_text().splitlines()
        if l.strip() and not l.startswith("#")
    ]
    # A new venv, made by the machine's python3 and activated: what follows runs with its
    # pip and python, as the README's command does in the venv a user has made.
    venv = next(i for i, l in enumerate(ci) if l.startswith("python3 -m venv "))
    assert ci[venv + 1].startswith("source ") and ci[venv + 1].endswith('/bin/activate"')
    ci_commands = [l for l in ci[venv + 2 :] if l.startswith(("pip ", "python "))]
    assert ci_commands[0].startswith("pip install ") and ci_commands[0].endswith(
        "-e '.[torch,test,cluster,docs]'"
    )
    assert install == "pip install -e '.[torch,test,cluster,docs]'"
    # The docs are built strictly into a temporary folder, never into the checkout: the README
    # names a new one ("$(mktemp -d)"), CI one in its scratch folder.
    docs_readme = 'python -m mkdocs build --strict -d "$(mktemp -d)"'
    docs_ci = next(l for l in ci_commands if "mkdocs" in l)
    assert re.fullmatch(r'python -m mkdocs build --strict -d "\$scratch/[\w.-]+"', docs_ci), docs_ci
    quick = 'python -m pytest -q -n auto --dist loadgroup -m "not slow"'
    slow = "python -m pytest -q -n auto --dist loadgroup -m slow"
    assert checks == [
        "python -m ruff format --check",
        "python -m ruff check",
        "python -m mypy",
        docs_readme,
        quick,
    ]
    # CI runs the README's checks, then its slow tier (the README's second test command).
    assert ci_commands[1:] == [docs_ci if c == docs_readme else c for c in checks] + [slow]
    assert f"```bash\n{slow}\n```" in readme
    # Nothing outside the venv installs or runs Python after it is made.
    assert not any(l.startswith("python3 ") for l in ci[venv + 1 :])
