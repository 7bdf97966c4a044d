"""docs/benchmarks.md's sections: replacing one keeps every other (the race once swallowed
the soak section after it)."""

from hypothesis import given
from hypothesis import strategies as st

from cdc.bench.doc_sections import section_of, with_section

DOC = ("# Benchmarks\n\nintro\n\n## Stream\n\nstream figures\n\n"
       "## The race\n\nold race\n\n| a | b |\n\n## Soak\n\nsoak figures\n")


def test_a_section_runs_to_the_next_heading():
    assert section_of(DOC, "## The race") == "## The race\n\nold race\n\n| a | b |\n\n"
    assert section_of(DOC, "## Soak") == "## Soak\n\nsoak figures\n"
    assert section_of(DOC, "## Missing") is None
    assert section_of(DOC, "## Soa") is None  # a heading is a whole line


def test_replacing_a_section_in_the_middle_keeps_the_ones_after_it():
    text = with_section(DOC, "## The race", "## The race\n\nnew race\n")
    assert text == ("# Benchmarks\n\nintro\n\n## Stream\n\nstream figures\n\n"
                    "## The race\n\nnew race\n\n## Soak\n\nsoak figures\n")


def test_replacing_the_last_section_and_appending_a_new_one():
    text = with_section(DOC, "## Soak", "## Soak\n\nnew soak\n\n\n")
    assert text.endswith("| a | b |\n\n## Soak\n\nnew soak\n")
    assert with_section("# Benchmarks\n", "## Soak", "## Soak\n\nx") == "# Benchmarks\n\n## Soak\n\nx\n"
    assert with_section("", "## Soak", "## Soak\n") == "## Soak\n"


_line = st.text(alphabet="ab #|\n", max_size=20).map(lambda s: s.replace("\n", " "))
_body = st.lists(_line.filter(lambda s: not s.startswith("## ")), max_size=4).map(lambda ls: "\n".join(ls) + "\n")


@given(st.lists(st.tuples(st.sampled_from(["A", "B", "C", "D"]), _body), max_size=4, unique_by=lambda t: t[0]),
       st.sampled_from(["A", "B", "C", "D"]), _body)
def test_only_the_named_section_changes(sections, name, body):
    doc = "# Benchmarks\n\n" + "".join(f"## {n}\n{b}" for n, b in sections)
    new = f"## {name}\n{body}"
    text = with_section(doc, f"## {name}", new)
    assert section_of(text, f"## {name}").rstrip("\n") == new.rstrip("\n")
    for other, b in sections:
        if other != name:
            assert section_of(text, f"## {other}").rstrip("\n") == f"## {other}\n{b}".rstrip("\n")
    assert text.count(f"## {name}\n") == 1


def test_the_lake_section_of_cdc_bench_merge_is_written_alone():
    from cdc.bench.report import LAKE_HEADING, with_lake_section
    run = {"steady_events_per_s": 1000.0, "batches": 4, "phases": {"lake_commit_s": 2.5},
           "files_after_run": 9, "files_after_optimize": 1}
    lake = {"changelog": {**run, "steady_events_per_s": 2000.0}, "delta": run, "iceberg": run,
            "ratios": {"delta/changelog": 0.5, "iceberg/changelog": 0.5}}
    text = with_lake_section(DOC, {"lake": lake})
    assert section_of(text, "## Soak") == "## Soak\n\nsoak figures\n\n"
    assert "| delta only | 1,000 | 0.50 | 4 | 2.5 | 9 | 1 |" in section_of(text, LAKE_HEADING)
    again = with_lake_section(text, {"lake": {**lake, "ratios": {"delta/changelog": 0.6, "iceberg/changelog": 0.5}}})
    assert again.count(LAKE_HEADING) == 1 and "| delta only | 1,000 | 0.60 |" in again
