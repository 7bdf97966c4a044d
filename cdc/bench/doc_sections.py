"""Sections of docs/benchmarks.md, each written by its own command: a section runs from its
``## `` heading to the next ``## `` heading (or the end), so replacing one keeps every other
(`cdc bench race` the race, `cdc bench soak` the soak, `cdc bench report` the rest)."""

from __future__ import annotations


def _bounds(text: str, heading: str) -> tuple[int, int] | None:
    if text.startswith(heading + "\n") or text == heading:
        start = 0
    else:
        start = text.find("\n" + heading + "\n")
        if start < 0:
            return None
        start += 1
    nxt = text.find("\n## ", start + len(heading))
    return start, (nxt + 1 if nxt >= 0 else len(text))


def section_of(text: str, heading: str) -> str | None:
    """The section under ``heading`` in ``text`` (heading included), or None."""
    b = _bounds(text, heading)
    return text[b[0]:b[1]] if b else None


def with_section(text: str, heading: str, section: str) -> str:
    """``text`` with the section under ``heading`` replaced by ``section`` (which starts with
    that heading), in its place; appended at the end when ``text`` has none."""
    body = section.rstrip("\n") + "\n"
    b = _bounds(text, heading)
    if b is None:
        head = text.rstrip("\n")
        return (head + "\n\n" if head else "") + body
    start, end = b
    tail = text[end:]
    return text[:start] + body + ("\n" + tail if tail else "")


def with_leading_section(text: str, heading: str, section: str) -> str:
    """``text`` with the section under ``heading`` replaced by ``section`` in its place, or, when
    ``text`` has none, put before its first ``## `` section (after the title and its lead)."""
    if section_of(text, heading) is not None:
        return with_section(text, heading, section)
    body = section.rstrip("\n") + "\n"
    if text.startswith("## "):
        return body + "\n" + text
    first = text.find("\n## ")
    if first < 0:
        return with_section(text, heading, section)
    return text[:first + 1] + body + "\n" + text[first + 1:]
