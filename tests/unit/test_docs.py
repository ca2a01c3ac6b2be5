"""The README and docs/design.md stay true where a test can tell: the README is short, starts with
exactly the two set-up commands (and what it says of them holds), its run.yaml reference names every
field the run.yaml model accepts (no more, no fewer, with the model's defaults), the "where to
change what" map names only paths that exist, links resolve, and cited numbers are in the cited
benchmark results."""

from __future__ import annotations

import json
import os
import re
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

# The run.yaml model, found through this one import (when the model moves, change this line only).
from slurmctl.config.models import RunSpec
from slurmctl.submit.scaffold import first_run_shape

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DESIGN = (REPO / "docs" / "design.md").read_text()
MAX_README_LINES = 200
TOP_DIRS = ("slurmctl/", "scripts/", "examples/", "deploy/", "benchmarks/", "monitoring/", "plugins/", "tests/",
            "docs/", ".ci/")


def section(text: str, heading: str) -> str:
    """The body of `## heading` up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no '## {heading}' section"
    return match.group(1)


def code_blocks(text: str) -> list[str]:
    return [body.strip() for body in re.findall(r"^```\w*\n(.*?)^```", text, re.S | re.M)]


def nested_model(annotation) -> type[BaseModel] | None:
    """The model a field holds (`CheckpointSpec`, `BuildSpec | None`, ...), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = nested_model(arg)
        if found is not None:
            return found
    return None


def reference_rows() -> dict[str, list[str]]:
    """README run.yaml reference: field -> its cells (field, default, meaning)."""
    rows = {}
    for line in section(README, "run.yaml reference").splitlines():
        match = re.match(r"\| `([a-z_]+)` \|", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in line.strip().strip("|").split("|")]
    return rows


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_is_short():
    assert len(README.splitlines()) < MAX_README_LINES


def test_the_top_is_exactly_the_two_set_up_commands():
    before_usage = README[:README.index("## Usage")]
    assert code_blocks(before_usage) == ["scripts/demo", "scripts/test"]
    for script in ("scripts/demo", "scripts/test"):
        assert os.access(REPO / script, os.X_OK), script
    assert "scripts/setup" in (REPO / "scripts/demo").read_text()
    assert re.search(r"pytest \"\$\{@:-tests\}\"", (REPO / "scripts/test").read_text())  # unit + integration
    assert "bash scripts/test" in (REPO / ".ci/run").read_text() and "ruff check" in (REPO / ".ci/run").read_text()


def test_what_the_demo_sentence_says_holds():
    setup = section(README, "Set up")
    spec = yaml.safe_load((REPO / "examples/tiny-lm/run.yaml").read_text())
    assert "`examples/tiny-lm`" in setup and "as `alice`" in setup and "DEMO_USER:-alice" in (
        REPO / "scripts/demo").read_text()
    assert f"on {spec['nodes']} nodes × {spec['gpus_per_node']} processes" in setup
    assert f"(world size {spec['nodes'] * spec['gpus_per_node']})" in setup
    up = (REPO / "deploy/local/up").read_text()
    assert f"a real {len(re.findall(r'^NodeName=', up, re.M))}-node local Slurm cluster" in setup
    assert "USERS=(alice:vision bob:vision carol:nlp)" in up
    assert "(`alice` and `bob` in account\n`vision`, `carol` in `nlp`)" in setup


def test_the_reference_names_every_field_the_model_accepts():
    rows = reference_rows()
    fields = RunSpec.model_fields
    assert list(rows) and set(rows) == set(fields), ("missing:", set(fields) - set(rows),
                                                     "not a field:", set(rows) - set(fields))
    for name, field in fields.items():
        nested = nested_model(field.annotation)
        for sub in nested.model_fields if nested else ():
            assert f"`{sub}`" in rows[name][2] or f"`{sub}`" in rows[name][1], f"{name}.{sub} is not in its row"


