"""The report's Samples section, intervals in every accuracy cell on a real run, and a run folder that
tries to smuggle Markdown, HTML and local files into the report (everything read from a run folder is
untrusted: the report shows it as text)."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from core.rundir.files import read_jsonl
from curriculum.tasks.kk import KKTask
from eval.report.cli import write_report
from eval.report.samples import pick, samples_blocks
from tests.report.test_report import stage_entry, write_jsonl

RATE_CELL = re.compile(r"\d\.\d{3} \[\d\.\d\d, \d\.\d\d\] n=\d+( [▲▼])?")
RATE_TABLES = ("Validation accuracy per subset", "Validation lenient accuracy", "Validation format rate",
               "Reasoning that agrees", "Right answers whose reasoning", "Completions naming a person")


@pytest.fixture(scope="module")
def smoke_report(smoke_ladder, tmp_path_factory) -> tuple[Path, str, str]:
    """The smoke ladder's report, written into a copy of its run folder (the weights left behind)."""
    run_dir, _ = smoke_ladder
    copy = tmp_path_factory.mktemp("report") / run_dir.name
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("stages", "trainer"))
    out = write_report(copy)
    return copy, (out / "report.md").read_text(), (out / "report.html").read_text()


def _section(markdown: str, title: str) -> str:
    return markdown.split(f"## {title}")[1].split("\n## ")[0]


@pytest.mark.run
def test_every_accuracy_and_rate_cell_carries_its_interval_and_n(smoke_report):
    _, markdown, _ = smoke_report
    for title in RATE_TABLES:
        rows = [line for line in _section(markdown, title).splitlines() if line.startswith("| ")][1:]
        assert len(rows) == 6, title  # baseline and the five stages
        cells = [cell.strip() for row in rows for cell in row.strip("|").split("|")[1:]]
        assert cells and all(RATE_CELL.fullmatch(c) or c == "-" for c in cells), (title, cells)
    accuracy = [line for line in _section(markdown, "Validation accuracy per subset").splitlines()
                if line.startswith("| ")][1:]
    assert all("n=4" in row for row in accuracy)  # the smoke pools: 4 distinct puzzles a subset
    assert "**validation pools** (distinct puzzles up to renaming): 2ppl 4 · 3ppl 4" in markdown


@pytest.mark.run
def test_the_report_has_a_samples_section_for_every_stage_and_subset(smoke_report):
    run_dir, markdown, html = smoke_report
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    samples = markdown.split("## Samples")[1]
    headings = re.findall(r"^### (.+)$", samples, flags=re.MULTILINE)
    # every subset validated after every stage (eval.subsets_after_stage: near skips some in between)
    validated = sorted((r["stage"], r["ppl"]) for r in read_jsonl(run_dir / "validation.jsonl"))
    names = {0: "baseline: ", **{s["index"]: f"after {s['name']}: " for s in stages}}
    expected = [f"{names[stage]}{ppl}ppl" for stage, ppl in validated]
    assert len(expected) > 2 * len(stages) and headings == expected
    # each subset: its count, then picks with grade, tokens and reasons, each followed by its completion
    # the tiny model's greedy completions rarely change between stages: a repeat is said, not shown again
    shown, repeated = samples.count("4 completions, "), samples.count("the same 4 completions as after ")
    assert shown + repeated == len(expected) and shown >= 2
    picks = re.findall(r"^\*\*(first (?:right|wrong)[^*]*)\*\* · puzzle `\dppl-\d+` sample 0 · \*\*(right|wrong)\*\*",
                       samples, flags=re.MULTILINE)
    assert len(picks) >= shown
    assert samples.count("```completion") >= shown and "tokens" in samples and "reasons: " in samples
    assert "<details><summary>the completion:" in html or "<pre>" in html
    # each pick with the puzzle it answers, folded, and the reference and answer read
    assert samples.count("```folded the puzzle") >= len(picks) and "reference: " in samples and "answer: " in samples
    assert html.count("<details><summary>the puzzle</summary><pre>") >= len(picks)


