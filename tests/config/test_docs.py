"""The README and docs/ name only what exists: every relative link (and its #anchor) resolves, every repository
path in backticks or in a command is a file or folder of this checkout, every `make <target>` is a Makefile
target, every config choice (`+curriculum=X`, `experiment=X`, `model=X`, ...) is a conf/<group>/X.yaml, and
every `python -m <module>` is a module of this repository; docs/layout.md has one row for each product module
and none for a module that is not there. Each check lists every offender as file:line, so a
file moved in the code shows where the docs still name its old place. Plain text only: nothing is imported
or run."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# The folders of this repository a doc names paths in; a path elsewhere (outputs/, a run folder, another
# project's file such as Logic-RL's `examples/data_preprocess/kk.py`) is not checked.
REPO_FOLDERS = ("conf", "core", "curriculum", "train", "eval", "tests", "hydra_plugins", "docs", ".ci")
# A token with any of these is a placeholder, a glob or a sketch, not a path: `stages/<k>-<name>/final`.
NOT_A_PATH = set("<>*{}[]$~ ?|=,'\"")
# Config groups chosen with `group=X` and where their choices live; hydra/* groups may also name a
# choice a Hydra plugin brings (joblib, optuna), which has no file here.
HYDRA_PLUGIN_CHOICES = {"basic", "joblib", "optuna", "submitit_local", "submitit_slurm", "ray", "rq"}
# Modules of other packages a doc may run with `python -m`.
OTHER_MODULES = {"pip", "pytest", "ruff", "venv", "torch.distributed.run", "accelerate.commands.launch"}
# The folders of product code, whose every module docs/layout.md gives a row.
PRODUCT_FOLDERS = ("core", "conf", "curriculum", "train", "eval", "hydra_plugins")
LAYOUT = ROOT / "docs" / "layout.md"


@dataclass(frozen=True)
class Doc:
    """A Markdown file read once: its lines, which of them are inside a fenced code block, its inline spans."""

    path: Path
    lines: tuple[str, ...]
    in_code: tuple[bool, ...]

    @classmethod
    def read(cls, path: Path, text: str | None = None) -> Doc:
        lines = tuple((path.read_text() if text is None else text).split("\n"))
        flags, code = [], False
        for line in lines:
            fence = line.lstrip().startswith("```")
            flags.append(code or fence)
            if fence:
                code = not code
        return cls(path, lines, tuple(flags))

    @property
    def name(self) -> str:
        try:
            return self.path.relative_to(ROOT).as_posix()
        except ValueError:
            return self.path.name

    def where(self, lineno: int) -> str:
        return f"{self.name}:{lineno}"

    def prose(self) -> str:
        """The text with every code block's lines blanked (line numbers kept)."""
        return "\n".join("" if code else line for line, code in zip(self.lines, self.in_code, strict=True))

    def code_lines(self) -> list[tuple[int, str]]:
        return [(i, line) for i, (line, code) in enumerate(zip(self.lines, self.in_code, strict=True), 1)
                if code and not line.lstrip().startswith("```")]

    def spans(self) -> list[tuple[int, str]]:
        """Inline `code` spans of the prose with their line, whitespace collapsed (a span may wrap a line)."""
        text = self.prose()
        found = []
        for m in re.finditer(r"`([^`]+)`", text):
            if "\n\n" in m.group(1):
                continue
            found.append((text.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split())))
        return found

    def commands(self) -> list[tuple[int, str]]:
        """What a reader types: code block lines and inline spans."""
        return self.code_lines() + self.spans()

    def headings(self) -> list[str]:
        return [line.lstrip("#").strip() for line, code in zip(self.lines, self.in_code, strict=True)
                if not code and re.match(r"#{1,6} ", line)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Doc) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in doc.headings():
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def bad_links(doc: Doc) -> list[str]:
    """Relative Markdown links whose file is missing, or whose #anchor no heading of a Markdown target makes."""
    text = doc.prose()
    found = []
    for m in re.finditer(r"\[[^\]\n]*\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        lineno = text.count("\n", 0, m.start()) + 1
        file, _, anchor = target.partition("#")
        path = (doc.path.parent / file).resolve() if file else doc.path
        if not path.exists():
            found.append(f"{doc.where(lineno)}: link {target!r}: {file} does not exist")
        elif anchor and path.suffix == ".md" and anchor not in anchors(Doc.read(path)):
            found.append(f"{doc.where(lineno)}: link {target!r}: no heading of {path.name} makes #{anchor}")
    return found


def path_like(token: str) -> str | None:
    """The repository path a token names, or None: one word under a folder of this repository, no placeholder."""
    token = token.rstrip(".,;:)")
    if not token or NOT_A_PATH & set(token) or "..." in token:
        return None
    if token.split("/", 1)[0] not in REPO_FOLDERS or "/" not in token:
        return None
    return token


def named_paths(doc: Doc) -> list[tuple[int, str]]:
    """Repository paths the doc names: in inline spans, bare in its prose, and in its commands."""
    found = [(lineno, path) for lineno, span in doc.spans() for word in span.split() if (path := path_like(word))]
    folders = "|".join(re.escape(f) for f in REPO_FOLDERS)
    word = re.compile(rf"(?<![\w./`-])(?:{folders})/[\w./-]*")
    for lineno, line in enumerate(doc.lines, 1):
        bare = re.sub(r"`[^`]*`", "", line) if not doc.in_code[lineno - 1] else line
        found += [(lineno, path) for m in word.finditer(bare) if (path := path_like(m.group(0)))]
    return found


def missing_paths(doc: Doc) -> list[str]:
    found = []
    for lineno, path in sorted(set(named_paths(doc))):
        if not (ROOT / path).exists():
            found.append(f"{doc.where(lineno)}: `{path}` does not exist")
    return found


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", text, re.MULTILINE))


def named_targets(doc: Doc) -> list[tuple[int, str]]:
    return [(lineno, m.group(1)) for lineno, text in doc.commands()
            for m in re.finditer(r"(?:^|[\s;&(])make\s+([a-z][\w-]*)", text)]


def missing_targets(doc: Doc) -> list[str]:
    targets = make_targets()
    return [f"{doc.where(lineno)}: `make {target}`: no such Makefile target"
            for lineno, target in named_targets(doc) if target not in targets]


def config_groups() -> list[str]:
    """Every folder of conf/ that holds choices (`conf/accelerate/` holds launch files, never composed)."""
    groups = {p.parent.relative_to(ROOT / "conf").as_posix() for p in (ROOT / "conf").rglob("*.yaml")}
    return sorted(groups - {".", "accelerate"}, key=len, reverse=True)


def named_choices(doc: Doc) -> list[tuple[int, str, str]]:
    """(line, group, choice) of every `group=X` (or +group=X, a list X,Y) in a command or an inline span."""
    alternatives = "|".join(re.escape(g) for g in config_groups())
    choice = re.compile(rf"(?<![\w./-])\+{{0,2}}({alternatives})=([^\s'\"`]+)")
    found = []
    for lineno, text in doc.commands():
        for m in choice.finditer(text):
            value = m.group(2).rstrip(").,;:")
            if NOT_A_PATH.difference(",") & set(value) or "/" in value:  # a placeholder; a model's path or hub id
                continue
            found += [(lineno, m.group(1), v) for v in value.split(",") if v]
    return found


def missing_choices(doc: Doc) -> list[str]:
    found = []
    for lineno, group, value in named_choices(doc):
        if (ROOT / "conf" / group / f"{value}.yaml").exists():
            continue
        if group.startswith("hydra/") and value in HYDRA_PLUGIN_CHOICES:
            continue
        found.append(f"{doc.where(lineno)}: `{group}={value}`: conf/{group}/{value}.yaml does not exist")
    return found


def named_modules(doc: Doc) -> list[tuple[int, str]]:
    return [(lineno, m.group(1)) for lineno, text in doc.commands()
            for m in re.finditer(r"(?<![\w-])-m\s+([A-Za-z_][\w.]*)", text)]


def module_problem(module: str) -> str | None:
    """Why `python -m <module>` would not run a module of this repository (None: it would)."""
    parts = module.split(".")
    top = ROOT / parts[0]
    if not (top.is_dir() or top.with_suffix(".py").is_file()):
        return None if module in OTHER_MODULES else "neither a module of this repository nor a known tool"
    path = ROOT.joinpath(*parts)
    if path.with_suffix(".py").is_file() or (path / "__main__.py").is_file():
        return None
    if path.is_dir():
        return f"{path.relative_to(ROOT).as_posix()}/ has no __main__.py"
    return f"neither {path.relative_to(ROOT).as_posix()}.py nor {path.relative_to(ROOT).as_posix()}/ exists"


def missing_modules(doc: Doc) -> list[str]:
    return [f"{doc.where(lineno)}: `python -m {module}`: {problem}"
            for lineno, module in named_modules(doc) if (problem := module_problem(module))]


def holds_code(path: Path) -> bool:
    """Whether a module holds more than its docstring, imports and `__all__` (a package's re-exports are no
    room of their own; read as text, never imported)."""
    def bare(node: ast.stmt) -> bool:
        return (isinstance(node, (ast.Import, ast.ImportFrom))
                or isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                or isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"])
    return not all(bare(node) for node in ast.parse(path.read_text()).body)


def product_modules(root: Path = ROOT) -> list[str]:
    """Every .py file of the product folders, an `__init__.py` only where it holds code."""
    return [path.relative_to(root).as_posix() for folder in PRODUCT_FOLDERS
            for path in sorted(root.glob(f"{folder}/**/*.py")) if path.name != "__init__.py" or holds_code(path)]


def layout_rows(doc: Doc) -> list[tuple[int, list[str]]]:
    """(line, the names in backticks of its first cell) of every table row that names something there."""
    return [(lineno, names) for lineno, (line, code) in enumerate(zip(doc.lines, doc.in_code, strict=True), 1)
            if not code and line.startswith("|") and (names := re.findall(r"`([^`]+)`", line.split("|")[1]))]


def layout_problems(doc: Doc, modules: list[str]) -> list[str]:
    """How the module table and the product's modules disagree: a row that names no module of the product, or
    more than one, or one another row names; a module without a row; a package whose rows are not together."""
    found, named, packages = [], set(), []
    for lineno, names in layout_rows(doc):
        if len(names) != 1:
            found.append(f"{doc.where(lineno)}: a row names one module, this one {len(names)}")
            continue
        module = names[0]
        package = module.rpartition("/")[0]
        if module not in modules:
            found.append(f"{doc.where(lineno)}: `{module}` is not a product module")
        elif module in named:
            found.append(f"{doc.where(lineno)}: `{module}` has a row already")
        elif package in packages[:-1]:
            found.append(f"{doc.where(lineno)}: `{module}` is apart from the other rows of `{package}/`")
        named.add(module)
        if packages[-1:] != [package]:
            packages.append(package)
    found += [f"{doc.name}: no row for `{module}`" for module in modules if module not in named]
    return found


def all_docs() -> list[Doc]:
    return [Doc.read(path) for path in DOCS]


def report(check) -> str:
    offenders = [line for doc in all_docs() for line in check(doc)]
    return "\n".join(offenders)


@pytest.mark.parametrize("check", [bad_links, missing_paths, missing_targets, missing_choices, missing_modules],
                         ids=lambda check: check.__name__)
def test_the_docs_name_only_what_exists(check):
    offenders = report(check)
    assert not offenders, f"{check.__name__}, every offender as file:line:\n{offenders}"


def test_the_checks_read_what_the_docs_name():
    """Not vacuous: the docs name many paths, targets, choices and modules, and the checks see them."""
    docs = all_docs()
    paths = {p for doc in docs for _, p in named_paths(doc)}
    targets = {t for doc in docs for _, t in named_targets(doc)}
    choices = {(g, v) for doc in docs for _, g, v in named_choices(doc)}
    modules = {m for doc in docs for _, m in named_modules(doc)}
    assert {"conf/grpo/default.yaml", "tests/runs/test_learning.py", "train/run/runner.py", "eval/settings.py"} <= paths
    assert {"test", "demo", "gpu-check", "report", "drill"} <= targets
    assert {("curriculum", "kk_ladder"), ("experiment", "single_gpu"), ("model", "qwen3-0.6b"),
            ("hparams_search", "reward_optuna"), ("task", "custom"), ("reward", "task")} <= choices
    assert {"train", "eval", "eval.report", "tests.bench", "train.gpu_check"} <= modules


def test_a_stale_name_is_reported_with_its_file_and_line(tmp_path):
    text = "\n".join([
        "# A page",
        "",
        "See [the GPU page](gpu.md#no-such-heading) and [gone](nowhere.md), `train/no_such_module.py`,",
        "and conf/curriculum/no_such.yaml; `outputs/runs/<time>/run.json` and `my_task.py` are not checked.",
        "",
        "```bash",
        "make no-such-target",
        "python -m train.no_such +curriculum=no_such,kk_ladder model=Qwen/Qwen2.5-7B-Instruct",
        "```",
    ])
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    (tmp_path / "docs" / "gpu.md").write_text("# One GPU\n")
    doc = Doc.read(page, text)
    assert bad_links(doc) == [
        "page.md:3: link 'gpu.md#no-such-heading': no heading of gpu.md makes #no-such-heading",
        "page.md:3: link 'nowhere.md': nowhere.md does not exist",
    ]
    assert missing_paths(doc) == [
        "page.md:3: `train/no_such_module.py` does not exist",
        "page.md:4: `conf/curriculum/no_such.yaml` does not exist",
    ]
    assert missing_targets(doc) == ["page.md:7: `make no-such-target`: no such Makefile target"]
    assert missing_choices(doc) == [
        "page.md:8: `curriculum=no_such`: conf/curriculum/no_such.yaml does not exist"]
    assert missing_modules(doc) == [
        "page.md:8: `python -m train.no_such`: neither train/no_such.py nor train/no_such/ exists"]


def test_every_docs_page_has_a_title_a_way_back_and_a_link_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for path in DOCS[1:]:
        lines = path.read_text().split("\n")
        assert re.match(r"# \S", lines[0]), f"docs/{path.name}:1: a page starts with its one-line '# Title'"
        assert "](../README.md)" in "\n".join(lines[:4]), f"docs/{path.name}: no link back to the README at its top"
        assert f"](docs/{path.name})" in readme, f"README.md: no link to docs/{path.name}"


def test_the_layout_has_one_row_for_every_product_module():
    """docs/layout.md is where a new maintainer finds which module holds what: a module added without its row, or
    a row left for a module moved or gone, would make that map lie, so the table is checked against the tree."""
    modules = product_modules()
    assert {"conf/__init__.py", "train/run/runner.py", "curriculum/tasks/kk/grading/grader.py"} <= set(modules)
    assert "core/__init__.py" not in modules, "a docstring alone is no module to describe"
    problems = layout_problems(Doc.read(LAYOUT), modules)
    assert not problems, "docs/layout.md, every offender:\n" + "\n".join(problems)


# A product tree of four modules (core/__init__.py holds only its docstring and a re-export, so it has no row;
# curriculum/__init__.py holds a function, so it has one) and a table page for each case.
LAYOUT_TREE = {
    "core/__init__.py": '"""The plumbing."""\nfrom core.a import A\n__all__ = ["A"]\n',
    "core/a.py": "A = 1\n",
    "core/b.py": "B = 2\n",
    "curriculum/__init__.py": "def build():\n    return 1\n",
    "curriculum/plan.py": "PLAN = []\n",
}
ALL_ROWS = ["core/a.py", "core/b.py", "curriculum/__init__.py", "curriculum/plan.py"]


@pytest.mark.parametrize(("rows", "expected"), [
    # every module once, each package's rows together: nothing to say
    (ALL_ROWS, []),
    # core/b.py added without a row
    (["core/a.py", "curriculum/__init__.py", "curriculum/plan.py"], ["layout.md: no row for `core/b.py`"]),
    # a row left for a module that is gone
    ([*ALL_ROWS, "core/gone.py"], ["layout.md:7: `core/gone.py` is not a product module"]),
    # a package's re-exports are not a module of their own
    (["core/__init__.py", *ALL_ROWS], ["layout.md:3: `core/__init__.py` is not a product module"]),
    # two modules on one row: neither gets a line of its own
    (["core/a.py, core/b.py", *ALL_ROWS[2:]],
     ["layout.md:3: a row names one module, this one 2", "layout.md: no row for `core/a.py`",
      "layout.md: no row for `core/b.py`"]),
    # the same module twice
    ([*ALL_ROWS, "curriculum/plan.py"], ["layout.md:7: `curriculum/plan.py` has a row already"]),
    # core/'s rows split by curriculum/'s
    (["core/a.py", "curriculum/__init__.py", "core/b.py", "curriculum/plan.py"],
     ["layout.md:5: `core/b.py` is apart from the other rows of `core/`",
      "layout.md:6: `curriculum/plan.py` is apart from the other rows of `curriculum/`"]),
], ids=["complete", "missing", "gone", "re-export", "two-on-a-row", "twice", "apart"])
def test_the_layout_check_finds_each_disagreement(tmp_path, rows, expected):
    for name, text in LAYOUT_TREE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    cells = [", ".join(f"`{name}`" for name in row.split(", ")) for row in rows]
    text = "\n".join(["| module | what |", "|---|---|", *(f"| {cell} | what it holds |" for cell in cells)])
    page = Doc.read(tmp_path / "layout.md", text)
    assert product_modules(tmp_path) == ALL_ROWS
    assert layout_problems(page, product_modules(tmp_path)) == expected


def test_the_readme_fits_a_first_read():
    """What it is, then on its first screen the install, the smoke command, `make demo`, `make test` and a picture
    of the report; the GPU and many-GPU commands and where to go next after: a few screens in all."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.split("\n")) <= 200
    for heading in ("## Start here", "## On a GPU", "## Many GPUs", "## Installing, versions and the test suite",
                    "## Where to go next"):
        assert f"\n{heading}\n" in readme, heading
    first_screen = "\n".join(readme.split("\n")[:40])
    for shown in ("make install", "pip install -e .", "experiment=smoke", "make demo", "make test", "![", ".png)"):
        assert shown in first_screen, f"README's first 40 lines: no {shown!r}"
    assert first_screen.index("experiment=smoke") < first_screen.index("make demo")
    assert "transformers 5.17" not in first_screen, "versions and their conflicts belong lower down"