def test_the_reference_defaults_are_the_models():
    rows = reference_rows()
    for name, field in RunSpec.model_fields.items():
        default_cell = rows[name][1]
        if field.is_required():
            assert default_cell == "required", name
        elif field.default_factory is list:
            assert default_cell == "`[]`", name
        elif field.default_factory is dict:
            assert default_cell == "`{}`", name
        elif isinstance(field.default, (int, str)) and not isinstance(field.default, bool):
            assert default_cell == f"`{field.default}`", name
        elif field.default is None and nested_model(field.annotation) is None:
            assert default_cell and default_cell != "required", name
    for name, sub, shown in (("checkpoint", "interval_steps", "(100)"), ("checkpoint", "keep_last", "(3)"),
                             ("sweep", "metric", "(`loss`)"), ("sweep", "goal", "(`min`)")):
        model = nested_model(RunSpec.model_fields[name].annotation)
        assert f"`{sub}` {shown}" in rows[name][2] and str(model.model_fields[sub].default) in shown


MAP_TOPICS = ("a run.yaml field", "a diagnosis category", "a Slurm query", "a web page", "a prolog/epilog check",
              "a run template", "a metric or alert")


def test_the_map_covers_each_kind_of_change():
    rows = [line for line in section(DESIGN, "Where to change what").splitlines() if line.startswith("| a ")]
    topics = [row.split("|")[1].strip() for row in rows]
    assert set(MAP_TOPICS) <= set(topics), set(MAP_TOPICS) - set(topics)
    assert all(row.count("|") == 4 and "`" in row.split("|")[2] and "`" in row.split("|")[3] for row in rows)


def repo_paths(text: str) -> list[str]:
    return sorted({t for t in re.findall(r"`([^`\s]+)`", text) if t.startswith(TOP_DIRS)})


@pytest.mark.parametrize("where,text", [("map", section(DESIGN, "Where to change what")),
                                        ("design", DESIGN), ("README", README)])
def test_every_path_named_exists(where, text):
    paths = repo_paths(text)
    assert where != "map" or len(paths) > 40
    missing = []
    for path in paths:
        if "*" in path:
            found = list(REPO.glob(path))
        else:  # `.../<name>.sbatch.j2`: the folder it goes in
            found = [p for p in [REPO / path.split("<", 1)[0]] if p.exists()]
        if not found:
            missing.append(path)
    assert not missing, f"{where} names paths that do not exist: {missing}"


@pytest.mark.parametrize("name,text,base", [("README", README, REPO), ("design", DESIGN, REPO / "docs")])
def test_links_resolve(name, text, base):
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        file = (base / path) if path else base / ("README.md" if name == "README" else "design.md")
        assert file.exists(), f"{name} links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", file.read_text(), re.M)
            assert anchor in {slug(h) for h in headings}, f"{name} links to {target}: no such heading"


def test_cited_numbers_are_in_the_cited_results():
    results = REPO / "benchmarks" / "results"
    whole = (results / "cli_whole_process.txt").read_text()
    assert "`status RUN` takes 2.92×" in README and re.search(r"^status RUN .* 2\.92x ", whole, re.M)
    ratios = [float(r) for r in re.findall(r"^\s*\S+\s+(?:no|yes)\s+\d+\s+\S+\s+(\d\.\d\d)\s",
                                           (results / "gpu_memory_h200.txt").read_text(), re.M)]
    assert f"estimated over measured peak {min(ratios):.2f}–{max(ratios):.2f}" in README.replace("\n", " ")
    web = (results / "web_pages.txt").read_text()
    assert "ratio 0.65x" in web and "ratio 1.48x" in web and "0.65× of `ls -n 1000`, Queue page 1.48×" in DESIGN
    trials = json.loads((results / "checkpoint_fault_injection.txt").read_text().splitlines()[-1])
    assert trials["partial_resumes"] == 0 and trials["finished_saves_lost"] == 0
    assert f"{trials['killed_mid_save']}/{trials['trials']} kill -9\ntrials never resumed a partial" in DESIGN
    for cited in re.findall(r"benchmarks/results/[\w.]+", README + DESIGN):
        assert (REPO / cited).is_file(), cited


def test_what_the_readme_says_init_writes_on_the_local_cluster(local_site):
    usage = " ".join(section(README, "Usage").split())
    one, two = first_run_shape("torchrun", local_site), first_run_shape("fsdp", local_site)
    most = local_site.partitions[two.partition].gpus_per_node
    assert (f"torchrun on `{one.partition}` with {one.gpus_per_node} GPU; the others on `{two.partition}` with "
            f"{two.gpus_per_node} of its {most}") in usage
    assert all(first_run_shape(t, local_site) == two for t in ("hf-lora", "deepspeed"))