def test_a_subset_whose_completions_repeat_the_stage_before_says_so_once(tmp_path):
    run = tmp_path / "run"
    rows = [{"id": f"2ppl-{k}", "sample": 0, "question": f"Puzzle {k}", "completion": f"text {k}", "correct": k == 0,
             "tokens": 3 + k} for k in range(3)]
    for folder, written in (("1-sft", rows), ("2-2ppl", rows), ("3-3ppl", rows), ("4-4ppl", rows[:2])):
        (run / "samples" / folder).mkdir(parents=True)
        write_jsonl(run / "samples" / folder / "2ppl.jsonl", written)
    markdown = "\n".join(str(getattr(b, "text", "")) for b in samples_blocks(run, {}, KKTask.report))
    # 2ppl and 3ppl (a stage that learned nothing) repeat sft's completions: said once each, shown once
    assert markdown.count("the same 3 completions as after sft, row for row: not shown again") == 2
    assert markdown.count("3 completions, 1 right") == 1 and markdown.count("2 completions, 1 right") == 1
    assert markdown.count("Puzzle 0") == 2  # sft's first right, then 4ppl's (fewer rows: not the same)


# (rows, expected picks as (labels, row index)): why each is chosen, and that a row is shown once
PICK_CASES = [
    # nothing right: no "first right"; the one wrong row is also the longest and the shortest
    ([{"correct": False, "tokens": 5}], [(["first wrong", "longest", "shortest"], 0)]),
    # reasoning that disagrees needs reasoning and an answer; row 1 has both
    ([{"correct": True, "tokens": 5, "has_reasoning": False, "answered": True, "reasoning_disagrees": False},
      {"correct": True, "tokens": 9, "has_reasoning": True, "answered": True, "reasoning_agrees": False,
       "reasoning_disagrees": True}],
     [(["first right", "shortest"], 0), (["longest", "reasoning disagrees with its answer"], 1)]),
    # an invented person is picked even when the row is otherwise unremarkable
    ([{"correct": False, "tokens": 1}, {"correct": False, "tokens": 3, "invented": ["liam"]},
      {"correct": False, "tokens": 9}],
     [(["first wrong", "shortest"], 0), (["longest"], 2), (["names an invented person"], 1)]),
    ([], []),  # an empty file: nothing to show
]


@pytest.mark.parametrize(("rows", "expected"), PICK_CASES)
def test_the_teaching_picks(rows, expected):
    assert [(labels, rows.index(row)) for labels, row in pick(rows, KKTask.report.picks)] == expected


# --- a crafted run folder ---------------------------------------------------------------------------

SECRET = b"\x89PNG\r\n\x1a\nSECRET-BYTES-THE-REPORT-NEVER-WROTE"
# ... and "$\\frac{$", which matplotlib's mathtext failed to parse (the whole report raised)
HOSTILE = "![leak](secret.txt) <script>alert(1)</script> <img src=x onerror=alert(2)> *em* `code` | pipe $\\frac{$"


