"""A pattern stream's rule: which topics it holds (a regular expression, matching a topic's whole name),
the table each lands in (a template of the topic's name and the expression's groups), and its members,
one per topic, each run as a stream of its own tables and offsets inside the pattern stream's worker."""

from __future__ import annotations

import dataclasses
import re
import string
from dataclasses import dataclass

from appliance.core.errors import InvalidName, TopicPatternError
from appliance.model.mapping import Mapping
from appliance.model.names import check_table_name
from appliance.model.stream import StreamDef

_NOT_NAME = re.compile(r"[^a-z0-9_]")


def name_part(value: str) -> str:
    """A topic's name, or a piece of it, as a table name takes it: lowercase, other characters as `_`."""
    return _NOT_NAME.sub("_", value.lower())


@dataclass(frozen=True)
class TopicPattern:
    """A regular expression over topic names and a table template: `{topic}`, `{1}`, `{2}`... its groups."""

    pattern: str
    template: str

    @classmethod
    def parse(cls, pattern: str, template: str) -> TopicPattern:
        """Both checked: the expression compiles, the template names only `{topic}` and groups it has,
        at least one of them (else every topic would land in one table), and makes a NAMESPACE.TABLE."""
        try:
            groups = re.compile(pattern).groups
        except re.error as exc:
            raise TopicPatternError(f"topic pattern {pattern!r} is not a valid regular expression: {exc}") from None
        fields = []
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise TopicPatternError(f"table template {template!r}: {exc}") from None
        for _, field, spec, conversion in parsed:
            if field is None:
                continue
            if spec or conversion or not (field == "topic" or field.isdigit() and 1 <= int(field) <= groups):
                has = f"its groups are {{1}}..{{{groups}}}" if groups else "it has no group"
                raise TopicPatternError(f"table template {template!r} names {{{field}}}: use {{topic}} or a group "
                                        f"of the pattern ({has})")
            fields.append(field)
        if not fields:
            raise TopicPatternError(f"table template {template!r} names neither {{topic}} nor a group: every topic "
                                    "would land in the same table")
        made = cls(pattern, template)
        try:
            check_table_name(made.example())
        except InvalidName as exc:
            raise TopicPatternError(f"table template {template!r} makes no table name: {exc}") from None
        return made

    def example(self) -> str:
        """The template made with `x` for every field: the name checks a template's literal parts."""
        return self._render("x", ("x",) * re.compile(self.pattern).groups)

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None

    def table_for(self, topic: str) -> str:
        """The table `topic` lands in; InvalidName when the name made is none (a leading digit is prefixed `_`)."""
        found = re.fullmatch(self.pattern, topic)
        if found is None:
            raise TopicPatternError(f"topic {topic!r} does not match the pattern {self.pattern!r}")
        name = self._render(topic, found.groups(default=""))
        name = ".".join(f"_{part}" if part[:1].isdigit() else part for part in name.split("."))
        check_table_name(name)
        return name

    def _render(self, topic: str, groups: tuple[str, ...]) -> str:
        # `{0}` is refused by `parse`: the topic is `{topic}`
        return self.template.format(name_part(topic), *map(name_part, groups), topic=name_part(topic))


@dataclass(frozen=True)
class Member:
    """One topic of a pattern stream: its tables, its own id (its offsets' key in the tables' snapshots),
    the mapping and key it was created with, and since when its topic is gone from the cluster."""

    stream: str
    topic: str
    id: str
    table: str
    dead_letter_table: str
    mapping: Mapping
    start_positions: dict[int, int]
    created_at: str
    key: tuple[str, ...] = ()
    subject: str = ""
    removed_at: str = ""  # its topic left the cluster: its ingest stopped, its tables stay

    @property
    def active(self) -> bool:
        return not self.removed_at


def member_stream(stream: StreamDef, member: Member) -> StreamDef:
    """A member as the batch path runs it: the pattern stream's settings with the member's topic, tables,
    id, mapping and key (the name stays the pattern stream's: its status, events and batches)."""
    return dataclasses.replace(stream, id=member.id, topic=member.topic, table=member.table,
                               dead_letter_table=member.dead_letter_table, mapping=member.mapping,
                               start_positions=member.start_positions, created_at=member.created_at,
                               key=member.key or stream.key, subject=member.subject or stream.subject,
                               topic_pattern="", table_template="")


def changed_topics(pattern: TopicPattern, members: dict[str, Member], topics: list[str]
                   ) -> tuple[list[str], list[str]]:
    """What the cluster's `topics` change: (matching topics not yet members, active members' topics gone)."""
    present = set(topics)
    new = [t for t in sorted(present) if t not in members and pattern.matches(t)]
    gone = sorted(t for t, m in members.items() if m.active and t not in present)
    return new, gone