@pytest.fixture
def crafted_run(tmp_path) -> tuple[Path, Path]:
    """A run folder someone sent: Markdown image syntax, HTML and pipes in every text the report shows,
    pointing at a file beside the report (relative) and one outside the run (absolute)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.png").write_bytes(SECRET)
    run = tmp_path / "run"
    (run / "report").mkdir(parents=True)
    (run / "report" / "secret.txt").write_bytes(SECRET)  # a file already in the report folder, not drawn by it
    names = ["![leak](secret.txt)", f"![abs]({outside / 'secret.png'})", "<script>alert(3)</script>"]
    stages = [{**stage_entry(k + 1, 2, "done", k, k + 1), "name": name, "error": HOSTILE, "level_label": HOSTILE}
              for k, name in enumerate(names)]
    # run.json's record of the task: every word the report takes from it is the folder's too
    task_report = {"record": HOSTILE, "distinct": HOSTILE, "pool_note": HOSTILE, "accuracy": HOSTILE,
                   "rates": [{"key": "accuracy", "name": HOSTILE, "title": HOSTILE, "note": HOSTILE}],
                   "picks": [[HOSTILE, "correct"]], "facts": [[HOSTILE, "tokens"]], "chance": {"2ppl": 0.25},
                   "chance_note": HOSTILE}
    manifest = {"status": HOSTILE, "curriculum": HOSTILE, "base_model": f"`x` {HOSTILE}", "stages": stages,
                "task_report": task_report, "reward_stack": [{"name": HOSTILE, "weight": 1, "source": HOSTILE}]}
    (run / "run.json").write_text(json.dumps(manifest))
    (run / "config.yaml").write_text(json.dumps({"model": {"name": HOSTILE}, "reward": {"weights": {HOSTILE: 1}},
                                                 "grpo": {"loss_type": HOSTILE}, "eval": {"subsets": HOSTILE}}))
    write_jsonl(run / "metrics.jsonl", [{"stage": 1, "stage_name": names[0], "level": HOSTILE, "stage_step": 1,
                                         "global_step": 1, "kind": "step", "completions/mean_length": 5.0}])
    write_jsonl(run / "validation.jsonl", [{"stage": k, "stage_name": name, "global_step": k, "level": "2ppl",
                                            "accuracy": 0.5, "format_rate": 0.5, "mean_tokens": 4.0, "n": 2,
                                            "puzzles": 2} for k, name in enumerate(["baseline", *names])])
    sample = {"id": HOSTILE, "sample": HOSTILE, "completion": f"{HOSTILE}\n```\n</pre><img src=x>\n" * 20,
              "tokens": 7, "correct": True, "format_ok": True, "answered": True, "n_right": 2, "n_people": 2,
              "reference": f"{HOSTILE} knight, Zoey knave", "answer": f"{HOSTILE} knight, Zoey knave",
              "reasons": [HOSTILE], "invented": [HOSTILE], "has_reasoning": True, "reasoning_agrees": False,
              "question": f"{HOSTILE}\n````\n</pre></details><script>x</script>"}
    short = {**sample, "completion": HOSTILE, "correct": False, "tokens": 2}
    folder = run / "samples" / f"1-{names[0]}"
    folder.mkdir(parents=True)
    write_jsonl(folder / "2ppl.jsonl", [sample, short])
    (run / "samples" / "2-escape").symlink_to(outside, target_is_directory=True)  # a folder outside the run
    return run, outside


def _report_pngs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.glob("*.png")}


def test_a_crafted_run_folder_cannot_make_the_report_inline_a_file_it_did_not_write(crafted_run):
    run, _ = crafted_run
    out = write_report(run)
    html = (out / "report.html").read_text()
    written = _report_pngs(out)
    embedded = [base64.b64decode(src) for src in re.findall(r"src='data:image/png;base64,([^']*)'", html)]
    assert embedded and all(data in written.values() for data in embedded)  # only the report's own figures
    assert len(re.findall(r"<img ", html)) == len(embedded) == len(written)
    assert b"SECRET" not in b"".join(embedded) and "SECRET" not in html
    # the Markdown itself links no image but the report's own PNGs, and no link but its contents' to its own headings
    tokens = MarkdownIt("commonmark").enable("table").parse((out / "report.md").read_text())
    children = [child for token in tokens for child in (token.children or [])]
    assert {c.attrGet("src") for c in children if c.type == "image"} <= set(written)
    links = [c.attrGet("href") for c in children if c.type == "link_open"]
    assert links and set(links) <= {f"#{anchor}" for anchor in re.findall(r"<h2 id=\"([^\"]*)\"", html)}


def test_a_crafted_run_folder_renders_as_text_never_as_html(crafted_run):
    run, _ = crafted_run
    out = write_report(run)
    html = (out / "report.html").read_text()
    markdown = (out / "report.md").read_text()
    # no raw tag from the run folder: the only tags are the page's own
    tags = set(re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", html))
    assert tags <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "em", "strong",
                    "code", "table", "thead", "tbody", "tr", "th", "td", "img", "pre", "details", "summary",
                    "ul", "li", "a"}  # the list and links of the contents
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown, as text
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    # the hostile stage name is a heading's text; the long completion is folded; the symlinked folder unread
    assert "### after ![leak\\](secret.txt): 2ppl" in markdown
    assert re.search(r"<h3 id=\"[\w-]*\">after !\[leak\]\(secret.txt\): 2ppl</h3>", html)
    assert "<details><summary>the completion: 60 lines" in html
    assert "2-escape" not in markdown.split("## Samples")[1]
